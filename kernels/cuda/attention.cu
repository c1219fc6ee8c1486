// Attention, flash-style: one warp per (query row, head) walks the row's key positions in tiles
// of 32 with an online softmax (running maximum and sum, the accumulator rescaled when the
// maximum grows), so that no score matrix is ever stored. Over the KV cache's block pool (f32, f16,
// Q8_0 or Q4_0, keys and values each their own type, read in place) or over the batch's own rows
// (an encoder).
//
// A row's positions are cut into splits of ATTN_SPLIT at multiples of ATTN_SPLIT (absolute
// positions, so a row's cuts do not depend on the batch); each split gives a partial result
// (its maximum score, its sum of exponentials, its weighted values), and the row's output is the
// fold of its partials in split order, from an empty one. `attention` runs a row's splits one
// after another in one block; for few rows (decoding) `attention_split` runs each split as a
// block of its own, and `attention_fold` folds the partials after (flash decoding). Both do the
// same operations in the same order, so an output is the same bits whichever ran it and
// whatever else is in the batch. Inside a split: positions in order, lane l scoring position
// p0 + l, the values summed position by position; a tile's keys go through shared memory
// KEY_SLICE values at a time, each key row read by the whole warp (coalesced), and its rows'
// indices are looked up once.
//
// The query heads that share a KV head (grouped-query attention) run side by side in one block
// of `attention` / `attention_split`, a warp each (up to ATTN_GROUP_MAX): a tile's keys go
// through shared memory once for all of them, and the values they read are the same rows. Each
// warp does exactly what a block of one head does, so the grouping never changes a bit.
//
// Each kernel comes in two widths: heads up to ATTN_MAX_HEAD, and the `_wide` ones for keys up to
// ATTN_WIDE_KEY and values up to ATTN_WIDE_VALUE (multi-head latent attention's absorbed form: a
// key of the 512-value latent and a 64-value rotary part, the latent as the value), whose lanes
// hold twice the accumulators. The arithmetic is the same; only the registers differ.
//
// The kernels that write outputs (`attention`, `attention_fold`) may also write them as Q8_1
// blocks (q8.cuh) for the output projection: lane l holds value l + 32 t of a head in slot t, so
// with heads of whole blocks each slot is one block, quantized by the warp as it is written.
#include "kvcache.cuh"
#include "q8.cuh"

#define ATTN_TILE 32
#define ATTN_MAX_HEAD 256
#define ATTN_WIDE_KEY 576
#define ATTN_WIDE_VALUE 512
#define ATTN_SPLIT 256
#define KV_BLOCK_POSITIONS 32
#define KEY_SLICE 64
#define ATTN_GROUP_MAX 8

// the row index of position p: in the cache, block tables[kv + p / 32], layer `layer`; in the
// batch (tables null), row kv + p
DEVICE int64_t kv_row(const int32_t* tables, int kv, int p, int n_layer, int layer) {
    if (tables == 0) {
        return (int64_t)kv + p;
    }
    const int64_t block = tables[kv + p / KV_BLOCK_POSITIONS];
    return (block * n_layer + layer) * KV_BLOCK_POSITIONS + p % KV_BLOCK_POSITIONS;
}

// What a range of positions gives one (row, head), as each lane holds it: the largest score, the
// sum of exp(score - max), and the values weighted by those (value d = lane + 32 t in acc[t], for
// values of up to 32 · SLOTS).
template <int SLOTS>
struct Partial {
    float max;
    float sum;
    float acc[SLOTS];
};

template <int SLOTS>
DEVICE void empty_partial(Partial<SLOTS>* p) {
    p->max = __int_as_float((int)0xff800000u);  // -inf
    p->sum = 0.0f;
    for (int t = 0; t < SLOTS; t++) {
        p->acc[t] = 0.0f;
    }
}

// `total` followed by `next`: both rescaled to the larger maximum. From an empty total this is
// `next` exactly (exp(-inf) = 0, exp(0) = 1).
template <int SLOTS>
DEVICE void fold(Partial<SLOTS>* total, const Partial<SLOTS>* next) {
    const float m = fmaxf(total->max, next->max);
    const float a = expf(total->max - m);
    const float b = expf(next->max - m);
    total->sum = total->sum * a + next->sum * b;
    for (int t = 0; t < SLOTS; t++) {
        total->acc[t] = total->acc[t] * a + next->acc[t] * b;
    }
    total->max = m;
}

