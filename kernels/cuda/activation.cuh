// The feed-forward activations as the CPU backend computes them, one value at a time: SiLU as
// ggml's SwiGLU computes it (its polynomial exp on every full chunk of 16 of a row, the C
// library's on the rest), GELU through the f16 rounding of ggml's table, GELU with the exact erf
// (BERT), gpt-oss's clamped unit; activation.cu's kernels and the fused products of matvec.cu.
#pragma once
#include "portable.cuh"

#define ACT_SILU 0
#define ACT_GELU 1
#define ACT_GELU_ERF 2
#define ACT_SWIGLU_OAI 3
#define ACT_SIGMOID 4

// exp(x) as ggml's vectorised ggml_v_expf: round-to-nearest range reduction, a degree-5
// polynomial, the scaling by 2^n in one rounding
DEVICE float ggml_expf(float x) {
    const float shift = 12582912.0f;  // 0x1.8p23
    const float z = fmaf(x, __int_as_float(0x3fb8aa3b), shift);
    const float n = z - shift;
    const float b = fmaf(-n, __int_as_float(0x35bfbe8e), fmaf(-n, __int_as_float(0x3f317200), x));
    const float u = b * b;
    float j = fmaf(fmaf(__int_as_float(0x3c072010), b, __int_as_float(0x3d2b9f17)), u,
                   fmaf(__int_as_float(0x3e2aaf33), b, __int_as_float(0x3efffedb)));
    j = fmaf(j, u, fmaf(__int_as_float(0x3f7ffff6), b, 1.0f));
    if (fabsf(n) > 192.0f) {
        return n <= 0.0f ? 0.0f : __int_as_float(0x7f800000);
    }
    const int k = (int)fminf(fmaxf(n, -1022.0f), 1023.0f);
    const double two_n = __longlong_as_double((long long)(k + 1023) << 52);
    return (float)((double)j * two_n);
}

DEVICE float silu_libm(float x) {
    return x / (1.0f + expf(-x));
}

DEVICE float gelu_tanh(float x) {
    const float sqrt_2_over_pi = 0.7978845608f;
    const float coef_a = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + coef_a * x * x)));
}

// ggml's table: the input rounded to f16, GELU of that, rounded to f16
DEVICE float gelu_table(float x) {
    if (x <= -10.0f) {
        return 0.0f;
    }
    if (x >= 10.0f) {
        return x;
    }
    const float xh = half_to_float(float_to_half(x));
    return half_to_float(float_to_half(gelu_tanh(xh)));
}

// Maclaurin coefficients of erf(t) / t as a series in t²: (-1)^n / (n! (2n + 1)), the
// factorials built upward as the CPU backend builds them; evaluated by the compiler
struct ErfSeries {
    double c[44];
    HOST_DEVICE constexpr ErfSeries() : c() {
        double fact = 1.0;
        for (int n = 0; n < 44; n++) {
            if (n > 0) {
                fact *= (double)n;
            }
            c[n] = (n % 2 == 0 ? 1.0 : -1.0) / (fact * (double)(2 * n + 1));
        }
    }
};

__constant__ ErfSeries ERF_SERIES = ErfSeries();

// erf in f64: the series below 2.5 by Horner's rule (as many terms as t needs), the continued
// fraction of erfc up to 4, then ±1; rounded to f32
DEVICE float erf_f64(float xf) {
    const double x = (double)xf;
    const double t = fabs(x);
    double r;
    if (t < 2.5) {
        const double u = t * t;
        int n = 12 + (int)ceil(4.5 * u);
        n = n < 44 ? n : 44;
        double p = 0.0;
        for (int k = n - 1; k >= 0; k--) {
            p = p * u + ERF_SERIES.c[k];
        }
        r = t * p * 2.0 / sqrt(3.14159265358979323846);
    } else if (t < 4.0) {
        double f = 0.0;
        for (int k = 59; k >= 1; k--) {
            f = ((double)k / 2.0) / (t + f);
        }
        r = 1.0 - exp(-t * t) / sqrt(3.14159265358979323846) / (t + f);
    } else {
        r = 1.0;
    }
    return (float)(x < 0.0 ? -r : r);
}

DEVICE float gelu_erf(float x) {
    return 0.5f * x * (1.0f + erf_f64(x * 0.70710678118654752f));
}

DEVICE float activate_one(int act, float x, bool poly_exp) {
    if (act == ACT_SILU) {
        return poly_exp ? x / (1.0f + ggml_expf(0.0f - x)) : silu_libm(x);
    }
    if (act == ACT_GELU) {
        return gelu_table(x);
    }
    if (act == ACT_SIGMOID) {
        return 1.0f / (1.0f + expf(0.0f - x));
    }
    return gelu_erf(x);
}

// act(gate) * up for value i of a row of n (SiLU's exp depends on where i falls)
DEVICE float glu_value(int act, float gate, float up, int i, int n) {
    if (act == ACT_SWIGLU_OAI) {
        // gpt-oss's unit, as ggml's swiglu_oai with alpha 1.702 and limit 7
        const float x = fminf(gate, 7.0f);
        const float y = fminf(fmaxf(up, -7.0f), 7.0f);
        return x / (1.0f + expf(1.702f * (0.0f - x))) * (y + 1.0f);
    }
    const bool full_chunk = i < n / 16 * 16;
    return activate_one(act, gate, full_chunk) * up;
}
