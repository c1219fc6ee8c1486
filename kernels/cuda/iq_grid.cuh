// The grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) read one group of 8
// values at a time, as the engine's reference (`quant/iq_grid`) unpacks them: each group is an
// index into a lattice grid (iq_grid_tables.cuh) with, for IQ2 and IQ3, 8 signs; an odd scale
// per 16 or 32 values; one f16 scale per 256-value super-block (blocks.cuh has the layouts).
#pragma once
#include "blocks.cuh"
#include "iq_grid_tables.cuh"

// One group of 8 values: value j = d · (signed byte j of v). IQ2 and IQ3: the grid magnitudes
// with their signs, d = (d₁₆ · scale) · c, the reference's scale, so d · byte is the reference's
// value bit for bit. IQ1 (grid values -1, 0, 1 shifted by ±1/8): the bytes are 8 · value ± 1
// and d = (d₁₆ · scale) / 8, the same real product (exact: the division by 8 only moves the
// exponent of a normal float), so the values stay integers for dp4a.
struct GridGroup {
    uint32_t v[2];
    float d;
};

DEVICE bool is_grid_type(int type) {
    return type == TYPE_IQ2_XXS || type == TYPE_IQ2_XS || type == TYPE_IQ2_S || type == TYPE_IQ3_XXS || type == TYPE_IQ3_S ||
           type == TYPE_IQ1_S || type == TYPE_IQ1_M;
}

DEVICE int grid_block_bytes(int type) {
    switch (type) {
        case TYPE_IQ2_XXS: return sizeof(block_iq2_xxs);
        case TYPE_IQ2_XS: return sizeof(block_iq2_xs);
        case TYPE_IQ2_S: return sizeof(block_iq2_s);
        case TYPE_IQ3_XXS: return sizeof(block_iq3_xxs);
        case TYPE_IQ3_S: return sizeof(block_iq3_s);
        case TYPE_IQ1_S: return sizeof(block_iq1_s);
        default: return sizeof(block_iq1_m);
    }
}

// the low 7 bits of `bits` with an eighth sign that makes their count even (ggml's ksigns_iq2xs),
// computed: 0x6996 holds the parity of each 4-bit value
DEVICE uint32_t grid_signs7(uint32_t bits) {
    const uint32_t b = bits & 127u;
    return b | (((0x6996u >> ((b ^ (b >> 4)) & 15u)) & 1u) << 7);
}

// the four magnitude bytes of `mag` (1..62: grids hold no zero) negated where the four low bits
// of `signs` are set
DEVICE uint32_t grid_with_signs(uint32_t mag, uint32_t signs) {
    uint32_t out = 0;
    for (int b = 0; b < 4; b++) {
        const uint32_t m = (mag >> (8 * b)) & 255u;
        out |= (((signs >> b) & 1u) ? (256u - m) & 255u : m) << (8 * b);
    }
    return out;
}

// the odd scale of group g of 8 from its 32 values' byte of two 4-bit scales (IQ2_XS, IQ2_S)
DEVICE int grid_two_scales(uint8_t byte, int g) {
    return 2 * (g % 4 < 2 ? byte & 15 : byte >> 4) + 1;
}

// an IQ1 entry's 8 values in {-1, 0, 1} (signed bytes) as 8 · value + shift
DEVICE void grid_iq1_values(uint64_t entry, int shift, uint32_t* v) {
    for (int w = 0; w < 2; w++) {
        uint32_t out = 0;
        for (int b = 0; b < 4; b++) {
            const int value = (int)(int8_t)(uint8_t)(entry >> (8 * (4 * w + b)));
            out |= (uint32_t)(uint8_t)(8 * value + shift) << (8 * b);
        }
        v[w] = out;
    }
}

