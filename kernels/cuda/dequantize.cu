// Dequantization, element by element, exactly as the engine's scalar reference (and ggml)
// computes each value: the same products in the same order, never fused. `get_rows` is the
// embedding lookup: one block of threads per 256 values of an output row.
#include "blocks.cuh"
#include "iq_grid.cuh"

// quant e (0..32) of a legacy block's 16 nibble bytes: low nibbles first, then high
DEVICE int nibble(const uint8_t* qs, int e) {
    return e < 16 ? (qs[e] & 0x0F) : (qs[e - 16] >> 4);
}

// 2-bit quant e (0..256) of a K block's 64 bytes: each half of 128 takes bits 2k..2k+2 of 32 bytes
DEVICE int crumb(const uint8_t* qs, int e) {
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

// 6-bit scale and min j of Q4_K / Q5_K
DEVICE void scale_min_k4(int j, const uint8_t* s, int* sc, int* m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// element e of a row of `type` starting at `row`
DEVICE float dequantize_one(const uint8_t* row, int type, int e) {
    switch (type) {
        case TYPE_F32:
            return __int_as_float((int)le32(row + 4 * e));
        case TYPE_F16:
            return half_to_float((uint16_t)(row[2 * e] | (row[2 * e + 1] << 8)));
        case TYPE_BF16:
            return __int_as_float((int)((uint32_t)(row[2 * e] | (row[2 * e + 1] << 8)) << 16));
        case TYPE_Q4_0: {
            const block_q4_0* b = (const block_q4_0*)row + e / QK4_0;
            return (float)(nibble(b->qs, e % QK4_0) - 8) * f16_le(b->d);
        }
        case TYPE_Q4_1: {
            const block_q4_1* b = (const block_q4_1*)row + e / QK4_1;
            return (float)nibble(b->qs, e % QK4_1) * f16_le(b->d) + f16_le(b->m);
        }
        case TYPE_Q5_0: {
            const block_q5_0* b = (const block_q5_0*)row + e / QK5_0;
            const int j = e % QK5_0;
            const int q = nibble(b->qs, j) | (((le32(b->qh) >> j) & 1) << 4);
            return (float)(q - 16) * f16_le(b->d);
        }
        case TYPE_Q5_1: {
            const block_q5_1* b = (const block_q5_1*)row + e / QK5_1;
            const int j = e % QK5_1;
            const int q = nibble(b->qs, j) | (((le32(b->qh) >> j) & 1) << 4);
            return (float)q * f16_le(b->d) + f16_le(b->m);
        }
        case TYPE_Q8_0: {
            const block_q8_0* b = (const block_q8_0*)row + e / QK8_0;
            return (float)b->qs[e % QK8_0] * f16_le(b->d);
        }
        case TYPE_Q2_K: {
            const block_q2_K* b = (const block_q2_K*)row + e / QK_K;
            const int i = e % QK_K;
            const int sc = b->scales[i / 16];
            const float dl = f16_le(b->d) * (float)(sc & 0x0F);
            const float ml = f16_le(b->dmin) * (float)(sc >> 4);
            return dl * (float)crumb(b->qs, i) - ml;
        }
        case TYPE_Q3_K: {
            const block_q3_K* b = (const block_q3_K*)row + e / QK_K;
            const int i = e % QK_K;
            const int high = (b->hmask[i % 32] >> (i / 32)) & 1;
            const int q = crumb(b->qs, i) - (high ? 0 : 4);
            const int j = i / 16;
            const int low4 = j < 8 ? (b->scales[j] & 0x0F) : (b->scales[j - 8] >> 4);
            const int high2 = (b->scales[8 + j % 4] >> (2 * (j / 4))) & 3;
            const int sc = (int)(int8_t)(uint8_t)(low4 | (high2 << 4)) - 32;
            return (f16_le(b->d) * (float)sc) * (float)q;
        }
        case TYPE_Q4_K:
        case TYPE_Q5_K: {
            const bool five = type == TYPE_Q5_K;
            const uint8_t* blk = row + (int64_t)(e / QK_K) * (five ? sizeof(block_q5_K) : sizeof(block_q4_K));
            const int i = e % QK_K;
            const uint8_t* scales = blk + 4;
            const uint8_t* qs = five ? ((const block_q5_K*)blk)->qs : ((const block_q4_K*)blk)->qs;
            const uint8_t byte = qs[32 * (i / 64) + i % 32];
            int q = i % 64 < 32 ? (byte & 0x0F) : (byte >> 4);
            if (five) {
                q |= ((((const block_q5_K*)blk)->qh[i % 32] >> (i / 32)) & 1) << 4;
            }
            int sc, m;
            scale_min_k4(i / 32, scales, &sc, &m);
            const float d1 = f16_le(blk) * (float)sc;
            const float m1 = f16_le(blk + 2) * (float)m;
            return d1 * (float)q - m1;
        }
        case TYPE_Q6_K: {
            const block_q6_K* b = (const block_q6_K*)row + e / QK_K;
            const int i = e % QK_K;
            const int h = i / 128, k = (i % 128) / 32, l = i % 32;
            const uint8_t byte = b->ql[64 * h + 32 * (k % 2) + l];
            const int low = k < 2 ? (byte & 0x0F) : (byte >> 4);
            const int q = low | (((b->qh[32 * h + l] >> (2 * k)) & 3) << 4);
            const float dl = f16_le(b->d) * (float)b->scales[i / 16];
            return dl * (float)(q - 32);
        }
        case TYPE_IQ4_NL: {
            const block_iq4_nl* b = (const block_iq4_nl*)row + e / QK4_NL;
            return f16_le(b->d) * (float)table_level(LEVELS_IQ4, nibble(b->qs, e % QK4_NL));
        }
        case TYPE_IQ4_XS: {
            const block_iq4_xs* b = (const block_iq4_xs*)row + e / QK_K;
            const int i = e % QK_K;
            const float dl = f16_le(b->d) * (float)iq4_xs_scale((const uint8_t*)b, i / 32);
            return dl * (float)table_level(LEVELS_IQ4, nibble(b->qs + 16 * (i / 32), i % 32));
        }
        case TYPE_MXFP4: {
            const block_mxfp4* b = (const block_mxfp4*)row + e / QK_MXFP4;
            return (float)table_level(LEVELS_MXFP4, nibble(b->qs, e % QK_MXFP4)) * e8m0_half(b->e);
        }
        case TYPE_IQ2_XXS:
        case TYPE_IQ2_XS:
        case TYPE_IQ2_S:
        case TYPE_IQ3_XXS:
        case TYPE_IQ3_S:
        case TYPE_IQ1_S:
        case TYPE_IQ1_M:
            return grid_value(row, type, e);
        default:
            return __int_as_float(0x7fc00000);  // NaN: a type without a kernel shows at once
    }
}

// out row r = row ids[r] of `table` (rows of `cols` values of `type`, `row_bytes` each); a
// negative id leaves out row r as it is (a row the caller provides itself). Grid (value blocks
// of a row, rows): a thread per value, but for the grid types a thread per group of 8 values,
// decoded once (the block's first eighth of threads cover its values).
KERNEL void get_rows(const uint8_t* table, const int32_t* ids, float* out, int cols, int64_t row_bytes, int type) {
    const int r = BLOCK_ID_Y;
    const int id = ids[r];
    if (id < 0) {
        return;
    }
    const uint8_t* row = table + (int64_t)id * row_bytes;
    float* out_row = out + (int64_t)r * cols;
    if (is_grid_type(type)) {
        const int first = BLOCK_ID * BLOCK_THREADS + 8 * THREAD_ID;
        if (THREAD_ID < BLOCK_THREADS / 8 && first < cols) {
            const GridGroup g = grid_group_of(row, type, first);
            for (int j = 0; j < 8; j++) {
                out_row[first + j] = grid_group_value(g, j);
            }
        }
        return;
    }
    const int c = BLOCK_ID * BLOCK_THREADS + THREAD_ID;
    if (c < cols) {
        out_row[c] = dequantize_one(row, type, c);
    }
}
