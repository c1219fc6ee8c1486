// The recurrent layers' state updates: causal depthwise convolutions with state (Mamba-2's, and
// LFM2's gated short convolution), Mamba-2's selective scan and the gated delta rule in their
// chunked form. Each sequence's rows run in position order, continuing the state its slot holds.
// The convolutions are the CPU backend's arithmetic in its order (products then sums, never
// fused: the kernels are compiled without FMA contraction), so they give the same bits; the
// chunked recurrences sum their dot products in order (the CPU in lanes) and use CUDA's exp and
// log1p, so they agree with the CPU to rounding and with themselves bit for bit.
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

// The chunked form of Mamba-2's scan and the gated delta rule (the CPU backend's `chunked.rs`):
// chunks of RECURRENT_CHUNK positions at fixed places of a sequence. A head's part of a slot
// holds the state at the chunk's start (`rows` rows of `key_width`), the chunk's row count, and
// per row of the chunk its cumulative log-decay, its key (key_width) and its value (rows). A
// row's output is `Γ_t (S_0 row · query) + Σ_i w_i (k_i · query) u_i`, the rows i in order; when a
// chunk is complete, S_0 becomes `Γ_t S_0 + Σ_i w_i u_i k_iᵀ` and the count starts again. Every
// row runs through the same code, so a row's bits do not depend on where its pass began.
#define RECURRENT_CHUNK 32
// The widest key a chunked head may have (the launchers check it).
#define RECURRENT_MAX_KEY 256

DEVICE float dot_in_order(const float* a, const float* b, int n) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        sum += a[i] * b[i];
    }
    return sum;
}

// One head's part of a slot in the chunked form.
struct ChunkHead {
    float* start;
    float* count;
    float* decay;
    float* keys;
    float* values;
};

DEVICE ChunkHead chunk_head(float* head, int rows, int key_width) {
    ChunkHead c;
    c.start = head;
    c.count = head + (int64_t)rows * key_width;
    c.decay = c.count + 1;
    c.keys = c.decay + RECURRENT_CHUNK;
    c.values = c.keys + (int64_t)RECURRENT_CHUNK * key_width;
    return c;
}

DEVICE int64_t chunk_head_len(int rows, int key_width) {
    return (int64_t)rows * key_width + 1 + (int64_t)RECURRENT_CHUNK * (1 + key_width + rows);
}

// The row's place in the chunk (every thread reads it before any writes it).
DEVICE int chunk_place(const ChunkHead& c) {
    const int t = (int)c.count[0];
    return t < RECURRENT_CHUNK - 1 ? t : RECURRENT_CHUNK - 1;
}

// w_te = exp(cum_t - cum_e), the decay from row e to row t of the chunk (1 for e = t).
DEVICE float chunk_weight(const ChunkHead& c, int t, int e) {
    return e == t ? 1.0f : expf(c.decay[t] - c.decay[e]);
}

// The cumulative log-decays of a segment's rows from the chunk's place t0, in row order, kept in
// the head; `logs` (the rows' log-decays) becomes their Γ. One thread.
DEVICE void chunk_cumulate(const ChunkHead& c, int t0, int seg, float* logs) {
    for (int r = 0; r < seg; r++) {
        const int t = t0 + r;
        const float cum = t == 0 ? logs[r] : c.decay[t - 1] + logs[r];
        c.decay[t] = cum;
        logs[r] = expf(cum);
    }
}

// Γ · (S_0 row r · query) + Σ_{i < n} coefs[i] · u_i[r]
DEVICE float chunk_read(const ChunkHead& c, int rows, int key_width, int r, float gamma, const float* query, const float* coefs, int n) {
    float acc = gamma * dot_in_order(c.start + (int64_t)r * key_width, query, key_width);
    for (int i = 0; i < n; i++) {
        acc += coefs[i] * c.values[(int64_t)i * rows + r];
    }
    return acc;
}

// Thread r's row of S_0 moved past a complete chunk ending at row t.
DEVICE void chunk_fold(const ChunkHead& c, int rows, int key_width, int r, int t, float gamma, const float* weights) {
    float* row = c.start + (int64_t)r * key_width;
    for (int n = 0; n < key_width; n++) {
        row[n] = row[n] * gamma;
    }
    for (int i = 0; i <= t; i++) {
        const float w = weights[i] * c.values[(int64_t)i * rows + r];
        const float* key = c.keys + (int64_t)i * key_width;
        for (int n = 0; n < key_width; n++) {
            row[n] = row[n] + w * key[n];
        }
    }
}

