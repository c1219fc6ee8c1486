// The KV cache's device storage: blocks of BLOCK_POSITIONS positions holding every layer's rows,
// `[block][layer][position][dim]` (keys and values in two pools), as f32, f16, Q8_0 or Q4_0
// (kvcache.cuh). A quantized row is written as llama.cpp's x86 CPU backend stores it: Q8_0 with
// `id = 127 / amax` and products rounded half to even (as `quantize_q8`), Q4_0 as ggml's reference
// quantizer (the value of largest magnitude, the first of equals, maps to -8).
#include "kvcache.cuh"

#define BLOCK_POSITIONS 32

DEVICE int warp_min_i(int v) {
    return warp_butterfly(v, [](int own, int other) { return other < own ? other : own; });
}

// Row r of `src` (rows of `dim` values) goes to position offsets[r] of block blocks[r], layer
// `layer`; the second row of blocks along z (when the grid has one) writes row r of `src2` into
// `pool2` (rows of dim2 values of type2) at the same places: a layer's keys and values in one
// launch. Grid (thread blocks covering the wider row, rows, 1 or 2); for a quantized type the
// threads cover the row padded to whole blocks of 32, one warp per quant block (the block's
// threads are a multiple of 32).
KERNEL void kv_write(const float* src, const int32_t* blocks, const int32_t* offsets, uint8_t* pool, int dim, int n_layer, int layer, int type, const float* src2, uint8_t* pool2, int dim2, int type2) {
    const int c = BLOCK_ID * BLOCK_THREADS + THREAD_ID;
    const int r = BLOCK_ID_Y;
    if (BLOCK_ID_Z == 1) {
        src = src2;
        pool = pool2;
        dim = dim2;
        type = type2;
    }
    const int64_t row = ((int64_t)blocks[r] * n_layer + layer) * BLOCK_POSITIONS + offsets[r];
    if (type == KV_F32 || type == KV_F16) {
        if (c >= dim) {
            return;
        }
        const float v = src[(int64_t)r * dim + c];
        if (type == KV_F16) {
            ((uint16_t*)pool)[row * dim + c] = float_to_half(v);
        } else {
            ((float*)pool)[row * dim + c] = v;
        }
        return;
    }
    // whole warps leave together, so the shuffles below see every lane
    if (c >= (dim + QK8_0 - 1) / QK8_0 * QK8_0) {
        return;
    }
    const int lane = c % WARP_SIZE;
    const float v = c < dim ? src[(int64_t)r * dim + c] : 0.0f;
    const float amax = warp_max_f(fabsf(v));
    uint8_t* out = pool + row * kv_row_bytes(dim, type);
    float d;
    if (type == KV_Q8_0) {
        d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const float magic = 12582912.0f;  // 1.5 · 2^23: the sum rounds to an integer, halves to even
        block_q8_0* b = (block_q8_0*)out + c / QK8_0;
        b->qs[lane] = (int8_t)(int)((v * id + magic) - magic);
        if (lane == 0) {
            const uint16_t dh = float_to_half(d);
            b->d[0] = (uint8_t)(dh & 0xff);
            b->d[1] = (uint8_t)(dh >> 8);
        }
        return;
    }
    // Q4_0: the first lane holding the largest magnitude gives the signed maximum
    const int first = warp_min_i(fabsf(v) == amax ? lane : WARP_SIZE);
    const float max = SHFL(v, first);
    d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const int t = (int)(v * id + 8.5f);
    const int q = t < 15 ? t : 15;
    const int high = SHFL_XOR(q, 16);  // lane l < 16 packs value l + 16 into its high nibble
    block_q4_0* b = (block_q4_0*)out + c / QK4_0;
    if (lane < QK4_0 / 2) {
        b->qs[lane] = (uint8_t)(q | (high << 4));
    }
    if (lane == 0) {
        const uint16_t dh = float_to_half(d);
        b->d[0] = (uint8_t)(dh & 0xff);
        b->d[1] = (uint8_t)(dh >> 8);
    }
}
