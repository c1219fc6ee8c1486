// Activation quantization to Q8_0 / Q8_1, as llama.cpp's x86 CPU backend (and the engine's CPU
// backend) quantizes matmul activations: per block of 32, `id = 127 / amax`, the products
// rounded half to even, `d = amax / 127` stored as f16 (and for Q8_1 `s = d · Σq`). One warp
// per block, one lane per value; the maximum and the integer sum are exact in any order.
#include "blocks.cuh"

DEVICE int warp_sum_i(int v) {
    for (int mask = 16; mask > 0; mask >>= 1) {
        v += SHFL_XOR(v, mask);
    }
    return v;
}

// x: n_blocks · 32 values; out: n_blocks blocks of Q8_0 (with_sum 0) or Q8_1 (with_sum 1).
// The block's threads must be a multiple of 32.
KERNEL void quantize_q8(const float* x, uint8_t* out, int64_t n_blocks, int with_sum) {
    const int64_t blk = ((int64_t)BLOCK_ID * BLOCK_THREADS + THREAD_ID) / WARP_SIZE;
    const int lane = THREAD_ID % WARP_SIZE;
    // whole warps leave together, so the shuffles below see every lane
    if (blk >= n_blocks) {
        return;
    }
    const float v = x[blk * 32 + lane];
    const float amax = warp_max_f(fabsf(v));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const float magic = 12582912.0f;  // 1.5 · 2^23: the sum rounds to an integer, halves to even
    const int q = (int)((v * id + magic) - magic);
    const int bytes = with_sum ? (int)sizeof(block_q8_1) : (int)sizeof(block_q8_0);
    uint8_t* b = out + blk * bytes;
    b[(with_sum ? 4 : 2) + lane] = (uint8_t)(int8_t)q;
    const int sum = warp_sum_i(q);
    if (lane == 0) {
        const uint16_t dh = float_to_half(d);
        b[0] = (uint8_t)(dh & 0xff);
        b[1] = (uint8_t)(dh >> 8);
        if (with_sum) {
            const uint16_t sh = float_to_half((float)sum * d);
            b[2] = (uint8_t)(sh & 0xff);
            b[3] = (uint8_t)(sh >> 8);
        }
    }
}
