// One warp writes one block of 32 activations as Q8_0 or Q8_1, as llama.cpp's x86 CPU backend
// (and the engine's CPU backend) quantizes matmul activations: `id = 127 / amax`, the products
// rounded half to even, `d = amax / 127` stored as f16 (and for Q8_1 `s = d · Σq`). The maximum
// and the integer sum are exact in any order, so every kernel that quantizes through this
// writes the same bytes for the same values (quantize.cu's pass, the norms' second pass).
#pragma once
#include "blocks.cuh"

DEVICE int warp_sum_i(int v) {
    return warp_butterfly(v, [](int a, int b) { return a + b; });
}

// Lane `lane` of a whole warp holds value `lane` of the block at `b`; every lane must call.
DEVICE void quantize_q8_lane(float v, uint8_t* b, int lane, int with_sum) {
    const float amax = warp_max_f(fabsf(v));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const float magic = 12582912.0f;  // 1.5 · 2^23: the sum rounds to an integer, halves to even
    const int q = (int)((v * id + magic) - magic);
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
