// Matrix products for prompts: a tile of 8 activation rows per block along y, so that each
// weight chunk is unpacked once per 8 rows; the per-output arithmetic is matvec's (mulmat.cuh),
// so a row's result does not depend on which kernel ran it.
#include "mulmat.cuh"

#define MULMAT_TILE 8

// quantized weights, x as Q8_1 blocks; grid (ceil(n_out / 4), ceil(batch / 8)), 128 threads
KERNEL void mul_mat_q(const uint8_t* w, int64_t row_bytes, int type, int n_chunks, const uint8_t* xq, int batch, const float* bias, float* out, int n_out, int has_bias) {
    mul_mat_q_tile<MULMAT_TILE>(w, row_bytes, type, n_chunks, xq, batch, bias, out, n_out, has_bias);
}

// float weights, x as f32; grid (ceil(n_out / 4), ceil(batch / 8)), 128 threads
KERNEL void mul_mat_f(const uint8_t* w, int64_t row_bytes, int type, int cols, const float* x, int batch, const float* bias, float* out, int n_out, int has_bias) {
    mul_mat_f_tile<MULMAT_TILE>(w, row_bytes, type, cols, x, batch, bias, out, n_out, has_bias);
}
