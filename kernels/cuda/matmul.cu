// Matrix products for prompts. Quantized weights: tiles of MMA_W weight rows by MMA_X
// activation rows per block, one segment (SEGMENT_CHUNKS chunks, mulmat.cuh) at a time: the
// weights' chunks unpacked once into shared memory as signed bytes with their scales, the
// activations' Q8_1 blocks beside them, and each warp's 32 x 16 outputs taken by the tensor
// cores' int8 mma.sync, a 16-value half at a time (the integer parts chunk_value needs). The
// sums keep mulmat.cuh's order, so a row's result has the bits of the matrix-vector kernel's.
// Float weights: mulmat.cuh's warp per output over a tile of 8 activation rows.
#include "mulmat.cuh"

#define MULMAT_TILE 8  // activation rows per block of the float kernel
#define MMA_W 64       // weight rows (output columns) per block
#define MMA_X 32       // activation rows per block
// words per row of a tile in shared memory: a segment's 8 chunks of 8 words, and 4 more so that
// the 32 lanes' fragment reads (row g, word t) fall in 32 different banks
#define MMA_ROW_WORDS (SEGMENT_CHUNKS * 8 + 4)

// A block's segment of weights and activations in shared memory (declared once by the kernel,
// not by each type's body).
struct MmaTiles {
    int w_q[MMA_W * MMA_ROW_WORDS];
    float w_d[MMA_W * SEGMENT_CHUNKS * 2];  // [row][chunk][half]
    float w_m[MMA_W * SEGMENT_CHUNKS * 2];
    int x_q[MMA_X * MMA_ROW_WORDS];
    float x_d[MMA_X * SEGMENT_CHUNKS];
    int x_s[MMA_X * SEGMENT_CHUNKS * 2];  // Σ xq per half
};

// Which rows a block's tile takes: the batch's rows r0 .. r0 + MMA_X (`slots` null), or the
// indexed products' slots slots[0 .. MMA_X] (-1: none), slot p reading activation row
// p / per_row and writing out row p.
struct TileRows {
    int r0;
    int batch;
    const int32_t* slots;
    int per_row;
};

// the activation row of the tile's row r, or -1; its output row in *out_row
DEVICE int tile_row(TileRows rows, int r, int* out_row) {
    if (rows.slots == nullptr) {
        *out_row = rows.r0 + r;
        return rows.r0 + r < rows.batch ? rows.r0 + r : -1;
    }
    const int p = rows.slots[r];
    *out_row = p;
    return p >= 0 ? p / rows.per_row : -1;
}

// out[row][j] for the block's tile of outputs j0 .. j0 + MMA_W and the rows `rows` names; 128
// threads (4 warps: 2 along the weight rows by 2 along the activation rows)
template <int TYPE>
DEVICE void mul_mat_q_mma(MmaTiles* tiles, const uint8_t* w, int64_t row_bytes, int n_chunks, const uint8_t* xq, TileRows rows, int j0,
                          const float* bias, float* out, int n_out, int has_bias) {
    int* w_q = tiles->w_q;
    float* w_d = tiles->w_d;
    float* w_m = tiles->w_m;
    int* x_q = tiles->x_q;
    float* x_d = tiles->x_d;
    int* x_s = tiles->x_s;
    const int warp = THREAD_ID / WARP_SIZE;
    const int lane = THREAD_ID % WARP_SIZE;
    const int g = lane / 4;
    const int t = lane % 4;
    const int wj = (warp / 2) * 32;  // the warp's first weight row and activation row in the tile
    const int wr = (warp % 2) * 16;
    // output e of mma tile (a, b): weight row wj + 16a + g + 8 (e / 2), activation row
    // wr + 8b + 2t + e % 2 (the C fragment's layout)
    float total[16];
    for (int o = 0; o < 16; o++) {
        total[o] = 0.0f;
    }
    const int n_seg = (n_chunks + SEGMENT_CHUNKS - 1) / SEGMENT_CHUNKS;
    for (int s = 0; s < n_seg; s++) {
        const int c0 = s * SEGMENT_CHUNKS;
        const int nc = n_chunks - c0 < SEGMENT_CHUNKS ? n_chunks - c0 : SEGMENT_CHUNKS;
        for (int p = THREAD_ID; p < MMA_W * SEGMENT_CHUNKS; p += BLOCK_THREADS) {
            const int row = p / SEGMENT_CHUNKS;
            const int c = p % SEGMENT_CHUNKS;
            if (c < nc) {
                Chunk chunk = {};
                if (j0 + row < n_out) {
                    unpack_chunk<TYPE>(w + (int64_t)(j0 + row) * row_bytes, c0 + c, &chunk);
                }
                for (int k = 0; k < 8; k++) {
                    w_q[row * MMA_ROW_WORDS + c * 8 + k] = chunk.q[k];
                }
                for (int h = 0; h < 2; h++) {
                    w_d[(row * SEGMENT_CHUNKS + c) * 2 + h] = chunk.d[h];
                    w_m[(row * SEGMENT_CHUNKS + c) * 2 + h] = chunk.m[h];
                }
            }
        }
        for (int p = THREAD_ID; p < MMA_X * SEGMENT_CHUNKS; p += BLOCK_THREADS) {
            const int row = p / SEGMENT_CHUNKS;
            const int c = p % SEGMENT_CHUNKS;
            if (c < nc) {
                int xsum[2] = {0, 0};
                float dx = 0.0f;
                int out_row;
                const int x_row = tile_row(rows, row, &out_row);
                if (x_row >= 0) {
                    const uint8_t* xb = xq + ((int64_t)x_row * n_chunks + c0 + c) * sizeof(block_q8_1);
                    dx = f16_le(xb);
                    half_sums(xb + 4, xsum);
                    for (int k = 0; k < 8; k++) {
                        x_q[row * MMA_ROW_WORDS + c * 8 + k] = (int)load_u32_a4(xb + 4 + 4 * k);
                    }
                } else {
                    for (int k = 0; k < 8; k++) {
                        x_q[row * MMA_ROW_WORDS + c * 8 + k] = 0;
                    }
                }
                x_d[row * SEGMENT_CHUNKS + c] = dx;
                x_s[(row * SEGMENT_CHUNKS + c) * 2] = xsum[0];
                x_s[(row * SEGMENT_CHUNKS + c) * 2 + 1] = xsum[1];
            }
        }
        SYNC_THREADS();
        float part[16];
        for (int o = 0; o < 16; o++) {
            part[o] = 0.0f;
        }
        for (int c = 0; c < nc; c++) {
            for (int a = 0; a < 2; a++) {
                for (int b = 0; b < 2; b++) {
                    int isum[2][4];
                    for (int h = 0; h < 2; h++) {
                        const int word = c * 8 + h * 4 + t;
                        const int fa[2] = {w_q[(wj + 16 * a + g) * MMA_ROW_WORDS + word], w_q[(wj + 16 * a + g + 8) * MMA_ROW_WORDS + word]};
                        const int fb[1] = {x_q[(wr + 8 * b + g) * MMA_ROW_WORDS + word]};
                        for (int e = 0; e < 4; e++) {
                            isum[h][e] = 0;
                        }
                        mma_s8_16x8x16(isum[h], fa, fb);
                    }
                    for (int e = 0; e < 4; e++) {
                        const int wrow = wj + 16 * a + g + 8 * (e / 2);
                        const int xrow = wr + 8 * b + 2 * t + e % 2;
                        const int is[2] = {isum[0][e], isum[1][e]};
                        const float v = chunk_value(x_d[xrow * SEGMENT_CHUNKS + c], &w_d[(wrow * SEGMENT_CHUNKS + c) * 2], &w_m[(wrow * SEGMENT_CHUNKS + c) * 2], is,
                                                    &x_s[(xrow * SEGMENT_CHUNKS + c) * 2]);
                        part[(a * 2 + b) * 4 + e] = part[(a * 2 + b) * 4 + e] + v;
                    }
                }
            }
        }
        for (int o = 0; o < 16; o++) {
            total[o] = total[o] + part[o];
        }
        SYNC_THREADS();  // the tiles are written again for the next segment
    }
    for (int o = 0; o < 16; o++) {
        const int a = o / 8;
        const int b = (o / 4) % 2;
        const int e = o % 4;
        const int j = j0 + wj + 16 * a + g + 8 * (e / 2);
        int r;
        if (j < n_out && tile_row(rows, wr + 8 * b + 2 * t + e % 2, &r) >= 0) {
            out[(int64_t)r * n_out + j] = has_bias ? total[o] + bias[j] : total[o];
        }
    }
}