// a sink's logit (gpt-oss) as a partial: its own maximum, sum exp(0) = 1, no values; folded in
// after a row's last split, as ggml's flash attention folds it
template <int SLOTS>
DEVICE void fold_sink(Partial<SLOTS>* total, const float* sinks, int h) {
    if (sinks) {
        Partial<SLOTS> sink;
        empty_partial(&sink);
        sink.max = sinks[h];
        sink.sum = 1.0f;
        fold(total, &sink);
    }
}

// the output of (row, head) `head` (its index among the rows' heads): the weighted values over
// the sum, at o; with with_q their Q8_1 blocks too, the head's dv / 32 after those of the heads
// before it (dv a multiple of 32: each slot's lanes are all in or all out)
template <int SLOTS>
DEVICE void write_output(float* o, const Partial<SLOTS>* total, int dv, int lane, int64_t head, uint8_t* q, int with_q) {
    for (int t = 0; t < SLOTS; t++) {
        const int d = lane + t * WARP_SIZE;
        if (d < dv) {
            const float value = total->sum > 0.0f ? total->acc[t] / total->sum : 0.0f;
            o[d] = value;
            if (with_q) {
                quantize_q8_lane(value, q + (head * (dv / 32) + t) * (int64_t)sizeof(block_q8_1), lane, 1);
            }
        }
    }
}

// A partial in memory: max, sum, then dv weighted values.
DEVICE float* partial_at(float* parts, int r, int h, int z, int n_head, int max_splits, int dv) {
    return parts + (((int64_t)r * n_head + h) * max_splits + z) * (2 + dv);
}

