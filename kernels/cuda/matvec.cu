// Matrix-vector products for small batches (decoding): the weight row's segments spread over a
// few lanes of a warp, integer dot products by dp4a (the idea of llama.cpp's mmvq), one
// activation row per block along y, or up to MATVEC_ROWS of them, each chunk unpacked once for
// them all. See mulmat.cuh for the order of the sums: the same bits either way.
#include "mulmat.cuh"

#define MATVEC_ROWS 8

// An indexed product's slot p = y as a batch of one row: `xq` and `out` moved to its activation
// row (p / per_row, of n_chunks Q8_1 blocks) and its output row; the byte offset of its expert
// (ids[p], experts `expert_bytes` apart) returned.
DEVICE int64_t as_slot(const int32_t* ids, int per_row, int64_t expert_bytes, int n_chunks, int n_out, const uint8_t*& xq, float*& out) {
    const int p = BLOCK_ID_Y;
    xq += (int64_t)(p / per_row) * n_chunks * (int64_t)sizeof(block_q8_1);
    out += (int64_t)p * n_out;
    return ids[p] * expert_bytes;
}

// Quantized weights, x as Q8_1 blocks, `lanes` lanes per output: the batch's row y (ids null),
// or an indexed product's slot (ggml's mul_mat_id): slot p = y times expert ids[p] of the stack
// `w` (experts `expert_bytes` apart, each n_out rows of `row_bytes`), its activation row
// p / per_row, into out row p, with the bits of that expert's own product of the row. Grid
// (ceil(n_out · lanes / 128), batch or slots), 128 threads.
KERNEL void mul_mat_vec_q(const uint8_t* w, int64_t expert_bytes, int64_t row_bytes, int type, int n_chunks, int lanes, const uint8_t* xq, int batch, const int32_t* ids, int per_row, const float* bias, float* out, int n_out, int has_bias) {
    // an indexed slot as a batch of one row (one call of the body: each call is its code again
    // for every weight type)
    int row = BLOCK_ID_Y;
    if (ids != nullptr) {
        w += as_slot(ids, per_row, expert_bytes, n_chunks, n_out, xq, out);
        row = 0;
        batch = 1;
        has_bias = 0;
    }
    mul_mat_q_tile<1, 1>(w, w, row_bytes, type, n_chunks, lanes, xq, row, batch, bias, bias, out, n_out, has_bias, 0, BLOCK_ID);
}

// A gated unit's two products and its activation in one pass (decoding's feed-forward): out =
// glu_value(act, gate, up) of the products by `w` (the gate's rows) and `w2` (the up's), each
// with the bits mul_mat_vec_q gives it, so the same as the two products then activation.cu's
// glu. One row (ids null), or slot y of an indexed product as mul_mat_vec_q's (the experts of
// both stacks `expert_bytes` apart; no bias). Grid (ceil(n_out · lanes / 128), 1 or slots), 128
// threads.
KERNEL void mul_mat_vec_q_glu(const uint8_t* w, const uint8_t* w2, int64_t expert_bytes, int64_t row_bytes, int type, int n_chunks, int lanes, const uint8_t* xq, const int32_t* ids, int per_row, const float* bias, const float* bias2, float* out, int n_out, int has_bias, int act) {
    if (ids != nullptr) {
        const int64_t expert = as_slot(ids, per_row, expert_bytes, n_chunks, n_out, xq, out);
        w += expert;
        w2 += expert;
        has_bias = 0;
    }
    mul_mat_q_tile<1, 2>(w, w2, row_bytes, type, n_chunks, lanes, xq, 0, 1, bias, bias2, out, n_out, has_bias, act, BLOCK_ID);
}

// The gated unit of a batch of rows (a few sequences' decoding steps), MATVEC_ROWS rows per
// block along y, each row's outputs with mul_mat_vec_q_glu's bits. Grid (ceil(n_out · lanes /
// 128), ceil(batch / MATVEC_ROWS)), 128 threads.
KERNEL void mul_mat_vec_q_glu_rows(const uint8_t* w, const uint8_t* w2, int64_t row_bytes, int type, int n_chunks, int lanes, const uint8_t* xq, int batch, const float* bias, const float* bias2, float* out, int n_out, int has_bias, int act) {
    mul_mat_q_tile<MATVEC_ROWS, 2>(w, w2, row_bytes, type, n_chunks, lanes, xq, BLOCK_ID_Y * MATVEC_ROWS, batch, bias, bias2, out, n_out, has_bias, act, BLOCK_ID);
}

