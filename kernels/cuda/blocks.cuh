// The quantized block layouts, byte for byte as ggml stores them and as the engine's
// `quant/blocks.rs` declares them: every field a byte array (alignment 1), so a block can be
// read at any offset of an uploaded tensor. The sizes are asserted here, and a test of the
// engine checks these assertions against the Rust sizes.
#pragma once
#include "portable.cuh"

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256
#define K_SCALE_SIZE 12
#define QK4_NL 32
#define QK_MXFP4 32

struct block_q4_0 { uint8_t d[2]; uint8_t qs[QK4_0 / 2]; };
struct block_q4_1 { uint8_t d[2]; uint8_t m[2]; uint8_t qs[QK4_1 / 2]; };
struct block_q5_0 { uint8_t d[2]; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };
struct block_q5_1 { uint8_t d[2]; uint8_t m[2]; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
struct block_q8_0 { uint8_t d[2]; int8_t qs[QK8_0]; };
struct block_q8_1 { uint8_t d[2]; uint8_t s[2]; int8_t qs[QK8_1]; };
struct block_q2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint8_t d[2]; uint8_t dmin[2]; };
struct block_q3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint8_t d[2]; };
struct block_q4_K { uint8_t d[2]; uint8_t dmin[2]; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
struct block_q5_K { uint8_t d[2]; uint8_t dmin[2]; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
struct block_q6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint8_t d[2]; };
struct block_q8_K { uint8_t d[4]; int8_t qs[QK_K]; uint8_t bsums[32]; };
struct block_iq4_nl { uint8_t d[2]; uint8_t qs[QK4_NL / 2]; };
struct block_iq4_xs { uint8_t d[2]; uint8_t scales_h[2]; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };
struct block_mxfp4 { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; };
// the grid i-quants (iq_grid.cuh reads them)
struct block_iq2_xxs { uint8_t d[2]; uint8_t qs[QK_K / 4]; };
struct block_iq2_xs { uint8_t d[2]; uint8_t qs[QK_K / 4]; uint8_t scales[QK_K / 32]; };
struct block_iq2_s { uint8_t d[2]; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t scales[QK_K / 32]; };
struct block_iq3_xxs { uint8_t d[2]; uint8_t qs[3 * QK_K / 8]; };
struct block_iq3_s { uint8_t d[2]; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t signs[QK_K / 8]; uint8_t scales[QK_K / 64]; };
struct block_iq1_s { uint8_t d[2]; uint8_t qs[QK_K / 8]; uint8_t qh[QK_K / 16]; };
struct block_iq1_m { uint8_t qs[QK_K / 8]; uint8_t qh[QK_K / 16]; uint8_t scales[QK_K / 32]; };

static_assert(sizeof(block_q4_0) == 18, "block_q4_0");
static_assert(sizeof(block_q4_1) == 20, "block_q4_1");
static_assert(sizeof(block_q5_0) == 22, "block_q5_0");
static_assert(sizeof(block_q5_1) == 24, "block_q5_1");
static_assert(sizeof(block_q8_0) == 34, "block_q8_0");
static_assert(sizeof(block_q8_1) == 36, "block_q8_1");
static_assert(sizeof(block_q2_K) == 84, "block_q2_K");
static_assert(sizeof(block_q3_K) == 110, "block_q3_K");
static_assert(sizeof(block_q4_K) == 144, "block_q4_K");
static_assert(sizeof(block_q5_K) == 176, "block_q5_K");
static_assert(sizeof(block_q6_K) == 210, "block_q6_K");
static_assert(sizeof(block_q8_K) == 292, "block_q8_K");
static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl");
static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs");
static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4");
static_assert(sizeof(block_iq2_xxs) == 66, "block_iq2_xxs");
static_assert(sizeof(block_iq2_xs) == 74, "block_iq2_xs");
static_assert(sizeof(block_iq2_s) == 82, "block_iq2_s");
static_assert(sizeof(block_iq3_xxs) == 98, "block_iq3_xxs");
static_assert(sizeof(block_iq3_s) == 110, "block_iq3_s");
static_assert(sizeof(block_iq1_s) == 50, "block_iq1_s");
static_assert(sizeof(block_iq1_m) == 56, "block_iq1_m");

// ggml's type ids of the weight types
#define TYPE_F32 0
#define TYPE_F16 1
#define TYPE_Q4_0 2
#define TYPE_Q4_1 3
#define TYPE_Q5_0 6
#define TYPE_Q5_1 7
#define TYPE_Q8_0 8
#define TYPE_Q2_K 10
#define TYPE_Q3_K 11
#define TYPE_Q4_K 12
#define TYPE_Q5_K 13
#define TYPE_Q6_K 14
#define TYPE_IQ2_XXS 16
#define TYPE_IQ2_XS 17
#define TYPE_IQ3_XXS 18
#define TYPE_IQ1_S 19
#define TYPE_IQ4_NL 20
#define TYPE_IQ3_S 21
#define TYPE_IQ2_S 22
#define TYPE_IQ4_XS 23
#define TYPE_IQ1_M 29
#define TYPE_BF16 30
#define TYPE_MXFP4 39

// a little-endian u16, u32 and f16 at any byte offset
DEVICE uint32_t le16(const uint8_t* b) {
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8);
}

DEVICE uint32_t le32(const uint8_t* b) {
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}

DEVICE float f16_le(const uint8_t* b) {
    return half_to_float((uint16_t)le16(b));
}

// The sixteen levels a 4-bit index selects in IQ4_NL / IQ4_XS (ggml's kvalues_iq4nl) and in
// MXFP4 (the E2M1 values doubled, ggml's kvalues_mxfp4), four signed bytes to a little-endian
// word: no constant tables, so the same code runs under NVRTC and on the host.
#define LEVELS_IQ4 0
#define LEVELS_MXFP4 1

// level q (0..15) of table `levels`
DEVICE int table_level(int levels, int q) {
    const uint32_t w = levels == LEVELS_IQ4 ? (q < 8 ? (q < 4 ? 0xBFAD9881u : 0xF6EADDCFu) : (q < 12 ? 0x26190D01u : 0x71594535u))
                                            : (q < 8 ? (q < 4 ? 0x03020100u : 0x0C080604u) : (q < 12 ? 0xFDFEFF00u : 0xF4F8FAFCu));
    return (int)(int8_t)(uint8_t)(w >> (8 * (q & 3)));
}

// the levels of the four indices in the bytes of `idx` (each 0..15), as four signed bytes
DEVICE int table_levels4(int levels, uint32_t idx) {
    uint32_t out = 0;
    for (int b = 0; b < 4; b++) {
        out |= (uint32_t)(uint8_t)table_level(levels, (int)((idx >> (8 * b)) & 15u)) << (8 * b);
    }
    return (int)out;
}

// 2^(e - 128): MXFP4's E8M0 exponent halved, the doubled levels' scale (subnormal for e < 2)
DEVICE float e8m0_half(uint8_t e) {
    return __int_as_float((int)(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23));
}

// the 6-bit scale of group g (0..8) of an IQ4_XS super-block, less 32
DEVICE int iq4_xs_scale(const uint8_t* sb, int g) {
    const int low = (sb[4 + g / 2] >> (4 * (g % 2))) & 0x0F;
    const int high = ((sb[2] | (sb[3] << 8)) >> (2 * g)) & 3;
    return (low | (high << 4)) - 32;
}
