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
#define TYPE_BF16 30

// a little-endian f16 stored as two bytes
DEVICE float f16_le(const uint8_t* b) {
    return half_to_float((uint16_t)(b[0] | (b[1] << 8)));
}
