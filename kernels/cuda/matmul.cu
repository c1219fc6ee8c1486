// Matrix products for prompts: a tile of 8 activation rows per block along y, so that each
// weight chunk is unpacked once per 8 rows; the per-output arithmetic is matvec's (mulmat.cuh),
// so a row's result does not depend on which kernel ran it.
#include "mulmat.cuh"

#define MULMAT_TILE 8

// quantized weights, x as Q8_1 blocks; grid (ceil(n_out / 4), ceil(batch / 8)), 128 threads
KERNEL void mul_mat_q(const uint8_t* w, int64_t row_bytes, int type, int n_chunks, const uint8_t* xq, int batch, const float* bias, float* out, int n_out, int has_bias) {
    mul_mat_q_tile<MULMAT_TILE>(w, row_bytes, type, n_chunks, xq, BLOCK_ID_Y * MULMAT_TILE, batch, bias, out, n_out, has_bias);
}

// float weights, x as f32; grid (ceil(n_out / 4), ceil(batch / 8)), 128 threads
KERNEL void mul_mat_f(const uint8_t* w, int64_t row_bytes, int type, int cols, const float* x, int batch, const float* bias, float* out, int n_out, int has_bias) {
    mul_mat_f_tile<MULMAT_TILE>(w, row_bytes, type, cols, x, BLOCK_ID_Y * MULMAT_TILE, batch, bias, out, n_out, has_bias);
}

// Indexed products (ggml's mul_mat_id): slot p (one per block along y) times expert ids[p] of
// the stack `w` (experts `expert_bytes` apart, each n_out rows of `row_bytes`), its activation
// row p / per_row, into out row p. Each slot is matvec's one-row product (mulmat.cuh), so its
// row has the bits of its expert's own product of that row. Grid (ceil(n_out / 4), slots), 128
// threads.
KERNEL void mul_mat_q_id(const uint8_t* w, int64_t expert_bytes, int64_t row_bytes, int type, int n_chunks, const uint8_t* xq, const int32_t* ids, int per_row, float* out, int n_out) {
    const int p = BLOCK_ID_Y;
    const uint8_t* x = xq + (int64_t)(p / per_row) * n_chunks * (int64_t)sizeof(block_q8_1);
    mul_mat_q_tile<1>(w + ids[p] * expert_bytes, row_bytes, type, n_chunks, x, 0, 1, out, out + (int64_t)p * n_out, n_out, 0);
}

// the same over float weights and f32 activation rows of `cols`
KERNEL void mul_mat_f_id(const uint8_t* w, int64_t expert_bytes, int64_t row_bytes, int type, int cols, const float* x, const int32_t* ids, int per_row, float* out, int n_out) {
    const int p = BLOCK_ID_Y;
    mul_mat_f_tile<1>(w + ids[p] * expert_bytes, row_bytes, type, cols, x + (int64_t)(p / per_row) * cols, 0, 1, out, out + (int64_t)p * n_out, n_out, 0);
}