// Ends row t: the count moved on, then the head copied into a snapshot slot when the row has one.
// Ends with the block in step, so the next row may write the head.
DEVICE void chunk_end_row(const ChunkHead& c, float* head, int64_t head_len, int t, float* snapshot) {
    SYNC_THREADS();
    if (THREAD_ID == 0) {
        c.count[0] = t + 1 < RECURRENT_CHUNK ? (float)(t + 1) : 0.0f;
    }
    SYNC_THREADS();
    if (snapshot) {
        for (int64_t e = THREAD_ID; e < head_len; e += BLOCK_THREADS) {
            snapshot[e] = head[e];
        }
        SYNC_THREADS();
    }
}

// Ends a segment of `seg` rows from the chunk's place t0 (the run's rows `done` .. `done + seg`):
// the snapshots after its rows (the head as it is but for the count; one after the chunk's last
// row waits for the fold), the fold when the chunk is complete (gamma_last: the last row's Γ;
// weights: a scratch of RECURRENT_CHUNK values), then the count. `slot_at`: the head's offset in a
// slot. Ends with the block in step.
DEVICE void chunk_segment_end(const ChunkHead& c, float* head, int64_t head_len, int rows, int key_width, int t0, int seg, int done, int& snap, int snap_end, const int* snap_row, const int* snap_slot, float* states, int64_t state_floats, int64_t slot_at, float gamma_last, float* weights) {
    const bool completes = t0 + seg == RECURRENT_CHUNK;
    const int last = done + seg - 1;
    while (snap < snap_end && snap_row[snap] <= last && !(completes && snap_row[snap] == last)) {
        float* copy = states + (int64_t)snap_slot[snap] * state_floats + slot_at;
        const float count = (float)(t0 + snap_row[snap] - done + 1);
        for (int64_t e = THREAD_ID; e < head_len; e += BLOCK_THREADS) {
            copy[e] = e == (int64_t)rows * key_width ? count : head[e];
        }
        snap++;
    }
    if (completes) {
        const int t = RECURRENT_CHUNK - 1;
        SYNC_THREADS();
        for (int e = THREAD_ID; e <= t; e += BLOCK_THREADS) {
            weights[e] = chunk_weight(c, t, e);
        }
        SYNC_THREADS();
        if ((int)THREAD_ID < rows) {
            chunk_fold(c, rows, key_width, THREAD_ID, t, gamma_last, weights);
        }
    }
    float* snapshot = 0;
    if (snap < snap_end && snap_row[snap] == last) {
        snapshot = states + (int64_t)snap_slot[snap] * state_floats + slot_at;
        snap++;
    }
    chunk_end_row(c, head, head_len, t0 + seg - 1, snapshot);
}

