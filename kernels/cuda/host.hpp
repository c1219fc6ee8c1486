// The CPU execution harness's side of the portability header: the same kernel sources compiled
// as host C++ (the `host` feature of the kernels crate). A launch runs the grid's blocks one
// after another and each block's threads as host threads: `__syncthreads` is a barrier of the
// block, a warp shuffle goes through one slot per thread and one barrier of the warp (two slots
// per thread, taken in turn), `__shared__` memory is a thread-local static of the kernel (one
// block runs at a time on a launch's OS thread; a plain static under ThreadSanitizer, where one
// launch runs at a time), and a thread that returns leaves the barriers, as on a GPU. The
// threads are fibers (user-level threads switched at the barriers, on the launch's OS thread),
// or OS threads when built for ThreadSanitizer (KERNELS_HOST_OS_THREADS): the same kernels,
// barriers and slots.
#pragma once

#include <math.h>  // the C names (cosf, expf, ...) as device code spells them
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

namespace host {

struct Dim3 {
    unsigned x = 1, y = 1, z = 1;
};

// What one block's threads share.
struct Block {
    Dim3 dim;
    // two shuffle values per thread: shuffle k of a warp writes set k % 2 (`dim.x` slots each),
    // so one barrier between the writes and the reads suffices. A thread cannot write set k % 2
    // again (shuffle k + 2) before every lane of its warp has met the barrier of shuffle k + 1,
    // which each reaches only after its read of shuffle k.
    std::vector<uint64_t> slots;
    std::vector<uint8_t> parity;  // the set each thread's next shuffle writes
};

extern thread_local Dim3 thread_idx;
extern thread_local Dim3 block_idx;
extern thread_local Block* block;

// the barrier of the calling thread's block, and of its warp (host.cpp)
void sync_threads();
void sync_warp();

// the value of lane `src` of the calling thread's warp, as __shfl_sync: through one slot per
// thread and one barrier of the warp
template <class T>
T shfl(T v, int src) {
    static_assert(sizeof(T) <= sizeof(uint64_t), "a shuffled value fits a slot");
    const unsigned t = thread_idx.x;
    uint64_t* slots = block->slots.data() + (size_t)block->parity[t] * block->dim.x;
    block->parity[t] ^= 1;
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    slots[t] = bits;
    sync_warp();
    const unsigned from = (t & ~31u) | ((unsigned)src % 32);
    T out = v;
    if (from < block->dim.x) {
        std::memcpy(&out, &slots[from], sizeof(T));
    }
    return out;
}

// the value of lane (own lane ^ mask), as __shfl_xor_sync
template <class T>
T shfl_xor(T v, int mask) {
    return shfl(v, (int)((thread_idx.x % 32) ^ (unsigned)mask));
}

inline float bits_to_float(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

inline uint32_t float_to_bits(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}

}  // namespace host

#define KERNEL static
#define DEVICE static inline
#define HOST_DEVICE
#ifdef KERNELS_HOST_OS_THREADS
#define SHARED static
#else
#define SHARED static thread_local
#endif
#define __constant__ static
#define DEVICE_TABLE static const
#define UNROLL  // the host compiler unrolls as it sees fit
#define THREAD_ID host::thread_idx.x
#define BLOCK_ID host::block_idx.x
#define BLOCK_ID_Y host::block_idx.y
#define BLOCK_ID_Z host::block_idx.z
#define BLOCK_THREADS host::block->dim.x
#define SYNC_THREADS() host::sync_threads()
#define SHFL_XOR(v, mask) host::shfl_xor((v), (mask))
#define SHFL(v, lane) host::shfl((v), (lane))

DEVICE float __int_as_float(int i) {
    return host::bits_to_float((uint32_t)i);
}

DEVICE double __longlong_as_double(long long i) {
    double d;
    std::memcpy(&d, &i, 8);
    return d;
}

DEVICE int dp4a(int a, int b, int c);

// mma.sync m16n8k32 with signed bytes (portable.cuh has the fragments' layout): each lane
// gathers the A rows and B columns of its four outputs from the warp by shuffles, in the
// documented layout, and adds their integer dot products (exact, so the order is free).
DEVICE void mma_s8_16x8x32(int* c, const int* a, const int* b) {
    const int lane = (int)(host::thread_idx.x % 32);
    const int g = lane / 4;
    const int t = lane % 4;
    for (int q = 0; q < 4; q++) {
        // lane 4g + q holds A[g][4q..4q+4) in a[0], A[g][16+4q..) in a[2]; A[g+8] in a[1], a[3]
        int rows[4];
        for (int r = 0; r < 4; r++) {
            rows[r] = host::shfl(a[r], 4 * g + q);
        }
        // lane 4n + q holds B[4q..4q+4)[n] in b[0], B[16+4q..)[n] in b[1]
        int cols[2][2];
        for (int j = 0; j < 2; j++) {
            for (int h = 0; h < 2; h++) {
                cols[j][h] = host::shfl(b[h], 4 * (2 * t + j) + q);
            }
        }
        for (int j = 0; j < 2; j++) {
            c[j] = dp4a(rows[2], cols[j][1], dp4a(rows[0], cols[j][0], c[j]));
            c[2 + j] = dp4a(rows[3], cols[j][1], dp4a(rows[1], cols[j][0], c[2 + j]));
        }
    }
}

// the device's aligned loads (portable.cuh); alignment does not matter on the host
DEVICE uint32_t load_u32_a4(const uint8_t* p) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    return w;
}

DEVICE uint32_t load_u32_a2(const uint8_t* p) {
    return load_u32_a4(p);
}

DEVICE void load_u32x4_a16(const uint8_t* p, uint32_t* w) {
    std::memcpy(w, p, 16);
}

// c + the sum of the four products of a's and b's signed bytes, as dp4a.s32.s32
DEVICE int dp4a(int a, int b, int c) {
    for (int k = 0; k < 4; k++) {
        c += (int)(int8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
    }
    return c;
}

// f16 bits to f32, exactly
DEVICE float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t exponent = (h >> 10) & 0x1f;
    const uint32_t mantissa = h & 0x3ff;
    if (exponent == 0x1f) {
        return host::bits_to_float(sign | 0x7f800000 | (mantissa << 13));
    }
    if (exponent == 0) {
        // zero or subnormal: mantissa · 2^-24, exact in f32
        const float m = (float)mantissa * 5.9604644775390625e-8f;
        return sign ? -m : m;
    }
    return host::bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// f32 to f16 bits, rounded to nearest even (as cvt.rn.f16.f32)
DEVICE uint16_t float_to_half(float f) {
    const uint32_t x = host::float_to_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    const uint32_t abs = x & 0x7fffffff;
    if (abs > 0x7f800000) {
        return sign | 0x7e00;  // NaN
    }
    if (abs >= 0x477ff000) {
        return sign | 0x7c00;  // rounds to infinity (65520 and up)
    }
    if (abs < 0x38800000) {
        // below the smallest normal half: a subnormal, rounded to nearest even by the f32 sum
        const float r = host::bits_to_float(abs) + 0.5f;  // 0.5 = 2^-1: the half's ulp 2^-24 lands on f32's
        return sign | (uint16_t)(host::float_to_bits(r) - host::float_to_bits(0.5f));
    }
    // normal: drop 13 mantissa bits, rounding to nearest even
    const uint32_t rounded = abs + 0xfff + ((abs >> 13) & 1);
    return sign | (uint16_t)((rounded - 0x38000000) >> 13);
}
