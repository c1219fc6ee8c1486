// The body shared by the matrix kernels: one warp per output column j (a weight row), a tile of
// ROWS activation rows per block along y. Lane l takes the weight row's chunks l, l + 32, ...
// in order, each unpacked once for the tile; the lanes' partial sums meet in the warp's fixed
// butterfly. An output's arithmetic is the same for every ROWS and every batch, so matvec
// (ROWS 1) and matmul (ROWS 8) give bitwise the same row whatever the batch (batch invariance).
#pragma once
#include "vecdot.cuh"

#define MULMAT_WARPS 4  // warps (output columns) per block: blocks of 128 threads

// Each row's partial sums meet in the warp's butterfly; lane 0 writes out[r][j] (+ bias[j]).
template <int ROWS>
DEVICE void store_outputs(const float* acc, int lane, int j, int r0, int batch, const float* bias, float* out, int n_out, int has_bias) {
    for (int t = 0; t < ROWS; t++) {
        if (r0 + t < batch) {
            const float v = warp_sum_f(acc[t]);
            if (lane == 0) {
                out[(int64_t)(r0 + t) * n_out + j] = has_bias ? v + bias[j] : v;
            }
        }
    }
}

// out[r][j] = Σ_c chunk_dot(w[j] chunk c, x[r] block c) (+ bias[j]) for the rows r0 .. r0 + ROWS;
// x: rows of n_chunks Q8_1 blocks. Grid (ceil(n_out / MULMAT_WARPS), _). `w` starts a device
// allocation or a whole number of weight rows into one, `xq` a whole number of rows into one
// (the aligned loads of unpack_chunk).
template <int ROWS, int TYPE>
DEVICE void mul_mat_q_typed(const uint8_t* w, int64_t row_bytes, int n_chunks, const uint8_t* xq, int r0, int batch, const float* bias,
                            float* out, int n_out, int has_bias) {
    const int lane = THREAD_ID % WARP_SIZE;
    const int j = BLOCK_ID * MULMAT_WARPS + THREAD_ID / WARP_SIZE;
    if (j >= n_out) {
        return;  // the whole warp: its shuffles below see every lane
    }
    const uint8_t* row = w + (int64_t)j * row_bytes;
    float acc[ROWS];
    for (int t = 0; t < ROWS; t++) {
        acc[t] = 0.0f;
    }
    for (int c = lane; c < n_chunks; c += WARP_SIZE) {
        Chunk chunk;
        unpack_chunk<TYPE>(row, c, &chunk);
        for (int t = 0; t < ROWS; t++) {
            if (r0 + t < batch) {
                acc[t] = acc[t] + chunk_dot(&chunk, xq + ((int64_t)(r0 + t) * n_chunks + c) * sizeof(block_q8_1));
            }
        }
    }
    store_outputs<ROWS>(acc, lane, j, r0, batch, bias, out, n_out, has_bias);
}

// the same for the weight type `type`, dispatched once per launch; a type without a kernel gives
// NaN outputs, which show at once
template <int ROWS>
DEVICE void mul_mat_q_tile(const uint8_t* w, int64_t row_bytes, int type, int n_chunks, const uint8_t* xq, int r0, int batch, const float* bias,
                           float* out, int n_out, int has_bias) {
#define MUL_MAT_Q_CASE(T) \
    case T:               \
        mul_mat_q_typed<ROWS, T>(w, row_bytes, n_chunks, xq, r0, batch, bias, out, n_out, has_bias); \
        return;
    switch (type) {
        MUL_MAT_Q_CASE(TYPE_Q4_0)
        MUL_MAT_Q_CASE(TYPE_Q4_1)
        MUL_MAT_Q_CASE(TYPE_Q5_0)
        MUL_MAT_Q_CASE(TYPE_Q5_1)
        MUL_MAT_Q_CASE(TYPE_Q8_0)
        MUL_MAT_Q_CASE(TYPE_Q2_K)
        MUL_MAT_Q_CASE(TYPE_Q3_K)
        MUL_MAT_Q_CASE(TYPE_Q4_K)
        MUL_MAT_Q_CASE(TYPE_Q5_K)
        MUL_MAT_Q_CASE(TYPE_Q6_K)
        MUL_MAT_Q_CASE(TYPE_IQ4_NL)
        MUL_MAT_Q_CASE(TYPE_IQ4_XS)
        MUL_MAT_Q_CASE(TYPE_MXFP4)
        MUL_MAT_Q_CASE(TYPE_IQ2_XXS)
        MUL_MAT_Q_CASE(TYPE_IQ2_XS)
        MUL_MAT_Q_CASE(TYPE_IQ2_S)
        MUL_MAT_Q_CASE(TYPE_IQ3_XXS)
        MUL_MAT_Q_CASE(TYPE_IQ3_S)
        MUL_MAT_Q_CASE(TYPE_IQ1_S)
        MUL_MAT_Q_CASE(TYPE_IQ1_M)
        default: {
            float nan[ROWS];
            for (int t = 0; t < ROWS; t++) {
                nan[t] = __int_as_float(0x7fc00000);
            }
            const int j = BLOCK_ID * MULMAT_WARPS + THREAD_ID / WARP_SIZE;
            if (j < n_out) {
                store_outputs<ROWS>(nan, THREAD_ID % WARP_SIZE, j, r0, batch, bias, out, n_out, has_bias);
            }
        }
    }
#undef MUL_MAT_Q_CASE
}

// a float weight: F32, F16 or BF16
DEVICE float float_weight(const uint8_t* row, int type, int e) {
    if (type == TYPE_F32) {
        return __int_as_float((int)le32(row + 4 * (int64_t)e));
    }
    const uint16_t h = (uint16_t)(row[2 * (int64_t)e] | (row[2 * (int64_t)e + 1] << 8));
    if (type == TYPE_F16) {
        return half_to_float(h);
    }
    if (type == TYPE_BF16) {
        return __int_as_float((int)((uint32_t)h << 16));
    }
    return __int_as_float(0x7fc00000);
}

// the same over float weights and f32 activations (rows of `cols`): lane l takes the values
// l, l + 32, ... of the row, in order
template <int ROWS>
DEVICE void mul_mat_f_tile(const uint8_t* w, int64_t row_bytes, int type, int cols, const float* x, int r0, int batch, const float* bias,
                           float* out, int n_out, int has_bias) {
    const int lane = THREAD_ID % WARP_SIZE;
    const int j = BLOCK_ID * MULMAT_WARPS + THREAD_ID / WARP_SIZE;
    if (j >= n_out) {
        return;
    }
    const uint8_t* row = w + (int64_t)j * row_bytes;
    float acc[ROWS];
    for (int t = 0; t < ROWS; t++) {
        acc[t] = 0.0f;
    }
    for (int e = lane; e < cols; e += WARP_SIZE) {
        const float wv = float_weight(row, type, e);
        for (int t = 0; t < ROWS; t++) {
            if (r0 + t < batch) {
                acc[t] = acc[t] + wv * x[(int64_t)(r0 + t) * cols + e];
            }
        }
    }
    store_outputs<ROWS>(acc, lane, j, r0, batch, bias, out, n_out, has_bias);
}
