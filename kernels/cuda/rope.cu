// Rotary position embeddings in ggml's two layouts: NORM rotates (x[2i], x[2i+1]), NEOX
// (x[i], x[i + n_dims/2]). One block per row, one thread per (head, pair). The angle of pair i
// is pos · base^(-2i/n_dims) · scale, built by repeated f32 products as ggml (and the CPU
// backend) build it, so a thread walks the products up to its pair.
#include "portable.cuh"

// x: rows of n_head heads of head_dim values; positions: one per row; neox: 0 or 1
KERNEL void rope(float* x, const int32_t* positions, int n_head, int head_dim, int n_dims, float freq_base, float freq_scale, int neox) {
    const int half = n_dims / 2;
    float* row = x + (int64_t)BLOCK_ID * n_head * head_dim;
    const float theta_scale = powf(freq_base, -2.0f / (float)n_dims);
    for (int t = THREAD_ID; t < n_head * half; t += BLOCK_THREADS) {
        const int h = t / half;
        const int i = t % half;
        float theta = (float)positions[BLOCK_ID];
        for (int k = 0; k < i; k++) {
            theta *= theta_scale;
        }
        const float angle = freq_scale * theta;
        const float c = cosf(angle);
        const float s = sinf(angle);
        float* head = row + h * head_dim;
        const int a = neox ? i : 2 * i;
        const int b = neox ? i + half : 2 * i + 1;
        const float x0 = head[a];
        const float x1 = head[b];
        // the cosine product fused, the sine product rounded: as ggml's compiled code
        head[a] = fmaf(x0, c, -(x1 * s));
        head[b] = fmaf(x1, c, x0 * s);
    }
}
