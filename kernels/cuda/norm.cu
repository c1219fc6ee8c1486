// Row normalisations, one block per group of `n` values (a row, or one head of a row): the sum
// in f64 over the block in a fixed order (each thread's strided partial sum, then the block's
// butterfly), one scale per group, as the CPU backend computes them. The RMS norms may also
// write their output's Q8_1 blocks (q8.cuh) for the quantized products that read it next: the
// bytes quantize_q8 would write from the same values, without its launch.
#include "q8.cuh"

// yg = xg · s · w for the n values of group `group`, and with_q their Q8_1 blocks into q (the
// group's n / 32 blocks after those of the groups before it). With_q needs n a multiple of 32
// (the block's threads are one too), so each warp's 32 values of a turn are one block and every
// lane of it takes part.
DEVICE void scale_group(const float* xg, float s, const float* w, float* yg, int n, int64_t group, uint8_t* q, int with_q) {
    for (int i = THREAD_ID; i < n; i += BLOCK_THREADS) {
        const float v = (xg[i] * s) * w[i];
        yg[i] = v;
        if (with_q) {
            quantize_q8_lane(v, q + (group * (n / 32) + i / 32) * (int64_t)sizeof(block_q8_1), i % 32, 1);
        }
    }
}

// y = x / sqrt(mean(x²) + eps) * w, for every group of n values; y may be x (in place). w holds
// w_groups groups of n: group g of the values takes w's group g % w_groups (Mamba-2's grouped
// norm; 1 elsewhere). With with_q, y's Q8_1 blocks into q too.
KERNEL void rms_norm(const float* x, const float* w, float* y, int n, float eps, int w_groups, uint8_t* q, int with_q) {
    SHARED(double, scratch, [32]);
    const float* xg = x + (int64_t)BLOCK_ID * n;
    w += (int64_t)(BLOCK_ID % w_groups) * n;
    float* yg = y + (int64_t)BLOCK_ID * n;
    double sum = 0.0;
    for (int i = THREAD_ID; i < n; i += BLOCK_THREADS) {
        const float v = xg[i];
        sum += (double)(v * v);
    }
    sum = block_sum(sum, scratch);
    const float mean = (float)(sum / n);
    const float s = 1.0f / sqrtf(mean + eps);
    scale_group(xg, s, w, yg, n, BLOCK_ID, q, with_q);
}

// x += r (times scale unless it is 1), then y = rms_norm(x) * w, for every row of n values: a
// residual added as the next norm reads the row, one pass instead of add_scaled and rms_norm,
// with their bits (each thread sums the values it wrote, in rms_norm's order). With with_q, y's
// Q8_1 blocks into q too.
KERNEL void add_rms_norm(float* x, const float* r, float scale, const float* w, float* y, int n, float eps, uint8_t* q, int with_q) {
    SHARED(double, scratch, [32]);
    float* xg = x + (int64_t)BLOCK_ID * n;
    const float* rg = r + (int64_t)BLOCK_ID * n;
    float* yg = y + (int64_t)BLOCK_ID * n;
    double sum = 0.0;
    for (int i = THREAD_ID; i < n; i += BLOCK_THREADS) {
        const float v = scale == 1.0f ? xg[i] + rg[i] : xg[i] + rg[i] * scale;
        xg[i] = v;
        sum += (double)(v * v);
    }
    sum = block_sum(sum, scratch);
    const float mean = (float)(sum / n);
    const float s = 1.0f / sqrtf(mean + eps);
    scale_group(xg, s, w, yg, n, BLOCK_ID, q, with_q);
}

// y = (x - mean) / sqrt(var + eps) * w + b, for every row of n values
KERNEL void layer_norm(const float* x, const float* w, const float* b, float* y, int n, float eps) {
    SHARED(double, scratch, [32]);
    const float* xr = x + (int64_t)BLOCK_ID * n;
    float* yr = y + (int64_t)BLOCK_ID * n;
    double sum = 0.0;
    for (int i = THREAD_ID; i < n; i += BLOCK_THREADS) {
        sum += (double)xr[i];
    }
    sum = block_sum(sum, scratch);
    const float mean = (float)(sum / n);
    double var = 0.0;
    for (int i = THREAD_ID; i < n; i += BLOCK_THREADS) {
        const float d = xr[i] - mean;
        var += (double)(d * d);
    }
    var = block_sum(var, scratch);
    const float s = 1.0f / sqrtf((float)(var / n) + eps);
    for (int i = THREAD_ID; i < n; i += BLOCK_THREADS) {
        yr[i] = ((xr[i] - mean) * s) * w[i] + b[i];
    }
}
