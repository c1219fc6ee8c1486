// Attention, flash-style: one warp per (query row, head) walks the row's key positions in tiles
// of 32 with an online softmax (running maximum and sum, the accumulator rescaled when the
// maximum grows), so that no score matrix is ever stored. One kernel for prompt and decode rows,
// over the KV cache's block pool (f32 or f16) or over the batch's own rows (an encoder). Each
// output is computed the same way whatever else is in the batch: positions in order, lane l
// scoring position p0 + l, the values summed position by position. A tile's keys go through
// shared memory KEY_SLICE values at a time, each key row read by the whole warp (coalesced), and
// its rows' indices are looked up once; the sums are those of reading them one by one.
#include "portable.cuh"

#define ATTN_TILE 32
#define ATTN_MAX_HEAD 256
#define KV_BLOCK_POSITIONS 32
#define KEY_SLICE 64

// the element `i` of the key or value row of position p (see `attention`)
DEVICE float kv_value(const uint8_t* pool, int64_t row, int64_t dim, int64_t head_at, int i, int f16) {
    const int64_t at = row * dim + head_at + i;
    return f16 ? half_to_float(((const uint16_t*)pool)[at]) : ((const float*)pool)[at];
}

// the row index of position p: in the cache, block tables[kv + p / 32], layer `layer`; in the
// batch (tables null), row kv + p
DEVICE int64_t kv_row(const int32_t* tables, int kv, int p, int n_layer, int layer) {
    if (tables == 0) {
        return (int64_t)kv + p;
    }
    const int64_t block = tables[kv + p / KV_BLOCK_POSITIONS];
    return (block * n_layer + layer) * KV_BLOCK_POSITIONS + p % KV_BLOCK_POSITIONS;
}

// q: rows of n_head heads of dk; rows: (kv, first position, end position) per query row; out:
// rows of n_head heads of dv. Grid (n_head, query rows), 32 threads. dk, dv <= 256.
KERNEL void attention(const float* q, const uint8_t* k, const uint8_t* v, const int32_t* rows, const int32_t* tables, float* out, int n_head, int n_head_kv, int dk, int dv, float scale, int f16, int n_layer, int layer) {
    SHARED float q_head[ATTN_MAX_HEAD];
    SHARED float weights[ATTN_TILE];
    SHARED int64_t tile_rows[ATTN_TILE];
    SHARED float keys[ATTN_TILE][KEY_SLICE + 1];  // + 1: lane l reads row l, no bank conflicts
    const int h = BLOCK_ID;
    const int r = BLOCK_ID_Y;
    const int lane = THREAD_ID;
    const int64_t k_at = (int64_t)(h / (n_head / n_head_kv)) * dk;
    const int64_t v_at = (int64_t)(h / (n_head / n_head_kv)) * dv;
    const int64_t k_dim = (int64_t)n_head_kv * dk;
    const int64_t v_dim = (int64_t)n_head_kv * dv;
    const float* qr = q + ((int64_t)r * n_head + h) * dk;
    for (int i = lane; i < dk; i += WARP_SIZE) {
        q_head[i] = qr[i];
    }
    SYNC_THREADS();
    const int kv = rows[3 * r];
    const int start = rows[3 * r + 1];
    const int end = rows[3 * r + 2];
    const float neg_inf = __int_as_float((int)0xff800000u);
    float running_max = neg_inf;
    float running_sum = 0.0f;
    float acc[ATTN_MAX_HEAD / WARP_SIZE];
    for (int t = 0; t < ATTN_MAX_HEAD / WARP_SIZE; t++) {
        acc[t] = 0.0f;
    }
    for (int p0 = start; p0 < end; p0 += ATTN_TILE) {
        const int p = p0 + lane;
        const int n = end - p0 < ATTN_TILE ? end - p0 : ATTN_TILE;
        tile_rows[lane] = p < end ? kv_row(tables, kv, p, n_layer, layer) : 0;
        SYNC_THREADS();
        // lane l's dot product with key p0 + l, KEY_SLICE values at a time from shared memory
        float dot = 0.0f;
        for (int i0 = 0; i0 < dk; i0 += KEY_SLICE) {
            const int len = dk - i0 < KEY_SLICE ? dk - i0 : KEY_SLICE;
            for (int pp = 0; pp < n; pp++) {
                for (int e = lane; e < len; e += WARP_SIZE) {
                    keys[pp][e] = kv_value(k, tile_rows[pp], k_dim, k_at, i0 + e, f16);
                }
            }
            SYNC_THREADS();
            if (p < end) {
                for (int e = 0; e < len; e++) {
                    dot = dot + q_head[i0 + e] * keys[lane][e];
                }
            }
            SYNC_THREADS();  // the slice is rewritten next
        }
        const float score = p < end ? dot * scale : neg_inf;
        const float new_max = fmaxf(running_max, warp_max_f(score));
        const float correction = expf(running_max - new_max);  // 0 on the first tile
        const float w = p < end ? expf(score - new_max) : 0.0f;
        running_sum = running_sum * correction + warp_sum_f(w);
        running_max = new_max;
        weights[lane] = w;
        SYNC_THREADS();
        for (int t = 0; t < ATTN_MAX_HEAD / WARP_SIZE; t++) {
            acc[t] = acc[t] * correction;
        }
        for (int pp = 0; pp < n; pp++) {
            const int64_t vr = tile_rows[pp];
            const float wp = weights[pp];
            for (int t = 0; t < ATTN_MAX_HEAD / WARP_SIZE; t++) {
                const int d = lane + t * WARP_SIZE;
                if (d < dv) {
                    acc[t] = acc[t] + wp * kv_value(v, vr, v_dim, v_at, d, f16);
                }
            }
        }
        SYNC_THREADS();  // the weights and rows are rewritten by the next tile
    }
    float* o = out + ((int64_t)r * n_head + h) * dv;
    for (int t = 0; t < ATTN_MAX_HEAD / WARP_SIZE; t++) {
        const int d = lane + t * WARP_SIZE;
        if (d < dv) {
            o[d] = running_sum > 0.0f ? acc[t] / running_sum : 0.0f;
        }
    }
}
