// Element-wise kernels over f32 activations: residual adds, biases, experts' weighted rows,
// scaling, the logit soft cap, row
// selection. One thread per element; each element's arithmetic is the CPU backend's, so the
// result does not depend on the launch.
#include "portable.cuh"

// x[i] += y[i] * scale (x[i] += y[i] when the scale is 1, as on the CPU: no product rounding)
KERNEL void add_scaled(float* x, const float* y, float scale, int64_t n) {
    const int64_t i = (int64_t)BLOCK_ID * BLOCK_THREADS + THREAD_ID;
    if (i < n) {
        x[i] = scale == 1.0f ? x[i] + y[i] : x[i] + y[i] * scale;
    }
}

// x[i] += b[i % cols]: a bias added to every row of `cols` values
KERNEL void add_bias(float* x, const float* b, int cols, int64_t n) {
    const int64_t i = (int64_t)BLOCK_ID * BLOCK_THREADS + THREAD_ID;
    if (i < n) {
        x[i] = x[i] + b[i % cols];
    }
}

KERNEL void scale(float* x, float s, int64_t n) {
    const int64_t i = (int64_t)BLOCK_ID * BLOCK_THREADS + THREAD_ID;
    if (i < n) {
        x[i] = x[i] * s;
    }
}

// x = tanh(x / cap) * cap
KERNEL void softcap(float* x, float cap, int64_t n) {
    const int64_t i = (int64_t)BLOCK_ID * BLOCK_THREADS + THREAD_ID;
    if (i < n) {
        x[i] = tanhf(x[i] / cap) * cap;
    }
}

// out row out_rows[i] += weights[i] · src row src_rows[i] (the product rounded, then the sum, as
// the CPU computes it); grid (row blocks of `cols`, pairs). No out row appears twice in a launch.
KERNEL void add_weighted_rows(float* out, const float* src, const int32_t* src_rows, const int32_t* out_rows, const float* weights, int cols) {
    const int c = BLOCK_ID * BLOCK_THREADS + THREAD_ID;
    const int i = BLOCK_ID_Y;
    if (c < cols) {
        const float v = src[(int64_t)src_rows[i] * cols + c] * weights[i];
        out[(int64_t)out_rows[i] * cols + c] = out[(int64_t)out_rows[i] * cols + c] + v;
    }
}

// for every row and every block j of `width` values (n = width * blocks): out's block at
// to_start + j * to_stride = x's block at from_start + j * from_stride; grid (blocks of n, rows)
KERNEL void copy_columns(float* out, const float* x, int out_cols, int x_cols, int to_start, int to_stride, int from_start, int from_stride, int width, int n) {
    const int c = BLOCK_ID * BLOCK_THREADS + THREAD_ID;
    const int r = BLOCK_ID_Y;
    if (c < n) {
        const int j = c / width, w = c % width;
        out[(int64_t)r * out_cols + to_start + j * to_stride + w] = x[(int64_t)r * x_cols + from_start + j * from_stride + w];
    }
}

// out row r = x row rows[r]; grid (row blocks of `cols`, selected rows)
KERNEL void select_rows(const float* x, const int32_t* rows, float* out, int cols) {
    const int c = BLOCK_ID * BLOCK_THREADS + THREAD_ID;
    const int r = BLOCK_ID_Y;
    if (c < cols) {
        out[(int64_t)r * cols + c] = x[(int64_t)rows[r] * cols + c];
    }
}
