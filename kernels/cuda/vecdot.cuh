// Weight rows read 32 values (a "chunk") at a time, for the integer matmul kernels: every weight
// type's chunk c as 32 signed 8-bit integers with one scale and one offset per half of 16
// values (value i = d[i / 16] · q[i] + m[i / 16]), dotted with a Q8_1 block of the activations
// by dp4a. The layouts are ggml's (see blocks.cuh); K-quant super-blocks hold 8 chunks.
#pragma once
#include "blocks.cuh"

DEVICE int load_le32(const uint8_t* p) {
    return (int)((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
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

// the integer value of element i (0..31) of chunk c of `row`
DEVICE int quant_value(const uint8_t* row, int type, int c, int i) {
    const int j = i % 16;
    const int cc = c % 8;  // chunk inside a K-quant super-block
    switch (type) {
        case TYPE_Q4_0: {
            const uint8_t* qs = row + (int64_t)c * sizeof(block_q4_0) + 2;
            return (i < 16 ? qs[j] & 15 : qs[j] >> 4) - 8;
        }
        case TYPE_Q4_1: {
            const uint8_t* qs = row + (int64_t)c * sizeof(block_q4_1) + 4;
            return i < 16 ? qs[j] & 15 : qs[j] >> 4;
        }
        case TYPE_Q5_0: {
            const uint8_t* b = row + (int64_t)c * sizeof(block_q5_0);
            const uint32_t qh = (uint32_t)load_le32(b + 2);
            const int nib = i < 16 ? b[6 + j] & 15 : b[6 + j] >> 4;
            return (nib | (int)(((qh >> i) & 1) << 4)) - 16;
        }
        case TYPE_Q5_1: {
            const uint8_t* b = row + (int64_t)c * sizeof(block_q5_1);
            const uint32_t qh = (uint32_t)load_le32(b + 4);
            const int nib = i < 16 ? b[8 + j] & 15 : b[8 + j] >> 4;
            return nib | (int)(((qh >> i) & 1) << 4);
        }
        case TYPE_Q8_0:
            return (int8_t)row[(int64_t)c * sizeof(block_q8_0) + 2 + i];
        case TYPE_Q2_K: {
            const uint8_t* qs = row + (int64_t)(c / 8) * sizeof(block_q2_K) + 16;
            return (qs[(cc / 4) * 32 + i] >> (2 * (cc % 4))) & 3;
        }
        case TYPE_Q3_K: {
            const uint8_t* sb = row + (int64_t)(c / 8) * sizeof(block_q3_K);
            const int q = (sb[32 + (cc / 4) * 32 + i] >> (2 * (cc % 4))) & 3;
            return q - ((sb[i] >> cc) & 1 ? 0 : 4);
        }
        case TYPE_Q4_K: {
            const uint8_t b = row[(int64_t)(c / 8) * sizeof(block_q4_K) + 16 + (cc / 2) * 32 + i];
            return cc % 2 ? b >> 4 : b & 15;
        }
        case TYPE_Q5_K: {
            const uint8_t* sb = row + (int64_t)(c / 8) * sizeof(block_q5_K);
            const uint8_t b = sb[48 + (cc / 2) * 32 + i];
            const int nib = cc % 2 ? b >> 4 : b & 15;
            return nib | (((sb[16 + i] >> cc) & 1) << 4);
        }
        case TYPE_Q6_K: {
            const uint8_t* sb = row + (int64_t)(c / 8) * sizeof(block_q6_K);
            const int n = cc / 4;
            const int k = cc % 4;
            const uint8_t lb = sb[n * 64 + (k & 1) * 32 + i];
            const int nib = k < 2 ? lb & 15 : lb >> 4;
            const int hb = (sb[128 + n * 32 + i] >> (2 * k)) & 3;
            return (nib | (hb << 4)) - 32;
        }
        default:
            return 0;
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

DEVICE void unpack_chunk(const uint8_t* row, int type, int c, Chunk* out) {
    for (int k = 0; k < 8; k++) {
        int packed = 0;
        for (int b = 0; b < 4; b++) {
            packed |= (quant_value(row, type, c, 4 * k + b) & 0xff) << (8 * b);
        }
        out->q[k] = packed;
    }
    chunk_scale(row, type, c, 0, &out->d[0], &out->m[0]);
    chunk_scale(row, type, c, 1, &out->d[1], &out->m[1]);
}

// Σ w_i · x_i over the chunk, x a Q8_1 block: per half the integer sums Σ q·xq and Σ xq by
// dp4a, then dx · Σ_h (d_h · Σ q·xq + m_h · Σ xq), in this order whatever the launch.
DEVICE float chunk_dot(const Chunk* w, const uint8_t* xb) {
    const float dx = f16_le(xb);
    const int8_t* xq = (const int8_t*)(xb + 4);
    float sum = 0.0f;
    for (int h = 0; h < 2; h++) {
        int isum = 0;
        int xsum = 0;
        for (int k = 0; k < 4; k++) {
            const int x4 = load_le32((const uint8_t*)xq + h * 16 + 4 * k);
            isum = dp4a(w->q[h * 4 + k], x4, isum);
            xsum = dp4a(0x01010101, x4, xsum);
        }
        sum = sum + (w->d[h] * (float)isum + w->m[h] * (float)xsum);
    }
    return dx * sum;
}