// Quantized weights, x as Q8_1 blocks: the batch's rows (tile_experts null), or the indexed
// products of many slots (a prompt's, ggml's mul_mat_id): the slots grouped by expert into tiles
// of MMA_X (tile_slots, -1 past an expert's last slot), tile y times expert tile_experts[y] of
// the stack `w` (experts `expert_bytes` apart), slot p reading activation row p / per_row and
// writing out row p, so that each tile reads its expert's weights once; a slot's row has the
// bits of the one-row product (matvec.cu). Grid (ceil(n_out / MMA_W), ceil(batch / MMA_X) or
// tiles), 128 threads.
KERNEL void mul_mat_q(const uint8_t* w, int64_t expert_bytes, int64_t row_bytes, int type, int n_chunks, const uint8_t* xq, int batch, const int32_t* tile_experts, const int32_t* tile_slots, int per_row, const float* bias, float* out, int n_out, int has_bias) {
    SHARED(MmaTiles, tiles, );
    TileRows rows = {(int)BLOCK_ID_Y * MMA_X, batch, nullptr, 1};
    if (tile_experts != nullptr) {
        rows = TileRows{0, 0, tile_slots + (int64_t)BLOCK_ID_Y * MMA_X, per_row};
        w += tile_experts[BLOCK_ID_Y] * expert_bytes;
    }
#define MUL_MAT_Q_MMA_CASE(T) \
    case T:                   \
        mul_mat_q_mma<T>(&tiles, w, row_bytes, n_chunks, xq, rows, BLOCK_ID * MMA_W, bias, out, n_out, has_bias); \
        return;
    switch (type) {
        QUANT_TYPES(MUL_MAT_Q_MMA_CASE)
        default:
            // NaN: a type without a kernel shows at once
            for (int k = THREAD_ID; k < MMA_W * MMA_X; k += BLOCK_THREADS) {
                int r;
                const int j = BLOCK_ID * MMA_W + k % MMA_W;
                if (j < n_out && tile_row(rows, k / MMA_W, &r) >= 0) {
                    out[(int64_t)r * n_out + j] = __int_as_float(0x7fc00000);
                }
            }
    }
#undef MUL_MAT_Q_MMA_CASE
}

// float weights, x as f32; grid (ceil(n_out / 4), ceil(batch / 8)), 128 threads
KERNEL void mul_mat_f(const uint8_t* w, int64_t row_bytes, int type, int cols, const float* x, int batch, const float* bias, float* out, int n_out, int has_bias) {
    mul_mat_f_tile<MULMAT_TILE>(w, row_bytes, type, cols, x, BLOCK_ID_Y * MULMAT_TILE, batch, bias, out, n_out, has_bias);
}
