// The KV cache's element types (`PoolElement` in src/launch/attention.rs): f32, f16, or rows of
// ggml's Q8_0 / Q4_0 blocks of 32 values, the last block of a row padded with zeros; and how one
// element of a row reads back, as ggml dequantizes it (the quant times the f16 scale, one
// rounding).
#pragma once
#include "blocks.cuh"

#define KV_F32 0
#define KV_F16 1
#define KV_Q8_0 2
#define KV_Q4_0 3

// bytes of one row of `dim` values
DEVICE int64_t kv_row_bytes(int64_t dim, int type) {
    const int64_t blocks = (dim + QK8_0 - 1) / QK8_0;
    switch (type) {
        case KV_F32: return 4 * dim;
        case KV_F16: return 2 * dim;
        case KV_Q8_0: return blocks * (int64_t)sizeof(block_q8_0);
        default: return blocks * (int64_t)sizeof(block_q4_0);
    }
}

DEVICE float kv_scale(const uint8_t* d) {
    return half_to_float((uint16_t)(d[0] | (d[1] << 8)));
}

// value i of row `row` of a pool of rows of `dim` values
DEVICE float kv_element(const uint8_t* pool, int64_t row, int64_t dim, int64_t i, int type) {
    if (type == KV_F32) {
        return ((const float*)pool)[row * dim + i];
    }
    if (type == KV_F16) {
        return half_to_float(((const uint16_t*)pool)[row * dim + i]);
    }
    const uint8_t* r = pool + row * kv_row_bytes(dim, type);
    const int j = (int)(i % QK8_0);
    if (type == KV_Q8_0) {
        const block_q8_0* b = (const block_q8_0*)r + i / QK8_0;
        return (float)b->qs[j] * kv_scale(b->d);
    }
    const block_q4_0* b = (const block_q4_0*)r + i / QK4_0;
    const int q = j < QK4_0 / 2 ? b->qs[j] & 0x0F : b->qs[j - QK4_0 / 2] >> 4;
    return (float)(q - 8) * kv_scale(b->d);
}
