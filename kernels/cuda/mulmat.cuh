// The bodies shared by the matrix kernels, and the order of an output's sums that every one of
// them keeps, so that a row's result does not depend on the kernel, the tile or the batch:
// - a chunk (32 values) is chunk_value of its exact integer parts (vecdot.cuh);
// - a segment is SEGMENT_CHUNKS chunks in K order (the last one may be shorter), its chunks
//   summed left to right from 0;
// - the output is its segments summed left to right from 0 (then + bias).
// The integer parts are exact whether dp4a or the tensor cores take them, so the matrix-vector
// body here and the tensor-core tiles of matmul.cu give the same bits.
#pragma once
#include "vecdot.cuh"
#include "activation.cuh"

#define MULMAT_THREADS 128  // threads per block of the quantized bodies
#define MULMAT_WARPS 4      // warps (output columns) per block of the float bodies
#define SEGMENT_CHUNKS 8    // chunks per segment: 256 values, a K-quant super-block

// The matrix-vector body: `lanes` lanes (a power of two, at most 32) per output column j (a
// weight row), a tile of ROWS activation rows per block along y. Lane i of an output takes its
// segments i, i + lanes, ..., each segment's chunks unpacked once for the tile; after each round
// of segments the output's lanes pass their partial sums along, in segment order, into a total
// every one of them keeps. out[r][j] = that total (+ bias[j]) for the rows r0 .. r0 + ROWS;
// x: rows of n_chunks Q8_1 blocks. Grid (ceil(n_out · lanes / MULMAT_THREADS), _). `w` starts a
// device allocation or a whole number of weight rows into one, `xq` a whole number of rows into
// one (the aligned loads of unpack_chunk).
// MATS 2: a gated unit's two products at once, `w` the gate's rows and `w2` the up's (the same
// type and shape), each with the sums of its own product, and out[r][j] =
// glu_value(act, gate (+ bias[j]), up (+ bias2[j]), j, n_out): the bits of the two products
// written out, then activation.cu's glu over them. `block`: the block's place along the
// outputs (BLOCK_ID, or its place within one of several products of a launch).
template <int ROWS, int TYPE, int MATS>
DEVICE void mul_mat_q_typed(const uint8_t* w, const uint8_t* w2, int64_t row_bytes, int n_chunks, int lanes, const uint8_t* xq, int r0, int batch,
                            const float* bias, const float* bias2, float* out, int n_out, int has_bias, int act, int block) {
    const int lane = THREAD_ID % WARP_SIZE;
    const int i = lane % lanes;
    const int first = lane - i;  // the output's first lane
    const int thread = (int)(block * MULMAT_THREADS + THREAD_ID);
    const int j = thread / lanes;
    if ((thread - lane) / lanes >= n_out) {
        return;  // the whole warp: its shuffles below see every lane
    }
    const bool live = j < n_out;  // a lane past the last output only takes part in the shuffles
    const uint8_t* rows_of[2] = {w + (int64_t)(live ? j : 0) * row_bytes, (MATS == 2 ? w2 : w) + (int64_t)(live ? j : 0) * row_bytes};
    const int n_seg = (n_chunks + SEGMENT_CHUNKS - 1) / SEGMENT_CHUNKS;
    float total[MATS][ROWS];
    for (int m = 0; m < MATS; m++) {
        for (int t = 0; t < ROWS; t++) {
            total[m][t] = 0.0f;
        }
    }
    for (int s0 = 0; s0 < n_seg; s0 += lanes) {
        float part[MATS][ROWS];
        for (int m = 0; m < MATS; m++) {
            for (int t = 0; t < ROWS; t++) {
                part[m][t] = 0.0f;
            }
        }
        const int s = s0 + i;
        if (live && s < n_seg) {
            const int end = (s + 1) * SEGMENT_CHUNKS < n_chunks ? (s + 1) * SEGMENT_CHUNKS : n_chunks;
            for (int c = s * SEGMENT_CHUNKS; c < end; c++) {
UNROLL
                for (int m = 0; m < MATS; m++) {
                    Chunk chunk;
                    unpack_chunk<TYPE>(m == 0 ? rows_of[0] : rows_of[MATS - 1], c, &chunk);
                    for (int t = 0; t < ROWS; t++) {
                        if (r0 + t < batch) {
                            part[m][t] = part[m][t] + chunk_dot(&chunk, xq + ((int64_t)(r0 + t) * n_chunks + c) * sizeof(block_q8_1));
                        }
                    }
                }
            }
        }
        for (int k = 0; k < lanes; k++) {
            float got[MATS][ROWS];
            shfl_floats<MATS * ROWS>(&got[0][0], &part[0][0], first + k);
UNROLL
            for (int m = 0; m < MATS; m++) {
                for (int t = 0; t < ROWS; t++) {
                    if (s0 + k < n_seg) {
                        total[m][t] = total[m][t] + got[m][t];
                    }
                }
            }
        }
    }
    if (live && i == 0) {
        for (int t = 0; t < ROWS; t++) {
            if (r0 + t < batch) {
                float v = has_bias ? total[0][t] + bias[j] : total[0][t];
                if (MATS == 2) {
                    const float up = has_bias ? total[MATS - 1][t] + bias2[j] : total[MATS - 1][t];
                    v = glu_value(act, v, up, j, n_out);
                }
                out[(int64_t)(r0 + t) * n_out + j] = v;
            }
        }
    }
}

