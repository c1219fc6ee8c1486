// Weight rows read 32 values (a "chunk") at a time, for the integer matmul kernels: every weight
// type's chunk c as 32 signed 8-bit integers with one scale and one offset per half of 16
// values (value i = d[i / 16] · q[i] + m[i / 16]), dotted with a Q8_1 block of the activations
// by dp4a. The layouts are ggml's (see blocks.cuh); K-quant super-blocks hold 8 chunks.
#pragma once
#include "blocks.cuh"
#include "iq_grid.cuh"

// Byte-wise arithmetic on 4 packed values (SWAR): every byte of the result is that byte's own
// value, with no carry from one byte into the next.
#define BYTES_OF(v) (0x01010101u * (uint32_t)(v))

// each byte v (v + 128 - k < 256) to v - k as a signed byte: v + (128 - k) cannot carry, and
// flipping the top bit subtracts 128 (mod 256)
DEVICE int minus_bytes(uint32_t v, int k) {
    return (int)((v + BYTES_OF(128 - k)) ^ 0x80808080u);
}

// the 4 low bits of n as the bytes' bit 0: n · 0x00204081 is n | n << 7 | n << 14 | n << 21
// (n < 16, no term overlaps), whose bit 8b is n's bit b
DEVICE uint32_t bits_to_bytes(uint32_t n) {
    return ((n & 15u) * 0x00204081u) & 0x01010101u;
}