// One product of a set and the place of a launch block among that product's blocks.
struct SetProduct {
    const uint8_t* w;
    const float* bias;
    float* out;
    int n_out;
    int block;
};

// The product that launch block `block` of mul_mat_vec_q_sets(_rows) computes: matrix 0's
// blocks first, then matrix 1's, then matrix 2's.
DEVICE SetProduct product_of_block(int lanes, int block, const uint8_t* w0, const uint8_t* w1, const uint8_t* w2, const float* bias0, const float* bias1, const float* bias2, float* out0, float* out1, float* out2, int n0, int n1, int n2) {
    const int per_block = MULMAT_THREADS / lanes;
    const int blocks0 = (n0 + per_block - 1) / per_block;
    const int blocks1 = (n1 + per_block - 1) / per_block;
    if (block < blocks0) {
        return SetProduct{w0, bias0, out0, n0, block};
    }
    if (block < blocks0 + blocks1) {
        return SetProduct{w1, bias1, out1, n1, block - blocks0};
    }
    return SetProduct{w2, bias2, out2, n2, block - blocks0 - blocks1};
}

// Up to three products of one activation row in one launch (decoding's query, key and value
// projections): matrix m's rows at w_m, its n_m outputs into out_m (plus bias_m unless it is
// null), the matrices of one type and row size. The grid's blocks are matrix 0's (as many as
// mul_mat_vec_q launches for it), then matrix 1's, then matrix 2's (n_2 0: none); each output
// has mul_mat_vec_q's bits. Grid (the sum of the three, 1), 128 threads.
KERNEL void mul_mat_vec_q_sets(const uint8_t* w0, const uint8_t* w1, const uint8_t* w2, int64_t row_bytes, int type, int n_chunks, int lanes, const uint8_t* xq, const float* bias0, const float* bias1, const float* bias2, float* out0, float* out1, float* out2, int n0, int n1, int n2) {
    const SetProduct p = product_of_block(lanes, BLOCK_ID, w0, w1, w2, bias0, bias1, bias2, out0, out1, out2, n0, n1, n2);
    mul_mat_q_tile<1, 1>(p.w, p.w, row_bytes, type, n_chunks, lanes, xq, 0, 1, p.bias, p.bias, p.out, p.n_out, p.bias != nullptr, 0, p.block);
}

// The same for a batch of rows, MATVEC_ROWS per block along y (each matrix's output rows of
// n_m values): also a plain product of a few rows (a set of one), so that one body of 8-row
// tiles is compiled for them both. Grid (the sum of the three, ceil(batch / MATVEC_ROWS)), 128
// threads.
KERNEL void mul_mat_vec_q_sets_rows(const uint8_t* w0, const uint8_t* w1, const uint8_t* w2, int64_t row_bytes, int type, int n_chunks, int lanes, const uint8_t* xq, int batch, const float* bias0, const float* bias1, const float* bias2, float* out0, float* out1, float* out2, int n0, int n1, int n2) {
    const SetProduct p = product_of_block(lanes, BLOCK_ID, w0, w1, w2, bias0, bias1, bias2, out0, out1, out2, n0, n1, n2);
    mul_mat_q_tile<MATVEC_ROWS, 1>(p.w, p.w, row_bytes, type, n_chunks, lanes, xq, BLOCK_ID_Y * MATVEC_ROWS, batch, p.bias, p.bias, p.out, p.n_out, p.bias != nullptr, 0, p.block);
}

// Float weights, x as f32: the batch's row y, or slot y of an indexed product (as above, x rows
// of `cols`); grid (ceil(n_out / 4), batch or slots), 128 threads
KERNEL void mul_mat_vec_f(const uint8_t* w, int64_t expert_bytes, int64_t row_bytes, int type, int cols, const float* x, int batch, const int32_t* ids, int per_row, const float* bias, float* out, int n_out, int has_bias) {
    if (ids != nullptr) {
        const int p = BLOCK_ID_Y;
        mul_mat_f_tile<1>(w + ids[p] * expert_bytes, row_bytes, type, cols, x + (int64_t)(p / per_row) * cols, 0, 1, bias, out + (int64_t)p * n_out, n_out, 0);
        return;
    }
    mul_mat_f_tile<1>(w, row_bytes, type, cols, x, BLOCK_ID_Y, batch, bias, out, n_out, has_bias);
}
