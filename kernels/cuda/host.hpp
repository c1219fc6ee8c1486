// The CPU execution harness's side of the portability header: the same kernel sources compiled
// as host C++ (the `host` feature of the kernels crate). A launch runs the grid's blocks one
// after another and each block's threads as host threads: `__syncthreads` is a barrier of the
// block (which its threads must meet at one line of the source), a warp shuffle goes through
// one slot per thread and one barrier of the warp (two slots per thread, taken in turn; a warp's
// butterfly reduction and a tensor-core product exchange every value they need at one barrier,
// as their shuffles would give them), `__shared__` memory is a thread-local static of the
// kernel (one block runs at a time on a launch's OS thread; a plain static under
// ThreadSanitizer, where one launch runs at a time), filled with 0xFF bytes for each block, and
// a thread that returns leaves the barriers, as on a GPU. The threads are fibers (user-level
// threads switched at the barriers, on the launch's OS thread), or OS threads when built for
// ThreadSanitizer (KERNELS_HOST_OS_THREADS): the same kernels, barriers and slots.
#pragma once

#include <math.h>  // the C names (cosf, expf, ...) as device code spells them
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

namespace host {

struct Dim3 {
    unsigned x = 1, y = 1, z = 1;
};

// What a lane hands its warp at one exchange, at most.
constexpr size_t SLOT_BYTES = 64;
// What a lane's result of a butterfly reduction takes, at most (a double).
constexpr size_t RESULT_BYTES = 8;

// What a launch can find a kernel doing that a GPU would not do as the host does, by the status
// the launch returns (`src/host.rs` reads it; 1 is a geometry the launch refuses).
enum Fault : int {
    DEADLOCK = 2,           // threads waiting at barriers that cannot complete
    MISALIGNED = 3,         // an access at an address its alignment rules out: a GPU faults
    PARTIAL_WARP = 4,       // a full-mask warp exchange with lanes missing: undefined on a GPU
    DIVERGENT_BARRIER = 5,  // `__syncthreads` met from different lines: undefined on a GPU
    DIFFERS_ON_A_GPU = 6,   // a shift or conversion whose result a GPU gives otherwise
};

// What one block's threads share.
struct Block {
    Dim3 dim;
    // two exchange slots of SLOT_BYTES per thread: exchange k of a warp writes set k % 2 (`dim.x`
    // slots each), so one barrier between the writes and the reads suffices. A thread cannot
    // write set k % 2 again (exchange k + 2) before every lane of its warp has met the barrier of
    // exchange k + 1, which each reaches only after its reads of exchange k.
    std::vector<uint8_t> slots;
    std::vector<uint32_t> exchanges;  // each thread's exchanges so far (the next writes set count % 2)
    // per warp and set, what its lanes' butterfly reduction of the exchange there gave them
    // (RESULT_BYTES per lane), and the exchange's number + 1 (0: none yet): the first lane to read
    // works out every lane's result, the others read theirs (fibers; OS threads each work out
    // their own)
    std::vector<uint8_t> butterflies;
    std::vector<uint32_t> butterfly_of;
    // the launch's first fault (a `Fault`; 0: none) and what and where it was, for the launch's
    // report: the first thread to find one writes both (`note_fault`), the launch reads them once
    // its threads are done
    std::atomic<int> fault{0};
    char fault_detail[384] = {};
};

extern thread_local Dim3 thread_idx;
extern thread_local Dim3 block_idx;
extern thread_local Block* block;
// the blocks the fibers of this OS thread have begun (the first is 1); with OS threads, the
// running block's number among all the launches' (each of its threads holds the same)
extern thread_local unsigned long long block_serial;

// A kernel's shared variable as the first of a block's threads declares it (the others cannot
// touch it before they do): filled with 0xFF bytes (NaN floats, -1 integers), since a GPU's
// shared memory holds garbage at a block's start, not the last block's values.
inline void fresh_shared(void* at, size_t bytes, unsigned long long* filled_for) {
    if (*filled_for != block_serial) {
        std::memset(at, 0xFF, bytes);
        *filled_for = block_serial;
    }
}

// The same for the OS threads of a ThreadSanitizer build, whose threads of a block declare the
// variable side by side: the first to declare it fills it, under a lock the others take too, so
// that the fill comes before any thread's use of it (host.cpp).
void fresh_shared_locked(void* at, size_t bytes, unsigned long long* filled_for);

// Keeps `kind` and its detail, formatted as printf does, as the running launch's fault, unless
// the launch has one already (host.cpp).
void note_fault(Fault kind, const char* format, ...) __attribute__((format(printf, 2, 3)));

// the barrier of the calling thread's block, and of its warp (host.cpp)
// (`file` and `line`: where the kernel's source calls `__syncthreads`, which every thread of the
// block must reach at the same line)
void sync_threads(const char* file, unsigned line);
void sync_warp();

// The calling lane's `bytes` bytes at `v` handed to its warp, through one slot per thread and
// one barrier of the warp: returns the warp's slots, lane k's at k * SLOT_BYTES (a lane beyond
// the block has none).
inline const uint8_t* exchange(const void* v, size_t bytes) {
    const unsigned t = thread_idx.x;
    uint8_t* set = block->slots.data() + ((size_t)(block->exchanges[t] % 2) * block->dim.x + (t & ~31u)) * SLOT_BYTES;
    block->exchanges[t]++;
    std::memcpy(set + (t % 32) * SLOT_BYTES, v, bytes);
    sync_warp();
    return set;
}

// the lanes of warp w of a block of `threads` threads (32 but in a partial last warp)
inline unsigned lanes_of_warp(unsigned w, unsigned threads) {
    return threads - w * 32 < 32 ? threads - w * 32 : 32;
}

// whether lane k of the calling thread's warp is in the block
inline bool lane_exists(unsigned k) {
    return (thread_idx.x & ~31u) + k < block->dim.x;
}

// the value of lane `src` of the calling thread's warp, as __shfl_sync (a lane beyond the block
// gives the caller's own value)
template <class T>
T shfl(T v, int src) {
    static_assert(sizeof(T) <= SLOT_BYTES, "a shuffled value fits a slot");
    const uint8_t* lanes = exchange(&v, sizeof(T));
    const unsigned from = (unsigned)src % 32;
    T out = v;
    if (lane_exists(from)) {
        std::memcpy(&out, lanes + from * SLOT_BYTES, sizeof(T));
    }
    return out;
}

// A warp's exchanged words: (from, i) is word i of lane `from`.
struct Words {
    const uint8_t* lanes;
    int operator()(int from, int i) const {
        int v;
        std::memcpy(&v, lanes + from * SLOT_BYTES + i * sizeof(int), sizeof(int));
        return v;
    }
};

// The calling lane's N words handed to its warp in one exchange.
template <int N>
Words exchange_words(const int (&words)[N]) {
    static_assert(N * sizeof(int) <= SLOT_BYTES, "the words fit a slot");
    return Words{exchange(words, sizeof(words))};
}

// out[n] = lane `src`'s v[n] for n < N, as N shuffles give them, through one exchange
template <int N>
void shfl_floats(float* out, const float* v, int src) {
    static_assert(N * sizeof(float) <= SLOT_BYTES, "the values fit a slot");
    const uint8_t* lanes = exchange(v, N * sizeof(float));
    const unsigned from = (unsigned)src % 32;
    std::memcpy(out, lane_exists(from) ? lanes + from * SLOT_BYTES : reinterpret_cast<const uint8_t*>(v), N * sizeof(float));
}

// Every lane's value after a warp's butterfly (portable.cuh's warp_butterfly) of the values at
// `lanes` (the `present` lanes' exchanged values), into results[0..present): at each step of
// masks 16 down to 1 a lane's value becomes op(own, partner's), a partner beyond the block giving
// the lane its own value, as shfl_xor does.
template <class T, class Op>
void butterfly_all(const uint8_t* lanes, unsigned present, Op op, T* results) {
    T values[2][32];
    for (unsigned x = 0; x < present; x++) {
        std::memcpy(&values[0][x], lanes + x * SLOT_BYTES, sizeof(T));
    }
    unsigned from = 0;
    for (unsigned mask = 16; mask > 0; mask >>= 1, from ^= 1) {
        for (unsigned x = 0; x < present; x++) {
            const unsigned partner = x ^ mask;
            values[from ^ 1][x] = op(values[from][x], partner < present ? values[from][partner] : values[from][x]);
        }
    }
    std::memcpy(results, values[from], present * sizeof(T));
}

// The warp's butterfly (portable.cuh's warp_butterfly) with one exchange instead of five
// shuffles: the same operations on the same values, in the same order, so the same bits.
template <class T, class Op>
T warp_butterfly(T v, Op op) {
    static_assert(sizeof(T) <= RESULT_BYTES, "a value fits a result");
    const unsigned t = thread_idx.x;
#ifndef KERNELS_HOST_OS_THREADS
    const uint32_t number = block->exchanges[t];  // this exchange's, before it counts
#endif
    const uint8_t* lanes = exchange(&v, sizeof(T));
    const unsigned present = lanes_of_warp(t / 32, block->dim.x);
    T results[32];
#ifdef KERNELS_HOST_OS_THREADS
    butterfly_all(lanes, present, op, results);
    const uint8_t* mine = reinterpret_cast<const uint8_t*>(results);
#else
    // one lane works out the warp's results, the first to read them (fibers run one at a time)
    const size_t cache = (size_t)(t / 32) * 2 + number % 2;
    uint8_t* mine = block->butterflies.data() + cache * 32 * RESULT_BYTES;
    if (block->butterfly_of[cache] != number + 1) {
        butterfly_all(lanes, present, op, results);
        std::memcpy(mine, results, present * sizeof(T));
        block->butterfly_of[cache] = number + 1;
    }
#endif
    T out;
    std::memcpy(&out, mine + (t % 32) * sizeof(T), sizeof(T));
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
// one launch runs at a time: a plain static, filled afresh for each block
#define SHARED(type, name, dims)                             \
    static type name dims;                                   \
    static unsigned long long name##_block = 0;              \
    host::fresh_shared_locked(&name, sizeof(name), &name##_block)
#else
// one per OS thread (launches on other threads run side by side), filled afresh for each block
#define SHARED(type, name, dims)                             \
    static thread_local type name dims;                      \
    static thread_local unsigned long long name##_block = 0; \
    host::fresh_shared(&name, sizeof(name), &name##_block)
#endif
#define __constant__ static
#define DEVICE_TABLE static const
#define UNROLL  // the host compiler unrolls as it sees fit
#define THREAD_ID host::thread_idx.x
#define BLOCK_ID host::block_idx.x
#define BLOCK_ID_Y host::block_idx.y
#define BLOCK_ID_Z host::block_idx.z
#define BLOCK_THREADS host::block->dim.x
#define SYNC_THREADS() host::sync_threads(__FILE__, __LINE__)
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

// mma.sync m16n8k32 with signed bytes (portable.cuh has the fragments' layout): the lanes hand
// their fragments to the warp in one exchange, and each gathers the A rows and B columns of its
// four outputs in the documented layout and adds their integer dot products (exact, so the
// order is free).
DEVICE void mma_s8_16x8x32(int* c, const int* a, const int* b) {
    const int lane = (int)(host::thread_idx.x % 32);
    const int g = lane / 4;
    const int t = lane % 4;
    const int fragments[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
    const host::Words fragment = host::exchange_words(fragments);
    for (int q = 0; q < 4; q++) {
        // lane 4g + q holds A[g][4q..4q+4) in a[0], A[g][16+4q..) in a[2]; A[g+8] in a[1], a[3];
        // lane 4n + q holds B[4q..4q+4)[n] in b[0], B[16+4q..)[n] in b[1]
        for (int j = 0; j < 2; j++) {
            const int from = 4 * (2 * t + j) + q;
            c[j] = dp4a(fragment(4 * g + q, 2), fragment(from, 5), dp4a(fragment(4 * g + q, 0), fragment(from, 4), c[j]));
            c[2 + j] = dp4a(fragment(4 * g + q, 3), fragment(from, 5), dp4a(fragment(4 * g + q, 1), fragment(from, 4), c[2 + j]));
        }
    }
}

// mma.sync m16n8k16 (portable.cuh): as above, with one word of A per row and one of B per column
DEVICE void mma_s8_16x8x16(int* c, const int* a, const int* b) {
    const int lane = (int)(host::thread_idx.x % 32);
    const int g = lane / 4;
    const int t = lane % 4;
    const int fragments[3] = {a[0], a[1], b[0]};
    const host::Words fragment = host::exchange_words(fragments);
    for (int q = 0; q < 4; q++) {
        const int row = fragment(4 * g + q, 0);
        const int row8 = fragment(4 * g + q, 1);
        const int col0 = fragment(4 * (2 * t) + q, 2);
        const int col1 = fragment(4 * (2 * t + 1) + q, 2);
        c[0] = dp4a(row, col0, c[0]);
        c[1] = dp4a(row, col1, c[1]);
        c[2] = dp4a(row8, col0, c[2]);
        c[3] = dp4a(row8, col1, c[3]);
    }
}

// The aligned loads' check: an address that is not a multiple of `need` is the launch's fault
// (the host would load there, a GPU would fault). Buffers start 256-byte aligned, as device
// allocations do (`src/host.rs`), so an address's alignment here is what it would be there.
DEVICE void check_alignment(const uint8_t* p, unsigned need) {
    if ((uintptr_t)p % need != 0 && host::block != nullptr) {
        host::note_fault(host::MISALIGNED, "an aligned load at %#llx, which is not %u-byte aligned", (unsigned long long)p, need);
    }
}

// the device's aligned loads (portable.cuh), their alignment checked
DEVICE uint32_t load_u32_checked(const uint8_t* p, unsigned need) {
    check_alignment(p, need);
    uint32_t w;
    std::memcpy(&w, p, 4);
    return w;
}

DEVICE uint32_t load_u32_a4(const uint8_t* p) {
    return load_u32_checked(p, 4);
}

DEVICE uint32_t load_u32_a2(const uint8_t* p) {
    return load_u32_checked(p, 2);
}

DEVICE void load_u32x4_a16(const uint8_t* p, uint32_t* w) {
    check_alignment(p, 16);
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
