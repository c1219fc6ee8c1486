// The Walsh-Hadamard rotation of blocks of values, which a quantized KV cache stores its keys
// and values under (an outlier's magnitude spread over its block, so the block's scale fits the
// rest): each block of n values (n a power of two, at most 1024) multiplied by the orthonormal
// Walsh-Hadamard matrix of order n, in Sylvester's order, which is its own inverse. Butterflies
// at distances 1, 2, 4, ... (the lower of a pair gets a + b, the upper a - b), then the scale
// 1 / sqrt(n): the CPU backend's operations in its order, so the same bits.
#include "portable.cuh"

#define HADAMARD_MAX 1024

// x: blocks of n values, one thread block per block of values, one thread per value.
KERNEL void hadamard(float* x, int n, float scale) {
    SHARED(float, v, [HADAMARD_MAX]);
    const int64_t at = (int64_t)BLOCK_ID * n;
    const int i = THREAD_ID;
    v[i] = x[at + i];
    SYNC_THREADS();
    for (int s = 1; s < n; s <<= 1) {
        const float a = v[i & ~s];
        const float b = v[i | s];
        SYNC_THREADS();
        v[i] = (i & s) ? a - b : a + b;
        SYNC_THREADS();
    }
    x[at + i] = v[i] * scale;
}