// Block (g, r[, z]) of either launch, for keys of up to KEY and values of up to 32 · SLOTS: its
// warp w takes head h = g · heads + w (`heads`, the block's warps, divide the heads that share a
// KV head). One split (z of the row's, `parts` set): its partial goes to `parts`; else every
// split of the row, folded, to `out` (and with with_q its Q8_1 blocks to out_q).
template <int KEY, int SLOTS>
DEVICE void attend(const float* q, const uint8_t* k, const uint8_t* v, const int32_t* rows, const int32_t* tables, const float* sinks, float* out, float* parts, int max_splits, int n_head, int n_head_kv, int dk, int dv, int v_row, float scale, float softcap, int k_type, int v_type, int n_layer, int layer, uint8_t* out_q, int with_q) {
    SHARED(float, q_heads, [ATTN_GROUP_MAX][KEY]);
    SHARED(float, tile_weights, [ATTN_GROUP_MAX][ATTN_TILE]);
    SHARED(int64_t, tile_rows, [ATTN_TILE]);
    SHARED(float, keys, [ATTN_TILE][KEY_SLICE + 1]);  // + 1: lane l reads row l, no bank conflicts
    const int warp = THREAD_ID / WARP_SIZE;
    const int h = BLOCK_ID * (BLOCK_THREADS / WARP_SIZE) + warp;
    const int r = BLOCK_ID_Y;
    const int lane = THREAD_ID % WARP_SIZE;
    float* q_head = q_heads[warp];
    float* weights = tile_weights[warp];
    const int kv = rows[3 * r];
    const int start = rows[3 * r + 1];
    const int end = rows[3 * r + 2];
    int first_split = start / ATTN_SPLIT;
    int end_split = (end - 1) / ATTN_SPLIT + 1;
    if (parts != 0) {
        first_split += BLOCK_ID_Z;
        if (first_split >= end_split) {
            return;  // the row has fewer splits (the whole block leaves)
        }
        end_split = first_split + 1;
    }
    const int64_t k_at = (int64_t)(h / (n_head / n_head_kv)) * dk;
    // a value row holds n_head_kv heads of v_row / n_head_kv values, each head's value its first
    // dv (all of it, or the leading part of a key head when the values are read from the keys)
    const int64_t v_at = (int64_t)(h / (n_head / n_head_kv)) * (v_row / n_head_kv);
    const int64_t k_dim = (int64_t)n_head_kv * dk;
    const int64_t v_dim = v_row;
    const float* qr = q + ((int64_t)r * n_head + h) * dk;
    for (int i = lane; i < dk; i += WARP_SIZE) {
        q_head[i] = qr[i];
    }
    SYNC_THREADS();
    const float neg_inf = __int_as_float((int)0xff800000u);
    Partial<SLOTS> total;
    empty_partial(&total);
    for (int s = first_split; s < end_split; s++) {
        const int lo = start > s * ATTN_SPLIT ? start : s * ATTN_SPLIT;
        const int hi = end < (s + 1) * ATTN_SPLIT ? end : (s + 1) * ATTN_SPLIT;
        Partial<SLOTS> part;
        empty_partial(&part);
        for (int p0 = lo; p0 < hi; p0 += ATTN_TILE) {
            const int p = p0 + lane;
            const int n = hi - p0 < ATTN_TILE ? hi - p0 : ATTN_TILE;
            if (warp == 0) {
                tile_rows[lane] = p < hi ? kv_row(tables, kv, p, n_layer, layer) : 0;
            }
            SYNC_THREADS();
            // lane l's dot product with key p0 + l, KEY_SLICE values at a time from shared memory
            // (read by the block's threads together, consecutive threads along a key row)
            float dot = 0.0f;
            for (int i0 = 0; i0 < dk; i0 += KEY_SLICE) {
                const int len = dk - i0 < KEY_SLICE ? dk - i0 : KEY_SLICE;
                for (int at = THREAD_ID; at < n * len; at += BLOCK_THREADS) {
                    keys[at / len][at % len] = kv_element(k, tile_rows[at / len], k_dim, k_at + i0 + at % len, k_type);
                }
                SYNC_THREADS();
                if (p < hi) {
                    for (int e = 0; e < len; e++) {
                        dot = dot + q_head[i0 + e] * keys[lane][e];
                    }
                }
                SYNC_THREADS();  // the slice is rewritten next
            }
            // soft-capped as ggml's flash attention does it: the scale divided by the cap first
            const float score = p >= hi ? neg_inf : softcap == 0.0f ? dot * scale : softcap * tanhf(dot * (scale / softcap));
            const float new_max = fmaxf(part.max, warp_max_f(score));
            const float correction = expf(part.max - new_max);  // 0 on the first tile
            const float w = p < hi ? expf(score - new_max) : 0.0f;
            part.sum = part.sum * correction + warp_sum_f(w);
            part.max = new_max;
            weights[lane] = w;
            SYNC_THREADS();
            for (int t = 0; t < SLOTS; t++) {
                part.acc[t] = part.acc[t] * correction;
            }
            for (int pp = 0; pp < n; pp++) {
                const int64_t vr = tile_rows[pp];
                const float wp = weights[pp];
                for (int t = 0; t < SLOTS; t++) {
                    const int d = lane + t * WARP_SIZE;
                    if (d < dv) {
                        part.acc[t] = part.acc[t] + wp * kv_element(v, vr, v_dim, v_at + d, v_type);
                    }
                }
            }
            SYNC_THREADS();  // the weights and rows are rewritten by the next tile
        }
        if (parts != 0) {
            float* at = partial_at(parts, r, h, BLOCK_ID_Z, n_head, max_splits, dv);
            if (lane == 0) {
                at[0] = part.max;
                at[1] = part.sum;
            }
            for (int t = 0; t < SLOTS; t++) {
                const int d = lane + t * WARP_SIZE;
                if (d < dv) {
                    at[2 + d] = part.acc[t];
                }
            }
            return;
        }
        fold(&total, &part);
    }
    fold_sink(&total, sinks, h);
    const int64_t head = (int64_t)r * n_head + h;
    write_output(out + head * dv, &total, dv, lane, head, out_q, with_q);
}

// The partials of attention_split folded in split order into `out` (and out_q).
template <int SLOTS>
DEVICE void fold_splits(const int32_t* rows, const float* parts, int max_splits, const float* sinks, float* out, int n_head, int dv, uint8_t* out_q, int with_q) {
    const int h = BLOCK_ID;
    const int r = BLOCK_ID_Y;
    const int lane = THREAD_ID;
    const int splits = (rows[3 * r + 2] - 1) / ATTN_SPLIT + 1 - rows[3 * r + 1] / ATTN_SPLIT;
    Partial<SLOTS> total;
    empty_partial(&total);
    for (int z = 0; z < splits; z++) {
        const float* at = partial_at((float*)parts, r, h, z, n_head, max_splits, dv);
        Partial<SLOTS> part;
        part.max = at[0];
        part.sum = at[1];
        for (int t = 0; t < SLOTS; t++) {
            const int d = lane + t * WARP_SIZE;
            part.acc[t] = d < dv ? at[2 + d] : 0.0f;
        }
        fold(&total, &part);
    }
    fold_sink(&total, sinks, h);
    const int64_t head = (int64_t)r * n_head + h;
    write_output(out + head * dv, &total, dv, lane, head, out_q, with_q);
}

