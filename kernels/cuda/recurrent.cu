// The recurrent layers' state updates: LFM2's gated short convolution. Each sequence's rows run
// in position order, continuing the state its slot holds; one thread per (sequence, channel)
// carries that channel's window in registers. The CPU backend's arithmetic in its order (the
// oldest tap first, a product then a sum, never fused: the kernels are compiled without FMA
// contraction), so the same bits.
#include "portable.cuh"

// The most taps a short convolution may have (LFM2: 3).
#define SHORT_CONV_MAX_TAPS 8

// bcx: rows of 3·d (b, c, x); kernel: d rows of `taps`; states: slots of `state_floats`, the
// layer's part at `part`; out: rows of d. Run r (grid y) has the rows rows[run_rows[r] ..
// run_rows[r + 1]), its slot run_state[r], and the snapshots snap_row / snap_slot
// [run_snaps[r] .. run_snaps[r + 1]) (after which of its rows, into which slot), in row order.
KERNEL void short_conv(const float* bcx, const float* kernel, float* states, float* out, const int* run_rows, const int* rows, const int* run_state, const int* run_snaps, const int* snap_row, const int* snap_slot, int d, int taps, int64_t state_floats, int64_t part) {
    const int ch = BLOCK_ID * BLOCK_THREADS + THREAD_ID;
    const int run = BLOCK_ID_Y;
    if (ch >= d) {
        return;
    }
    float window[SHORT_CONV_MAX_TAPS - 1];
    float* state = states + (int64_t)run_state[run] * state_floats + part;
    for (int k = 0; k < taps - 1; k++) {
        window[k] = state[(int64_t)k * d + ch];
    }
    const float* tap = kernel + (int64_t)ch * taps;
    int snap = run_snaps[run];
    const int snap_end = run_snaps[run + 1];
    const int first = run_rows[run];
    for (int i = first; i < run_rows[run + 1]; i++) {
        const int64_t r = rows[i];
        const float* row = bcx + r * 3 * d;
        const float u = row[ch] * row[2 * d + ch];
        float sum = 0.0f;
        for (int k = 0; k < taps - 1; k++) {
            sum += window[k] * tap[k];
        }
        sum += u * tap[taps - 1];
        out[r * d + ch] = row[d + ch] * sum;
        for (int k = 0; k + 1 < taps - 1; k++) {
            window[k] = window[k + 1];
        }
        window[taps - 2] = u;
        if (snap < snap_end && snap_row[snap] == i - first) {
            float* s = states + (int64_t)snap_slot[snap] * state_floats + part;
            for (int k = 0; k < taps - 1; k++) {
                s[(int64_t)k * d + ch] = window[k];
            }
            snap++;
        }
    }
    for (int k = 0; k < taps - 1; k++) {
        state[(int64_t)k * d + ch] = window[k];
    }
}
