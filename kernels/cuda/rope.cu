// Rotary position embeddings in ggml's two layouts: NORM rotates (x[2i], x[2i+1]), NEOX
// (x[i], x[i + n_dims/2]). One block per row, one thread per (head, pair). The angle of pair i
// is pos · base^(-2i/n_dims) / factors[i] · scale, built by repeated f32 products as ggml (and
// the CPU backend) build it, so a thread walks the products up to its pair; with YaRN
// (use_yarn) the interpolated and extrapolated angles are blended by the pair's ramp and the
// magnitude corrected; cos and sin are scaled by attn_factor.
#include "portable.cuh"

// x: rows of n_head heads of head_dim values; positions: one per row; factors: n_dims/2 angle
// divisors, read only when has_factors; neox, has_factors, use_yarn: 0 or 1. A grid of two
// along y rotates x2's rows (n_head2 heads each) as well, with the same positions (a layer's
// queries and keys in one launch).
KERNEL void rope(float* x, float* x2, const int32_t* positions, const float* factors, int n_head, int n_head2, int head_dim, int n_dims, float freq_base, float freq_scale, float ext_factor, float corr_low, float corr_high, float attn_factor, int neox, int has_factors, int use_yarn) {
    if (BLOCK_ID_Y == 1) {
        x = x2;
        n_head = n_head2;
    }
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
        const float extrapolated = has_factors ? theta / factors[i] : theta;
        const float interpolated = freq_scale * extrapolated;
        float angle = interpolated;
        float mscale = attn_factor;
        if (use_yarn) {
            const float y = ((float)i - corr_low) / fmaxf(0.001f, corr_high - corr_low);
            const float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * ext_factor;
            angle = interpolated * (1.0f - mix) + extrapolated * mix;
            mscale = attn_factor * (1.0f + 0.1f * logf(1.0f / freq_scale));
        }
        const float c = cosf(angle) * mscale;
        const float s = sinf(angle) * mscale;
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
