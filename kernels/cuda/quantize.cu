// Activation quantization to Q8_0 / Q8_1 (q8.cuh's arithmetic), one warp per block of 32, one
// lane per value.
#include "q8.cuh"

// x: n_blocks · 32 values; out: n_blocks blocks of Q8_0 (with_sum 0) or Q8_1 (with_sum 1).
// The block's threads must be a multiple of 32.
KERNEL void quantize_q8(const float* x, uint8_t* out, int64_t n_blocks, int with_sum) {
    const int64_t blk = ((int64_t)BLOCK_ID * BLOCK_THREADS + THREAD_ID) / WARP_SIZE;
    const int lane = THREAD_ID % WARP_SIZE;
    // whole warps leave together, so the shuffles below see every lane
    if (blk >= n_blocks) {
        return;
    }
    const int bytes = with_sum ? (int)sizeof(block_q8_1) : (int)sizeof(block_q8_0);
    quantize_q8_lane(x[blk * 32 + lane], out + blk * bytes, lane, with_sum);
}
