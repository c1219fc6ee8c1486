// Matrix-vector products for small batches (decoding): the weight row's segments spread over a
// few lanes of a warp, integer dot products by dp4a (the idea of llama.cpp's mmvq), one
// activation row per block along y, or up to MATVEC_ROWS of them, each chunk unpacked once for
// them all. See mulmat.cuh for the order of the sums: the same bits either way.
#include "mulmat.cuh"

#define MATVEC_ROWS 8

// quantized weights, x as Q8_1 blocks, `lanes` lanes per output; grid
// (ceil(n_out · lanes / 128), batch), 128 threads
KERNEL void mul_mat_vec_q(const uint8_t* w, int64_t row_bytes, int type, int n_chunks, int lanes, const uint8_t* xq, int batch, const float* bias, float* out, int n_out, int has_bias) {
    mul_mat_q_tile<1>(w, row_bytes, type, n_chunks, lanes, xq, BLOCK_ID_Y, batch, bias, out, n_out, has_bias);
}

// the same for MATVEC_ROWS rows per block; grid (ceil(n_out · lanes / 128), ceil(batch / MATVEC_ROWS))
KERNEL void mul_mat_vec_q_rows(const uint8_t* w, int64_t row_bytes, int type, int n_chunks, int lanes, const uint8_t* xq, int batch, const float* bias, float* out, int n_out, int has_bias) {
    mul_mat_q_tile<MATVEC_ROWS>(w, row_bytes, type, n_chunks, lanes, xq, BLOCK_ID_Y * MATVEC_ROWS, batch, bias, out, n_out, has_bias);
}

// float weights, x as f32; grid (ceil(n_out / 4), batch), 128 threads
KERNEL void mul_mat_vec_f(const uint8_t* w, int64_t row_bytes, int type, int cols, const float* x, int batch, const float* bias, float* out, int n_out, int has_bias) {
    mul_mat_f_tile<1>(w, row_bytes, type, cols, x, BLOCK_ID_Y, batch, bias, out, n_out, has_bias);
}
