// Feed-forward activations, one thread per element (the functions are activation.cuh's).
#include "activation.cuh"

// gate = act(gate) * up over rows of n values; grid (element blocks of a row, rows)
KERNEL void glu(float* gate, const float* up, int n, int act) {
    const int i = BLOCK_ID * BLOCK_THREADS + THREAD_ID;
    if (i < n) {
        const int64_t at = (int64_t)BLOCK_ID_Y * n + i;
        gate[at] = glu_value(act, gate[at], up[at], i, n);
    }
}

// x = act(x) (SiLU with the C library's exp, as the CPU backend's plain activation)
KERNEL void activate(float* x, int64_t n, int act) {
    const int64_t i = (int64_t)BLOCK_ID * BLOCK_THREADS + THREAD_ID;
    if (i < n) {
        x[i] = activate_one(act, x[i], false);
    }
}