// Mamba-2's selective scan: one block per (head, sequence), one thread per value of the head.
// xbc: rows of xbc_cols (the heads' values, then n_group groups of B, then of C, d_state each);
// dt: rows of n_head (bias added); a, d: one per head; out: rows of n_head · head_dim. The keys
// are B, the values x · Δ, the query C. Runs and snapshots as conv_states. A sequence's rows go
// a chunk's segment at a time, as delta_rule's: each row's step and decay, keys, values and
// coefficients for all of the segment's rows together, then each thread its value's outputs.
KERNEL void ssm_scan(const float* xbc, const float* dt, const float* a, const float* d, float* states, float* out, const int* run_rows, const int* rows, const int* run_state, const int* run_snaps, const int* snap_row, const int* snap_slot, int n_head, int head_dim, int n_group, int d_state, int xbc_cols, int64_t state_floats, int64_t part) {
    SHARED(float, coefs, [RECURRENT_CHUNK][RECURRENT_CHUNK]);  // [row of the segment][row i of the chunk]
    SHARED(float, steps, [RECURRENT_CHUNK]);  // each row's Δ
    SHARED(float, gammas, [RECURRENT_CHUNK]);
    const int h = BLOCK_ID;
    const int run = BLOCK_ID_Y;
    const int k = THREAD_ID;
    const int g = h / (n_head / n_group);
    const int64_t d_inner = (int64_t)n_head * head_dim;
    const int64_t b_at = d_inner + (int64_t)g * d_state;
    const int64_t c_at = d_inner + (int64_t)(n_group + g) * d_state;
    const int64_t head_len = chunk_head_len(head_dim, d_state);
    float* head = states + (int64_t)run_state[run] * state_floats + part + h * head_len;
    const ChunkHead c = chunk_head(head, head_dim, d_state);
    int snap = run_snaps[run];
    const int snap_end = run_snaps[run + 1];
    const int first = run_rows[run];
    const int end = run_rows[run + 1];
    for (int i = first; i < end;) {
        const int t0 = chunk_place(c);
        const int seg = end - i < RECURRENT_CHUNK - t0 ? end - i : RECURRENT_CHUNK - t0;
        for (int r = k; r < seg; r += BLOCK_THREADS) {
            steps[r] = softplus(dt[(int64_t)rows[i + r] * n_head + h]);
            gammas[r] = steps[r] * a[h];  // the log-decay, summed below
        }
        SYNC_THREADS();
        if (k == 0) {
            chunk_cumulate(c, t0, seg, gammas);
        }
        for (int r = 0; r < seg; r++) {
            const float* row = xbc + (int64_t)rows[i + r] * xbc_cols;
            for (int e = k; e < d_state; e += BLOCK_THREADS) {
                c.keys[(int64_t)(t0 + r) * d_state + e] = row[b_at + e];
            }
            c.values[(int64_t)(t0 + r) * head_dim + k] = row[(int64_t)h * head_dim + k] * steps[r];
        }
        SYNC_THREADS();
        // the coefficients of every (segment row r, chunk row e ≤ its place)
        const int pairs = seg * (t0 + seg);
        for (int p = k; p < pairs; p += BLOCK_THREADS) {
            const int r = p / (t0 + seg);
            const int e = p % (t0 + seg);
            const int t = t0 + r;
            if (e <= t) {
                coefs[r][e] = chunk_weight(c, t, e) * dot_in_order(c.keys + (int64_t)e * d_state, xbc + (int64_t)rows[i + r] * xbc_cols + c_at, d_state);
            }
        }
        SYNC_THREADS();
        for (int r = 0; r < seg; r++) {
            const int64_t rr = rows[i + r];
            const float* row = xbc + rr * xbc_cols;
            const float y = chunk_read(c, head_dim, d_state, k, gammas[r], row + c_at, coefs[r], t0 + r + 1);
            out[rr * d_inner + (int64_t)h * head_dim + k] = y + row[(int64_t)h * head_dim + k] * d[h];
        }
        SYNC_THREADS();
        // the last row's coefficients are spent: their row is the fold's scratch
        chunk_segment_end(c, head, head_len, head_dim, d_state, t0, seg, i - first, snap, snap_end, snap_row, snap_slot, states, state_floats, part + h * head_len, gammas[seg - 1], coefs[seg - 1]);
        i += seg;
    }
}

