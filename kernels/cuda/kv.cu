// The KV cache's device storage: blocks of BLOCK_POSITIONS positions holding every layer's rows,
// `[block][layer][position][dim]` (keys and values in two pools), as f32 or f16.
#include "portable.cuh"

#define BLOCK_POSITIONS 32

// Row r of `src` (rows of `dim` values) goes to position offsets[r] of block blocks[r], layer
// `layer`. Grid (value blocks of a row, rows).
KERNEL void kv_write(const float* src, const int32_t* blocks, const int32_t* offsets, uint8_t* pool, int dim, int n_layer, int layer, int f16) {
    const int c = BLOCK_ID * BLOCK_THREADS + THREAD_ID;
    const int r = BLOCK_ID_Y;
    if (c >= dim) {
        return;
    }
    const int64_t at = (((int64_t)blocks[r] * n_layer + layer) * BLOCK_POSITIONS + offsets[r]) * dim + c;
    const float v = src[(int64_t)r * dim + c];
    if (f16) {
        ((uint16_t*)pool)[at] = float_to_half(v);
    } else {
        ((float*)pool)[at] = v;
    }
}
