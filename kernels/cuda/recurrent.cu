// The recurrent layers' state updates: causal depthwise convolutions with state (Mamba-2's, and
// LFM2's gated short convolution) and Mamba-2's selective scan. Each sequence's rows run in
// position order, continuing the state its slot holds. The CPU backend's arithmetic in its
// order (products then sums, never fused: the kernels are compiled without FMA contraction), so
// the convolutions give the same bits; the scan's exp and log1p are CUDA's own.
#include "portable.cuh"

// The most taps a short convolution may have (LFM2: 3).
#define SHORT_CONV_MAX_TAPS 8

// One thread per (sequence, channel) carries the channel's window in registers. gated: rows of
// 3·d (b, c, x), the new value b·x and the output c·sum (LFM2); otherwise rows of d, the value
// itself and the sum. kernel: d rows of `taps`; states: slots of `state_floats`, the layer's part
// at `part`; out: rows of d. Run r (grid y) has the rows rows[run_rows[r] .. run_rows[r + 1]), its
// slot run_state[r], and the snapshots snap_row / snap_slot [run_snaps[r] .. run_snaps[r + 1])
// (after which of its rows, into which slot), in row order.
KERNEL void conv_states(const float* in, const float* kernel, float* states, float* out, const int* run_rows, const int* rows, const int* run_state, const int* run_snaps, const int* snap_row, const int* snap_slot, int d, int taps, int64_t state_floats, int64_t part, int gated) {
    const int ch = BLOCK_ID * BLOCK_THREADS + THREAD_ID;
    const int run = BLOCK_ID_Y;
    if (ch >= d) {
        return;
    }
    const int64_t stride = gated ? 3 * (int64_t)d : d;
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
        const float* row = in + r * stride;
        const float u = gated ? row[ch] * row[2 * d + ch] : row[ch];
        float sum = 0.0f;
        for (int k = 0; k < taps - 1; k++) {
            sum += window[k] * tap[k];
        }
        sum += u * tap[taps - 1];
        out[r * d + ch] = gated ? row[d + ch] * sum : sum;
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

// ggml's softplus: ln(1 + e^x), or x itself past 20
DEVICE float softplus(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}

// Mamba-2's selective scan: one block per (head, sequence), one thread per value of the head
// (a row of its state: d_state values, updated in place in the slot). xbc: rows of xbc_cols (the
// heads' values, then n_group groups of B, then of C, d_state each); dt: rows of n_head (bias
// added); a, d: one per head; out: rows of n_head · head_dim. Runs and snapshots as conv_states.
KERNEL void ssm_scan(const float* xbc, const float* dt, const float* a, const float* d, float* states, float* out, const int* run_rows, const int* rows, const int* run_state, const int* run_snaps, const int* snap_row, const int* snap_slot, int n_head, int head_dim, int n_group, int d_state, int xbc_cols, int64_t state_floats, int64_t part) {
    const int h = BLOCK_ID;
    const int run = BLOCK_ID_Y;
    const int k = THREAD_ID;
    if (k >= head_dim) {
        return;
    }
    const int g = h / (n_head / n_group);
    const int64_t d_inner = (int64_t)n_head * head_dim;
    const int64_t at = ((int64_t)h * head_dim + k) * d_state; // this value's state row in a slot's part
    float* state = states + (int64_t)run_state[run] * state_floats + part + at;
    int snap = run_snaps[run];
    const int snap_end = run_snaps[run + 1];
    const int first = run_rows[run];
    for (int i = first; i < run_rows[run + 1]; i++) {
        const int64_t r = rows[i];
        const float* row = xbc + r * xbc_cols;
        const float* b = row + d_inner + (int64_t)g * d_state;
        const float* c = row + d_inner + (int64_t)(n_group + g) * d_state;
        const float x = row[(int64_t)h * head_dim + k];
        const float dt_soft = softplus(dt[r * n_head + h]);
        const float decay = expf(dt_soft * a[h]);
        const float x_dt = x * dt_soft;
        float sum = 0.0f;
        for (int j = 0; j < d_state; j++) {
            const float s = state[j] * decay + b[j] * x_dt;
            state[j] = s;
            sum += s * c[j];
        }
        out[r * d_inner + (int64_t)h * head_dim + k] = sum + x * d[h];
        if (snap < snap_end && snap_row[snap] == i - first) {
            float* copy = states + (int64_t)snap_slot[snap] * state_floats + part + at;
            for (int j = 0; j < d_state; j++) {
                copy[j] = state[j];
            }
            snap++;
        }
    }
}

// Qwen3.5's gated delta rule: one block per (value head, sequence), one thread per row j of the
// head's state (head_dim values, updated in place in the slot). qkv: rows of the query heads, the
// key heads, then the value heads (head_dim each); alpha, beta: rows of n_v_heads; dt_bias, a:
// one per value head; out: rows of n_v_heads · head_dim. Each thread normalises the query and
// key itself, in the CPU's order; runs and snapshots as conv_states.
KERNEL void delta_rule(const float* qkv, const float* alpha, const float* beta, const float* dt_bias, const float* a, float* states, float* out, const int* run_rows, const int* rows, const int* run_state, const int* run_snaps, const int* snap_row, const int* snap_slot, int n_k_heads, int n_v_heads, int s, float eps, int64_t state_floats, int64_t part) {
    const int h = BLOCK_ID;
    const int run = BLOCK_ID_Y;
    const int j = THREAD_ID;
    if (j >= s) {
        return;
    }
    const int kh = h % n_k_heads;
    const int64_t width = (int64_t)(2 * n_k_heads + n_v_heads) * s;
    const int64_t key_at = (int64_t)n_k_heads * s;
    const int64_t at = ((int64_t)h * s + j) * s; // this row of the head's state in a slot's part
    float* m = states + (int64_t)run_state[run] * state_floats + part + at;
    const float n = (float)s;
    const float after = 1.0f / sqrtf(n);
    const float scale = 1.0f / sqrtf(n);
    int snap = run_snaps[run];
    const int snap_end = run_snaps[run + 1];
    const int first = run_rows[run];
    for (int i = first; i < run_rows[run + 1]; i++) {
        const int64_t r = rows[i];
        const float* row = qkv + r * width;
        const float* q = row + (int64_t)kh * s;
        const float* k = row + key_at + (int64_t)kh * s;
        // the L2 norms' scales, as the CPU's l2_normalized
        double qsum = 0.0, ksum = 0.0;
        for (int c = 0; c < s; c++) {
            qsum += (double)(q[c] * q[c]);
            ksum += (double)(k[c] * k[c]);
        }
        const float qscale = 1.0f / sqrtf((float)(qsum / s) + eps / n);
        const float kscale = 1.0f / sqrtf((float)(ksum / s) + eps / n);
        const float decay = expf(softplus(alpha[r * n_v_heads + h] + dt_bias[h]) * a[h]);
        const float b = 1.0f / (1.0f + expf(0.0f - beta[r * n_v_heads + h]));
        float dot = 0.0f;
        for (int c = 0; c < s; c++) {
            m[c] = m[c] * decay;
            dot += m[c] * ((k[c] * kscale) * after);
        }
        const float delta = (row[2 * key_at + (int64_t)h * s + j] - dot) * b;
        float o = 0.0f;
        for (int c = 0; c < s; c++) {
            m[c] = m[c] + ((k[c] * kscale) * after) * delta;
            o += m[c] * ((q[c] * qscale) * after);
        }
        out[r * n_v_heads * s + (int64_t)h * s + j] = o * scale;
        if (snap < snap_end && snap_row[snap] == i - first) {
            float* copy = states + (int64_t)snap_slot[snap] * state_floats + part + at;
            for (int c = 0; c < s; c++) {
                copy[c] = m[c];
            }
            snap++;
        }
    }
}