#define HEAD_SLOTS (ATTN_MAX_HEAD / WARP_SIZE)
#define WIDE_SLOTS (ATTN_WIDE_VALUE / WARP_SIZE)

// q: rows of n_head heads of dk; rows: (kv, first position, end position) per query row; v_row:
// values per value row (n_head_kv · dv, or the key row's n_head_kv · dk when the values are the
// keys' leading columns); sinks: null, or one logit per head; out: rows of n_head heads of dv;
// with with_q (dv a multiple of 32) out's Q8_1 blocks into out_q too. Grid (n_head / heads,
// query rows), 32 · heads threads (heads <= ATTN_GROUP_MAX dividing n_head / n_head_kv).
// dk, dv <= ATTN_MAX_HEAD. (One entry point per width: the kernels are found by name, so each
// instantiation has its own.)
KERNEL void attention(const float* q, const uint8_t* k, const uint8_t* v, const int32_t* rows, const int32_t* tables, const float* sinks, float* out, int n_head, int n_head_kv, int dk, int dv, int v_row, float scale, float softcap, int k_type, int v_type, int n_layer, int layer, uint8_t* out_q, int with_q) {
    attend<ATTN_MAX_HEAD, HEAD_SLOTS>(q, k, v, rows, tables, sinks, out, 0, 0, n_head, n_head_kv, dk, dv, v_row, scale, softcap, k_type, v_type, n_layer, layer, out_q, with_q);
}

// The same, each split z of each row as a block: its partial into `parts` (rows of n_head heads
// of max_splits partials of 2 + dv values). Grid (n_head / heads, query rows, max_splits),
// 32 · heads threads.
KERNEL void attention_split(const float* q, const uint8_t* k, const uint8_t* v, const int32_t* rows, const int32_t* tables, float* parts, int max_splits, int n_head, int n_head_kv, int dk, int dv, int v_row, float scale, float softcap, int k_type, int v_type, int n_layer, int layer) {
    attend<ATTN_MAX_HEAD, HEAD_SLOTS>(q, k, v, rows, tables, 0, 0, parts, max_splits, n_head, n_head_kv, dk, dv, v_row, scale, softcap, k_type, v_type, n_layer, layer, 0, 0);
}

// The partials of attention_split folded in split order into `out` (and with with_q its Q8_1
// blocks into out_q). Grid (n_head, query rows), 32 threads.
KERNEL void attention_fold(const int32_t* rows, const float* parts, int max_splits, const float* sinks, float* out, int n_head, int dv, uint8_t* out_q, int with_q) {
    fold_splits<HEAD_SLOTS>(rows, parts, max_splits, sinks, out, n_head, dv, out_q, with_q);
}

// The three for keys of up to ATTN_WIDE_KEY and values of up to ATTN_WIDE_VALUE.
KERNEL void attention_wide(const float* q, const uint8_t* k, const uint8_t* v, const int32_t* rows, const int32_t* tables, const float* sinks, float* out, int n_head, int n_head_kv, int dk, int dv, int v_row, float scale, float softcap, int k_type, int v_type, int n_layer, int layer, uint8_t* out_q, int with_q) {
    attend<ATTN_WIDE_KEY, WIDE_SLOTS>(q, k, v, rows, tables, sinks, out, 0, 0, n_head, n_head_kv, dk, dv, v_row, scale, softcap, k_type, v_type, n_layer, layer, out_q, with_q);
}

KERNEL void attention_split_wide(const float* q, const uint8_t* k, const uint8_t* v, const int32_t* rows, const int32_t* tables, float* parts, int max_splits, int n_head, int n_head_kv, int dk, int dv, int v_row, float scale, float softcap, int k_type, int v_type, int n_layer, int layer) {
    attend<ATTN_WIDE_KEY, WIDE_SLOTS>(q, k, v, rows, tables, 0, 0, parts, max_splits, n_head, n_head_kv, dk, dv, v_row, scale, softcap, k_type, v_type, n_layer, layer, 0, 0);
}

KERNEL void attention_fold_wide(const int32_t* rows, const float* parts, int max_splits, const float* sinks, float* out, int n_head, int dv, uint8_t* out_q, int with_q) {
    fold_splits<WIDE_SLOTS>(rows, parts, max_splits, sinks, out, n_head, dv, out_q, with_q);
}