// group g (0..32) of the super-block at `sb` of grid type `type`
DEVICE GridGroup grid_group(const uint8_t* sb, int type, int g) {
    const int ib = g / 4;  // group of 32
    const int l = g % 4;   // group of 8 inside it
    GridGroup out;
    uint64_t mags = 0;
    uint32_t signs = 0;
    int scale = 1;
    float c = 1.0f;
    switch (type) {
        case TYPE_IQ2_XXS: {
            // per 32 values: four 8-bit indices, then four 7-bit sign sets and a 4-bit scale
            const uint32_t aux = le32(sb + 2 + 8 * ib + 4);
            mags = IQ2XXS_GRID[sb[2 + 8 * ib + l]];
            signs = grid_signs7(aux >> (7 * l));
            scale = 2 * (int)(aux >> 28) + 1;
            c = 0.125f;
            break;
        }
        case TYPE_IQ2_XS: {
            // a u16 per group: a 9-bit index and 7 signs
            const uint32_t q = le16(sb + 2 + 2 * g);
            mags = IQ2XS_GRID[q & 511u];
            signs = grid_signs7(q >> 9);
            scale = grid_two_scales(sb[66 + ib], g);
            c = 0.125f;
            break;
        }
        case TYPE_IQ2_S: {
            // the index's low 8 bits, 8 signs, 2 high bits per group in the 32 values' byte
            mags = IQ2S_GRID[sb[2 + g] | ((sb[66 + ib] << (8 - 2 * l)) & 0x300)];
            signs = sb[34 + g];
            scale = grid_two_scales(sb[74 + ib], g);
            c = 0.125f;
            break;
        }
        case TYPE_IQ3_XXS: {
            // two 8-bit indices of 4 magnitudes each; per 32 values four 7-bit sign sets and a scale
            const uint32_t aux = le32(sb + 66 + 4 * ib);
            mags = (uint64_t)IQ3XXS_GRID[sb[2 + 2 * g]] | ((uint64_t)IQ3XXS_GRID[sb[3 + 2 * g]] << 32);
            signs = grid_signs7(aux >> (7 * l));
            scale = 2 * (int)(aux >> 28) + 1;
            c = 0.25f;
            break;
        }
        case TYPE_IQ3_S: {
            // two 9-bit indices (high bits in the 32 values' byte), 8 signs, a 4-bit scale per 32
            const uint32_t qh = sb[66 + ib];
            const uint32_t i1 = sb[2 + 2 * g] | ((qh << (8 - 2 * l)) & 256u);
            const uint32_t i2 = sb[3 + 2 * g] | ((qh << (7 - 2 * l)) & 256u);
            mags = (uint64_t)IQ3S_GRID[i1] | ((uint64_t)IQ3S_GRID[i2] << 32);
            signs = sb[74 + g];
            scale = 2 * (ib % 2 == 0 ? sb[106 + ib / 2] & 15 : sb[106 + ib / 2] >> 4) + 1;
            break;
        }
        case TYPE_IQ1_S: {
            // per 32 values a u16: the indices' high bits (3 each), a 3-bit scale, the shift's sign
            const uint32_t qh = le16(sb + 34 + 2 * ib);
            scale = 2 * (int)((qh >> 12) & 7) + 1;
            grid_iq1_values(IQ1S_GRID[sb[2 + g] | (((qh >> (3 * l)) & 7) << 8)], qh & 0x8000u ? -1 : 1, out.v);
            out.d = (f16_le(sb) * (float)scale) * 0.125f;
            return out;
        }
        default: {
            // IQ1_M: a byte per two groups (3 high index bits and the shift's sign each), four u16
            // of 3-bit scales (one per 16 values) whose top nibbles hold the f16 d
            // (each word read where it is used: an array indexed by the group would live on the stack)
            const uint16_t d_bits = (uint16_t)((le16(sb + 48) >> 12) | ((le16(sb + 50) >> 8) & 0x00f0u) | ((le16(sb + 52) >> 4) & 0x0f00u) |
                                               (le16(sb + 54) & 0xf000u));
            const uint32_t s = le16(sb + 48 + 2 * (ib / 2)) >> (6 * (ib % 2));
            scale = 2 * (int)(l < 2 ? s & 7 : (s >> 3) & 7) + 1;
            const uint32_t qh = sb[32 + 2 * ib + l / 2];
            const uint32_t high = l % 2 == 0 ? (qh << 8) & 0x700u : (qh << 4) & 0x700u;
            grid_iq1_values(IQ1S_GRID[sb[g] | high], qh & (l % 2 == 0 ? 0x08u : 0x80u) ? -1 : 1, out.v);
            out.d = (half_to_float(d_bits) * (float)scale) * 0.125f;
            return out;
        }
    }
    out.v[0] = grid_with_signs((uint32_t)mags, signs);
    out.v[1] = grid_with_signs((uint32_t)(mags >> 32), signs >> 4);
    out.d = (f16_le(sb) * (float)scale) * c;
    return out;
}

// value j (0..8) of a decoded group, the reference's dequantization bit for bit
DEVICE float grid_group_value(const GridGroup& g, int j) {
    return g.d * (float)(int8_t)(uint8_t)(g.v[j / 4] >> (8 * (j % 4)));
}

// the group of 8 values holding value e of a row of grid type `type`
DEVICE GridGroup grid_group_of(const uint8_t* row, int type, int e) {
    return grid_group(row + (int64_t)(e / QK_K) * grid_block_bytes(type), type, (e % QK_K) / 8);
}

// value e of a row of grid type `type`
DEVICE float grid_value(const uint8_t* row, int type, int e) {
    return grid_group_value(grid_group_of(row, type, e), e % 8);
}

// chunk c (32 values) of a row of grid type `type` as 8 words of signed bytes and a scale per
// half of 16 (no offset): the form of vecdot.cuh's Chunk
DEVICE void grid_chunk(const uint8_t* row, int type, int c, int* q, float* d) {
    const uint8_t* sb = row + (int64_t)(c / 8) * grid_block_bytes(type);
    for (int l = 0; l < 4; l++) {
        const GridGroup g = grid_group(sb, type, 4 * (c % 8) + l);
        q[2 * l] = (int)g.v[0];
        q[2 * l + 1] = (int)g.v[1];
        d[l / 2] = g.d;  // groups 0 and 1 (and 2 and 3) share their scale in every grid type
    }
}