// Qwen3.5's gated delta rule: one block per (value head, sequence), one thread per row j of the
// head's state. qkv: rows of the query heads, the key heads, then the value heads (head_dim each);
// alpha, beta: rows of n_v_heads; dt_bias, a: one per value head; out: rows of n_v_heads ·
// head_dim. The keys are the normalised keys (the CPU's l2_normalized), the values the
// corrections u = β (v - S' k), the query the normalised query. Runs and snapshots as
// conv_states.
//
// A sequence's rows go a chunk's segment at a time: what no row of the segment needs of another
// first, for all of its rows together (each row's norms, decay and β; its normalised key and
// query; every coefficient w_ti (k_i · k_t) and w_ti (k_i · q_t)), then each thread its own
// column of the corrections and outputs row after row without a barrier (u_t[j] needs only the
// earlier u_i[j]), then the fold when the chunk is complete. Every quantity is computed by the
// same expression whatever the segment, so a row's bits do not depend on where its pass began.
KERNEL void delta_rule(const float* qkv, const float* alpha, const float* beta, const float* dt_bias, const float* a, float* states, float* out, const int* run_rows, const int* rows, const int* run_state, const int* run_snaps, const int* snap_row, const int* snap_slot, int n_k_heads, int n_v_heads, int s, float eps, int64_t state_floats, int64_t part) {
    SHARED(float, qn, [RECURRENT_CHUNK][RECURRENT_MAX_KEY]);  // the segment's normalised queries
    SHARED(float, coef_k, [RECURRENT_CHUNK][RECURRENT_CHUNK]);  // [row of the segment][row i of the chunk]
    SHARED(float, coef_q, [RECURRENT_CHUNK][RECURRENT_CHUNK]);
    SHARED(float, scales, [RECURRENT_CHUNK][2]);  // each row's query and key norm scales
    SHARED(float, betas, [RECURRENT_CHUNK]);
    SHARED(float, gammas, [RECURRENT_CHUNK]);
    const int h = BLOCK_ID;
    const int run = BLOCK_ID_Y;
    const int j = THREAD_ID;
    const int kh = h % n_k_heads;
    const int64_t width = (int64_t)(2 * n_k_heads + n_v_heads) * s;
    const int64_t key_at = (int64_t)n_k_heads * s;
    const int64_t head_len = chunk_head_len(s, s);
    float* head = states + (int64_t)run_state[run] * state_floats + part + h * head_len;
    const ChunkHead c = chunk_head(head, s, s);
    const float n = (float)s;
    const float after = 1.0f / sqrtf(n);
    const float scale = 1.0f / sqrtf(n);
    int snap = run_snaps[run];
    const int snap_end = run_snaps[run + 1];
    const int first = run_rows[run];
    const int end = run_rows[run + 1];
    for (int i = first; i < end;) {
        const int t0 = chunk_place(c);
        const int seg = end - i < RECURRENT_CHUNK - t0 ? end - i : RECURRENT_CHUNK - t0;
        // each row's norms (the CPU's l2_normalized: squares summed in f64), β and log-decay
        for (int r = j; r < seg; r += BLOCK_THREADS) {
            const float* row = qkv + (int64_t)rows[i + r] * width;
            double qsum = 0.0, ksum = 0.0;
            for (int e = 0; e < s; e++) {
                const float q = row[(int64_t)kh * s + e];
                const float k = row[key_at + (int64_t)kh * s + e];
                qsum += (double)(q * q);
                ksum += (double)(k * k);
            }
            scales[r][0] = 1.0f / sqrtf((float)(qsum / s) + eps / n);
            scales[r][1] = 1.0f / sqrtf((float)(ksum / s) + eps / n);
            const int64_t g = (int64_t)rows[i + r] * n_v_heads + h;
            betas[r] = 1.0f / (1.0f + expf(0.0f - beta[g]));
            gammas[r] = softplus(alpha[g] + dt_bias[h]) * a[h];  // the log-decay, summed below
        }
        SYNC_THREADS();
        if (j == 0) {
            chunk_cumulate(c, t0, seg, gammas);
        }
        for (int r = 0; r < seg; r++) {
            const float* row = qkv + (int64_t)rows[i + r] * width;
            qn[r][j] = (row[(int64_t)kh * s + j] * scales[r][0]) * after;
            c.keys[(int64_t)(t0 + r) * s + j] = (row[key_at + (int64_t)kh * s + j] * scales[r][1]) * after;
        }
        SYNC_THREADS();
        // the coefficients of every (segment row r, chunk row e ≤ its place)
        const int pairs = seg * (t0 + seg);
        for (int p = j; p < pairs; p += BLOCK_THREADS) {
            const int r = p / (t0 + seg);
            const int e = p % (t0 + seg);
            const int t = t0 + r;
            if (e > t) {
                continue;
            }
            const float w = chunk_weight(c, t, e);
            const float* key = c.keys + (int64_t)e * s;
            if (e < t) {
                coef_k[r][e] = w * dot_in_order(key, c.keys + (int64_t)t * s, s);
            }
            coef_q[r][e] = w * dot_in_order(key, qn[r], s);
        }
        SYNC_THREADS();
        // thread j's column: the corrections and outputs row after row
        for (int r = 0; r < seg; r++) {
            const int t = t0 + r;
            const int64_t rr = rows[i + r];
            const float v = qkv[rr * width + 2 * key_at + (int64_t)h * s + j];
            const float u = (v - chunk_read(c, s, s, j, gammas[r], c.keys + (int64_t)t * s, coef_k[r], t)) * betas[r];
            c.values[(int64_t)t * s + j] = u;
            out[rr * n_v_heads * s + (int64_t)h * s + j] = chunk_read(c, s, s, j, gammas[r], qn[r], coef_q[r], t + 1) * scale;
        }
        SYNC_THREADS();
        // the last row's coefficients are spent: their row is the fold's scratch
        chunk_segment_end(c, head, head_len, s, s, t0, seg, i - first, snap, snap_end, snap_row, snap_slot, states, state_floats, part + h * head_len, gammas[seg - 1], coef_q[seg - 1]);
        i += seg;
    }
}
