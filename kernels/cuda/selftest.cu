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