// Every quantized weight type with a chunk unpack, as a list of X(TYPE) for the dispatches.
#define QUANT_TYPES(X) \
    X(TYPE_Q4_0)       \
    X(TYPE_Q4_1)       \
    X(TYPE_Q5_0)       \
    X(TYPE_Q5_1)       \
    X(TYPE_Q8_0)       \
    X(TYPE_Q2_K)       \
    X(TYPE_Q3_K)       \
    X(TYPE_Q4_K)       \
    X(TYPE_Q5_K)       \
    X(TYPE_Q6_K)       \
    X(TYPE_IQ4_NL)     \
    X(TYPE_IQ4_XS)     \
    X(TYPE_MXFP4)      \
    X(TYPE_IQ2_XXS)    \
    X(TYPE_IQ2_XS)     \
    X(TYPE_IQ2_S)      \
    X(TYPE_IQ3_XXS)    \
    X(TYPE_IQ3_S)      \
    X(TYPE_IQ1_S)      \
    X(TYPE_IQ1_M)

// NaN into every output of rows r0 .. r0 + rows and columns j0 .. j0 + cols that exists: a
// type without a kernel shows at once
DEVICE void nan_outputs(int j0, int cols, int r0, int rows, int batch, float* out, int n_out) {
    for (int k = THREAD_ID; k < cols * rows; k += BLOCK_THREADS) {
        const int j = j0 + k % cols;
        const int r = r0 + k / cols;
        if (j < n_out && r < batch) {
            out[(int64_t)r * n_out + j] = __int_as_float(0x7fc00000);
        }
    }
}

// the matrix-vector body for the weight type `type`, dispatched once per launch (MATS 2: the
// gated unit's form, `w2`, `bias2` and `act` read)
template <int ROWS, int MATS>
DEVICE void mul_mat_q_tile(const uint8_t* w, const uint8_t* w2, int64_t row_bytes, int type, int n_chunks, int lanes, const uint8_t* xq, int r0, int batch,
                           const float* bias, const float* bias2, float* out, int n_out, int has_bias, int act, int block) {
#define MUL_MAT_Q_CASE(T) \
    case T:               \
        mul_mat_q_typed<ROWS, T, MATS>(w, w2, row_bytes, n_chunks, lanes, xq, r0, batch, bias, bias2, out, n_out, has_bias, act, block); \
        return;
    switch (type) {
        QUANT_TYPES(MUL_MAT_Q_CASE)
        default:
            nan_outputs(block * (MULMAT_THREADS / lanes), MULMAT_THREADS / lanes, r0, ROWS, batch, out, n_out);
    }
#undef MUL_MAT_Q_CASE
}

// a float weight: F32, F16 or BF16
DEVICE float float_weight(const uint8_t* row, int type, int e) {
    if (type == TYPE_F32) {
        return __int_as_float((int)le32(row + 4 * (int64_t)e));
    }
    const uint16_t h = (uint16_t)(row[2 * (int64_t)e] | (row[2 * (int64_t)e + 1] << 8));
    if (type == TYPE_F16) {
        return half_to_float(h);
    }
    if (type == TYPE_BF16) {
        return __int_as_float((int)((uint32_t)h << 16));
    }
    return __int_as_float(0x7fc00000);
}

// The float weights' body: one warp per output column j (MULMAT_WARPS per block) over f32
// activations (rows of `cols`), lane l taking the values l, l + 32, ... of the row in order,
// the lanes' partial sums meeting in the warp's fixed butterfly; the same for every ROWS
template <int ROWS>
DEVICE void mul_mat_f_tile(const uint8_t* w, int64_t row_bytes, int type, int cols, const float* x, int r0, int batch, const float* bias,
                           float* out, int n_out, int has_bias) {
    const int lane = THREAD_ID % WARP_SIZE;
    const int j = BLOCK_ID * MULMAT_WARPS + THREAD_ID / WARP_SIZE;
    if (j >= n_out) {
        return;
    }
    const uint8_t* row = w + (int64_t)j * row_bytes;
    float acc[ROWS];
    for (int t = 0; t < ROWS; t++) {
        acc[t] = 0.0f;
    }
    for (int e = lane; e < cols; e += WARP_SIZE) {
        const float wv = float_weight(row, type, e);
        for (int t = 0; t < ROWS; t++) {
            if (r0 + t < batch) {
                acc[t] = acc[t] + wv * x[(int64_t)(r0 + t) * cols + e];
            }
        }
    }
    for (int t = 0; t < ROWS; t++) {
        if (r0 + t < batch) {
            const float v = warp_sum_f(acc[t]);
            if (lane == 0) {
                out[(int64_t)(r0 + t) * n_out + j] = has_bias ? v + bias[j] : v;
            }
        }
    }
}