// the 6-bit scale and min `j` of a Q4_K / Q5_K super-block (ggml's get_scale_min_k4)
DEVICE void scale_min_k4(int j, const uint8_t* q, int* sc, int* mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// the scale d and offset m of half h (0, 1) of chunk c of `row`
DEVICE void chunk_scale(const uint8_t* row, int type, int c, int h, float* d, float* m) {
    const int cc = c % 8;
    *m = 0.0f;
    switch (type) {
        case TYPE_Q4_0:
            *d = f16_le(row + (int64_t)c * sizeof(block_q4_0));
            break;
        case TYPE_Q4_1: {
            const uint8_t* b = row + (int64_t)c * sizeof(block_q4_1);
            *d = f16_le(b);
            *m = f16_le(b + 2);
            break;
        }
        case TYPE_Q5_0:
            *d = f16_le(row + (int64_t)c * sizeof(block_q5_0));
            break;
        case TYPE_Q5_1: {
            const uint8_t* b = row + (int64_t)c * sizeof(block_q5_1);
            *d = f16_le(b);
            *m = f16_le(b + 2);
            break;
        }
        case TYPE_Q8_0:
            *d = f16_le(row + (int64_t)c * sizeof(block_q8_0));
            break;
        case TYPE_Q2_K: {
            const uint8_t* sb = row + (int64_t)(c / 8) * sizeof(block_q2_K);
            const int sc = sb[cc * 2 + h];
            *d = f16_le(sb + 80) * (float)(sc & 15);
            *m = -(f16_le(sb + 82) * (float)(sc >> 4));
            break;
        }
        case TYPE_Q3_K: {
            const uint8_t* sb = row + (int64_t)(c / 8) * sizeof(block_q3_K);
            const uint8_t* s = sb + 96;
            const int k = cc * 2 + h;
            const int low = k < 8 ? s[k] & 15 : s[k - 8] >> 4;
            const int high = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
            *d = f16_le(sb + 108) * (float)((low | (high << 4)) - 32);
            break;
        }
        case TYPE_Q4_K:
        case TYPE_Q5_K: {
            const uint8_t* sb = row + (int64_t)(c / 8) * (type == TYPE_Q4_K ? sizeof(block_q4_K) : sizeof(block_q5_K));
            int sc, mn;
            scale_min_k4(cc, sb + 4, &sc, &mn);
            *d = f16_le(sb) * (float)sc;
            *m = -(f16_le(sb + 2) * (float)mn);
            break;
        }
        case TYPE_Q6_K: {
            const uint8_t* sb = row + (int64_t)(c / 8) * sizeof(block_q6_K);
            const int sc = (int8_t)sb[192 + (cc / 4) * 8 + (cc % 4) * 2 + h];
            *d = f16_le(sb + 208) * (float)sc;
            break;
        }
        case TYPE_IQ4_NL:
            *d = f16_le(row + (int64_t)c * sizeof(block_iq4_nl));
            break;
        case TYPE_IQ4_XS: {
            const uint8_t* sb = row + (int64_t)(c / 8) * sizeof(block_iq4_xs);
            *d = f16_le(sb) * (float)iq4_xs_scale(sb, cc);
            break;
        }
        case TYPE_MXFP4:
            *d = e8m0_half(row[(int64_t)c * sizeof(block_mxfp4)]);
            break;
        default:
            *d = __int_as_float(0x7fc00000);  // NaN: a type without a kernel shows at once
    }
}

// One chunk of a weight row, unpacked once and dotted with any number of activation rows.
struct Chunk {
    int q[8];  // 32 signed bytes, 4 per int, in value order
    float d[2];
    float m[2];
};

// Chunk c of `row` in type TYPE, its 32 values read as words. Row starts are multiples of the
// row's bytes from a 256-byte aligned allocation, so a block's words are as aligned as its size:
// 16 bytes for Q4_K and Q5_K, 4 for Q4_1, Q5_1 and Q2_K, 2 for the rest. Each type's values are
// those of ggml's layout (blocks.cuh), 4 to a word in value order.
template <int TYPE>
DEVICE void unpack_chunk(const uint8_t* row, int c, Chunk* out) {
    if constexpr (TYPE == TYPE_IQ2_XXS || TYPE == TYPE_IQ2_XS || TYPE == TYPE_IQ2_S || TYPE == TYPE_IQ3_XXS || TYPE == TYPE_IQ3_S ||
                  TYPE == TYPE_IQ1_S || TYPE == TYPE_IQ1_M) {
        // the grid i-quants: four groups of 8 decoded by iq_grid.cuh, no offsets
        grid_chunk(row, TYPE, c, out->q, out->d);
        out->m[0] = 0.0f;
        out->m[1] = 0.0f;
        return;
    }
    const int cc = c % 8;  // chunk inside a K-quant super-block
    if constexpr (TYPE == TYPE_Q4_0 || TYPE == TYPE_Q4_1 || TYPE == TYPE_Q5_0 || TYPE == TYPE_Q5_1) {
        // values 0..15: the low nibbles of qs; 16..31: the high ones; a fifth bit from qh
        constexpr bool five = TYPE == TYPE_Q5_0 || TYPE == TYPE_Q5_1;
        constexpr bool offset = TYPE == TYPE_Q4_0 || TYPE == TYPE_Q5_0;  // values centred by 8 or 16
        constexpr int block = TYPE == TYPE_Q4_0 ? sizeof(block_q4_0) : TYPE == TYPE_Q4_1 ? sizeof(block_q4_1) : TYPE == TYPE_Q5_0 ? sizeof(block_q5_0) : sizeof(block_q5_1);
        constexpr int qs_at = TYPE == TYPE_Q4_0 ? 2 : TYPE == TYPE_Q4_1 ? 4 : TYPE == TYPE_Q5_0 ? 6 : 8;
        constexpr bool a4 = block % 4 == 0;
        const uint8_t* b = row + (int64_t)c * block;
        uint32_t qh = 0;
        if constexpr (five) {
            qh = a4 ? load_u32_a4(b + qs_at - 4) : load_u32_a2(b + qs_at - 4);
        }
        for (int k = 0; k < 4; k++) {
            const uint32_t w = a4 ? load_u32_a4(b + qs_at + 4 * k) : load_u32_a2(b + qs_at + 4 * k);
            uint32_t lo = w & 0x0F0F0F0Fu;
            uint32_t hi = (w >> 4) & 0x0F0F0F0Fu;
            if constexpr (five) {
                lo |= bits_to_bytes(qh >> (4 * k)) << 4;
                hi |= bits_to_bytes(qh >> (16 + 4 * k)) << 4;
            }
            out->q[k] = offset ? minus_bytes(lo, five ? 16 : 8) : (int)lo;
            out->q[4 + k] = offset ? minus_bytes(hi, five ? 16 : 8) : (int)hi;
        }
    } else if constexpr (TYPE == TYPE_Q8_0) {
        const uint8_t* qs = row + (int64_t)c * sizeof(block_q8_0) + 2;
        for (int k = 0; k < 8; k++) {
            out->q[k] = (int)load_u32_a2(qs + 4 * k);
        }
    } else if constexpr (TYPE == TYPE_Q2_K) {
        // value i: bits 2·(cc % 4) of qs[(cc / 4) · 32 + i]
        const uint8_t* qs = row + (int64_t)(c / 8) * sizeof(block_q2_K) + 16 + (cc / 4) * 32;
        for (int k = 0; k < 8; k++) {
            out->q[k] = (int)((load_u32_a4(qs + 4 * k) >> (2 * (cc % 4))) & 0x03030303u);
        }
    } else if constexpr (TYPE == TYPE_Q3_K) {
        // value i: 2 bits of qs as Q2_K's, and 4 less unless bit cc of hmask[i] is set
        const uint8_t* sb = row + (int64_t)(c / 8) * sizeof(block_q3_K);
        for (int k = 0; k < 8; k++) {
            const uint32_t low = (load_u32_a2(sb + 32 + (cc / 4) * 32 + 4 * k) >> (2 * (cc % 4))) & 0x03030303u;
            const uint32_t high = (load_u32_a2(sb + 4 * k) >> cc) & 0x01010101u;
            out->q[k] = minus_bytes(low | (high << 2), 4);
        }
    } else if constexpr (TYPE == TYPE_Q4_K || TYPE == TYPE_Q5_K) {
        // value i: the low (cc even) or high nibble of qs[(cc / 2) · 32 + i], for Q5_K with
        // bit cc of qh[i] as the fifth
        constexpr bool five = TYPE == TYPE_Q5_K;
        constexpr int block = five ? sizeof(block_q5_K) : sizeof(block_q4_K);
        const uint8_t* sb = row + (int64_t)(c / 8) * block;
        uint32_t w[8];
        load_u32x4_a16(sb + (five ? 48 : 16) + (cc / 2) * 32, w);
        load_u32x4_a16(sb + (five ? 48 : 16) + (cc / 2) * 32 + 16, w + 4);
        uint32_t h[8] = {};
        if constexpr (five) {
            load_u32x4_a16(sb + 16, h);
            load_u32x4_a16(sb + 32, h + 4);
        }
        for (int k = 0; k < 8; k++) {
            uint32_t v = (w[k] >> (4 * (cc % 2))) & 0x0F0F0F0Fu;
            if constexpr (five) {
                v |= ((h[k] >> cc) & 0x01010101u) << 4;
            }
            out->q[k] = (int)v;
        }
    } else if constexpr (TYPE == TYPE_Q6_K) {
        // value i: the low (cc % 4 < 2) or high nibble of ql[(cc / 4) · 64 + (cc % 2) · 32 + i]
        // with 2 bits of qh[(cc / 4) · 32 + i] above it, less 32
        const uint8_t* sb = row + (int64_t)(c / 8) * sizeof(block_q6_K);
        const int n = cc / 4;
        const int k4 = cc % 4;
        for (int k = 0; k < 8; k++) {
            const uint32_t low = (load_u32_a2(sb + n * 64 + (k4 & 1) * 32 + 4 * k) >> (k4 < 2 ? 0 : 4)) & 0x0F0F0F0Fu;
            const uint32_t high = (load_u32_a2(sb + 128 + n * 32 + 4 * k) >> (2 * k4)) & 0x03030303u;
            out->q[k] = minus_bytes(low | (high << 4), 32);
        }
    } else if constexpr (TYPE == TYPE_IQ4_NL || TYPE == TYPE_IQ4_XS || TYPE == TYPE_MXFP4) {
        // value i: the level of the low (i < 16) or high nibble of qs[i % 16]; IQ4_NL blocks are
        // 2-byte aligned, IQ4_XS groups 8-byte, MXFP4 blocks (17 bytes) not at all
        const int levels = TYPE == TYPE_MXFP4 ? LEVELS_MXFP4 : LEVELS_IQ4;
        const uint8_t* qs = TYPE == TYPE_IQ4_NL   ? row + (int64_t)c * sizeof(block_iq4_nl) + 2
                            : TYPE == TYPE_IQ4_XS ? row + (int64_t)(c / 8) * sizeof(block_iq4_xs) + 8 + 16 * cc
                                                  : row + (int64_t)c * sizeof(block_mxfp4) + 1;
        for (int k = 0; k < 4; k++) {
            const uint32_t w = TYPE == TYPE_MXFP4 ? le32(qs + 4 * k) : TYPE == TYPE_IQ4_XS ? load_u32_a4(qs + 4 * k) : load_u32_a2(qs + 4 * k);
            out->q[k] = table_levels4(levels, w & 0x0F0F0F0Fu);
            out->q[4 + k] = table_levels4(levels, (w >> 4) & 0x0F0F0F0Fu);
        }
    }
    chunk_scale(row, TYPE, c, 0, &out->d[0], &out->m[0]);
    chunk_scale(row, TYPE, c, 1, &out->d[1], &out->m[1]);
}

// A chunk's value from its exact integer parts: per half h the sums Σ q·xq (isum) and Σ xq
// (xsum), then dx · Σ_h (d_h · isum_h + m_h · xsum_h), in this order. Every kernel that takes a
// chunk's product (dp4a or the tensor cores) ends in this one function, so they agree bit for bit.
DEVICE float chunk_value(float dx, const float* d, const float* m, const int* isum, const int* xsum) {
    float sum = 0.0f;
    for (int h = 0; h < 2; h++) {
        sum = sum + (d[h] * (float)isum[h] + m[h] * (float)xsum[h]);
    }
    return dx * sum;
}

// Σ xq over each half of a Q8_1 block's values (`xq`, 4-byte aligned)
DEVICE void half_sums(const uint8_t* xq, int* xsum) {
    for (int h = 0; h < 2; h++) {
        xsum[h] = 0;
        for (int k = 0; k < 4; k++) {
            xsum[h] = dp4a(0x01010101, (int)load_u32_a4(xq + h * 16 + 4 * k), xsum[h]);
        }
    }
}

// Σ w_i · x_i over the chunk, x a Q8_1 block: the integer sums by dp4a, then chunk_value.
DEVICE float chunk_dot(const Chunk* w, const uint8_t* xb) {
    const uint8_t* xq = xb + 4;
    int isum[2] = {0, 0};
    int xsum[2];
    for (int h = 0; h < 2; h++) {
        for (int k = 0; k < 4; k++) {
            isum[h] = dp4a(w->q[h * 4 + k], (int)load_u32_a4(xq + h * 16 + 4 * k), isum[h]);
        }
    }
    half_sums(xq, xsum);
    return chunk_value(f16_le(xb), w->d, w->m, isum, xsum);
}
