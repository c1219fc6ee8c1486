// The device's own instructions against their documented behaviour, for the device check: what
// the CPU execution harness emulates (the tensor cores' fragment layouts) must be what a GPU
// does, before kernels are built on it.
#include "portable.cuh"

// c (16 x 8 int32, row-major) = a (16 x k signed bytes, row-major) · b (8 rows of k signed bytes:
// B's columns) for k 32 or 16, by one mma_s8_16x8x32 or mma_s8_16x8x16 with each lane's
// fragments read in the layout portable.cuh documents. One warp; a, b and c start device
// allocations.
KERNEL void mma_s8_check(const uint8_t* a, const uint8_t* b, int* c, int k) {
    const int lane = THREAD_ID % WARP_SIZE;
    const int g = lane / 4;
    const int t = lane % 4;
    // a start that is not zero: the product is added to it
    int fc[4] = {lane, -lane, 2 * lane, 7};
    if (k == 32) {
        int fa[4];
        fa[0] = (int)load_u32_a4(a + g * 32 + 4 * t);
        fa[1] = (int)load_u32_a4(a + (g + 8) * 32 + 4 * t);
        fa[2] = (int)load_u32_a4(a + g * 32 + 16 + 4 * t);
        fa[3] = (int)load_u32_a4(a + (g + 8) * 32 + 16 + 4 * t);
        int fb[2];
        fb[0] = (int)load_u32_a4(b + g * 32 + 4 * t);
        fb[1] = (int)load_u32_a4(b + g * 32 + 16 + 4 * t);
        mma_s8_16x8x32(fc, fa, fb);
    } else {
        int fa[2];
        fa[0] = (int)load_u32_a4(a + g * 16 + 4 * t);
        fa[1] = (int)load_u32_a4(a + (g + 8) * 16 + 4 * t);
        int fb[1];
        fb[0] = (int)load_u32_a4(b + g * 16 + 4 * t);
        mma_s8_16x8x16(fc, fa, fb);
    }
    c[g * 8 + 2 * t] = fc[0];
    c[g * 8 + 2 * t + 1] = fc[1];
    c[(g + 8) * 8 + 2 * t] = fc[2];
    c[(g + 8) * 8 + 2 * t + 1] = fc[3];
}

// Each thread's results of the warp collectives, portable.cuh's forms (on the harness one
// exchange each) beside plain shuffles, for the check that both give the same bits: out[10 t ..]
// = warp_sum_f, its shuffle loop, warp_max_f, its loop, shfl_floats<3> of (x, 2x, -x) from lane
// 7 · lane + 3 (mod 32), and the same by three shuffles. x: one value per thread.
KERNEL void warp_collectives_check(const float* x, float* out) {
    const int t = THREAD_ID;
    const int lane = t % WARP_SIZE;
    const float v = x[t];
    float sum = v;
    float max = v;
    for (int mask = 16; mask > 0; mask >>= 1) {
        sum += SHFL_XOR(sum, mask);
        max = fmaxf(max, SHFL_XOR(max, mask));
    }
    const float three[3] = {v, 2.0f * v, -v};
    float got[3];
    const int from = (7 * lane + 3) % WARP_SIZE;
    shfl_floats<3>(got, three, from);
    float* o = out + 10 * t;
    o[0] = warp_sum_f(v);
    o[1] = sum;
    o[2] = warp_max_f(v);
    o[3] = max;
    for (int n = 0; n < 3; n++) {
        o[4 + n] = got[n];
        o[7 + n] = SHFL(three[n], from);
    }
}

// A block barrier that the threads before `split` meet at another line of the source than the
// others, for the harness's check that a block's threads meet at one `__syncthreads` (a GPU
// leaves it undefined otherwise); with `split` 0 or the block's size every thread meets the same
// one, and out[t] = t + 1 (mod the block's size): its neighbour's value, through shared memory.
KERNEL void barrier_divergence_check(int* out, int split) {
    SHARED(int, seen, [1024]);
    const int t = THREAD_ID;
    seen[t] = t;
    if (t < split) {
        SYNC_THREADS();
    } else {
        SYNC_THREADS();
    }
    out[t] = seen[(t + 1) % BLOCK_THREADS];
}

// Arithmetic that x86 and a GPU agree on only in range, for the harness's checks of it:
// out[2t] = (int)x[t] (a GPU saturates a float outside int's range and gives 0 for a NaN; x86
// gives INT_MIN) and out[2t + 1] = 0x80000001 >> counts[t] (a GPU's shift by 32 or more gives 0;
// x86 shifts by the count mod 32).
KERNEL void arithmetic_check(const float* x, const int* counts, int* out) {
    const int t = THREAD_ID;
    out[2 * t] = (int)x[t];
    out[2 * t + 1] = (int)(0x80000001u >> counts[t]);
}
