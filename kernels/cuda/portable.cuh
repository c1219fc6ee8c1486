// The one portability header every kernel includes. Under NVRTC it maps the names below to
// CUDA's built-ins; nothing else is included, so no CUDA header has to be found at run time.
// Under a host C++ compiler (the CPU execution harness) `host.hpp` maps them to host threads.
#pragma once

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)

typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;

#define KERNEL extern "C" __global__
#define DEVICE __device__ __forceinline__
#define HOST_DEVICE __host__ __device__
#define SHARED(type, name, dims) __shared__ type name dims  // SHARED(float, tile, [32][33]);
#define DEVICE_TABLE static const __device__  // a constant table in global memory
#define THREAD_ID threadIdx.x
#define BLOCK_ID blockIdx.x
#define BLOCK_ID_Y blockIdx.y
#define BLOCK_ID_Z blockIdx.z
#define BLOCK_THREADS blockDim.x
#define SYNC_THREADS() __syncthreads()
#define SHFL_XOR(v, mask) __shfl_xor_sync(0xffffffffu, (v), (mask), 32)
#define SHFL(v, lane) __shfl_sync(0xffffffffu, (v), (lane), 32)
#define UNROLL _Pragma("unroll")  // the next loop unrolled whole (its bound a constant)

// f16 bits to f32 and back (round to nearest even), through PTX: no cuda_fp16.h.
DEVICE float half_to_float(uint16_t h) {
    float f;
    asm("{ .reg .b16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
    return f;
}

DEVICE uint16_t float_to_half(float f) {
    uint16_t h;
    asm("{ .reg .b16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(f));
    return h;
}

// c + the sum of the four products of a's and b's signed bytes (sm_61 and up)
DEVICE int dp4a(int a, int b, int c) {
    int r;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}

// c += a · b for a warp's 16 x 32 signed-byte tile a (row-major) and 32 x 8 tile b (column-major),
// in 32-bit integers: the tensor cores' mma.sync m16n8k32 (sm_80 and up). Each lane holds the
// fragments of PTX's layout: with g = lane / 4 and t = lane % 4, a[0] = A[g][4t..4t+4),
// a[1] = A[g+8][4t..), a[2] = A[g][16+4t..), a[3] = A[g+8][16+4t..); b[0] = B[4t..4t+4)[g],
// b[1] = B[16+4t..)[g]; c[0] = C[g][2t], c[1] = C[g][2t+1], c[2] = C[g+8][2t], c[3] = C[g+8][2t+1].
// Every lane of the warp takes part.
DEVICE void mma_s8_16x8x32(int* c, const int* a, const int* b) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// 4 little-endian bytes at p, for p 4-byte or 2-byte aligned; 16 bytes at p, 16-byte aligned,
// as 4 words. Device allocations start 256-byte aligned, so a block's alignment in a row is
// its size's (see the callers).
DEVICE uint32_t load_u32_a4(const uint8_t* p) {
    return *(const uint32_t*)p;
}

DEVICE uint32_t load_u32_a2(const uint8_t* p) {
    const uint16_t* h = (const uint16_t*)p;
    return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
}

DEVICE void load_u32x4_a16(const uint8_t* p, uint32_t* w) {
    const uint4 v = *(const uint4*)p;
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
}

#else

#include "host.hpp"

#endif

#define WARP_SIZE 32

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
// c += a · b for a warp's 16 x 16 signed-byte tile a (row-major) and 16 x 8 tile b (column-major):
// mma.sync m16n8k16 (sm_80 and up), the layout of mma_s8_16x8x32 with one word of A per row
// and one of B per column: a[0] = A[g][4t..4t+4), a[1] = A[g+8][4t..4t+4); b[0] =
// B[4t..4t+4)[g]; c as there. Before sm_80 (no such shape) the lanes gather
// the same rows and columns by shuffles and add their products by dp4a: the same (exact)
// integer result (the harness has its own, host.hpp). Every lane of the warp takes part.
DEVICE void mma_s8_16x8x16(int* c, const int* a, const int* b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b[0]));
#else
    const int lane = (int)(THREAD_ID % WARP_SIZE);
    const int g = lane / 4;
    const int t = lane % 4;
    for (int q = 0; q < 4; q++) {
        // lane 4g + q holds A[g][4q..4q+4) and A[g+8][4q..), lane 4n + q B[4q..4q+4)[n]
        const int row = SHFL(a[0], 4 * g + q);
        const int row8 = SHFL(a[1], 4 * g + q);
        const int col0 = SHFL(b[0], 4 * (2 * t) + q);
        const int col1 = SHFL(b[0], 4 * (2 * t + 1) + q);
        c[0] = dp4a(row, col0, c[0]);
        c[1] = dp4a(row, col1, c[1]);
        c[2] = dp4a(row8, col0, c[2]);
        c[3] = dp4a(row8, col1, c[3]);
    }
#endif
}
#endif

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
// out[n] = lane `src`'s v[n] for n < N, as N shuffles (the harness, host.hpp: one exchange)
template <int N>
DEVICE void shfl_floats(float* out, const float* v, int src) {
UNROLL
    for (int n = 0; n < N; n++) {
        out[n] = SHFL(v[n], src);
    }
}

// v combined with the other lanes' values by xor shuffles of masks 16, 8, 4, 2, 1: at each step
// a lane's value becomes op(own, lane ^ mask's). The harness (host.hpp) has its own, with the
// same operations in the same order.
template <class T, class Op>
DEVICE T warp_butterfly(T v, Op op) {
    for (int mask = 16; mask > 0; mask >>= 1) {
        v = op(v, SHFL_XOR(v, mask));
    }
    return v;
}
#else
using host::shfl_floats;
using host::warp_butterfly;
#endif

// Sum over the 32 lanes of a warp in a fixed butterfly order: every lane gets the same total,
// and the order depends only on the lane count, never on the data or the launch.
DEVICE double warp_sum(double v) {
    return warp_butterfly(v, [](double a, double b) { return a + b; });
}

DEVICE float warp_sum_f(float v) {
    return warp_butterfly(v, [](float a, float b) { return a + b; });
}

DEVICE float warp_max_f(float v) {
    return warp_butterfly(v, [](float a, float b) { return fmaxf(a, b); });
}

// Sum over the threads of a block (a multiple of 32, at most 1024): each warp's butterfly, then
// the warps' totals in warp order by the first warp. `scratch` holds 32 values. Every thread
// gets the total.
DEVICE double block_sum(double v, double* scratch) {
    const int lane = THREAD_ID % WARP_SIZE;
    const int warp = THREAD_ID / WARP_SIZE;
    v = warp_sum(v);
    if (lane == 0) {
        scratch[warp] = v;
    }
    SYNC_THREADS();
    const int warps = BLOCK_THREADS / WARP_SIZE;
    double total = lane < warps ? scratch[lane] : 0.0;
    total = warp_sum(total);
    SYNC_THREADS();  // scratch may be reused by the caller
    return total;
}
