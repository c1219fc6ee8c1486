// The CPU execution harness's launcher: the grid's blocks one after another. A block's threads
// are fibers on the launching OS thread, switched at the barriers (a warp shuffle is one warp
// barrier), round robin: cheap enough to run whole models in the tests; a kernel's `__shared__`
// statics are thread-local, so launches from different OS threads run side by side, and filled
// with 0xFF bytes as each block first declares them (host.hpp's SHARED). Built for
// ThreadSanitizer (KERNELS_HOST_OS_THREADS) the block's threads are OS threads instead, so that
// the sanitizer sees the kernels' accesses from real concurrent threads, and one launch runs at
// a time (the `__shared__` statics are then plain statics, the running block's).
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "host.hpp"

namespace host {

thread_local Dim3 thread_idx;
thread_local Dim3 block_idx;
thread_local Block* block = nullptr;
thread_local unsigned long long block_serial = 0;

static bool bad_geometry(Dim3 grid, Dim3 dim) {
    return dim.x == 0 || dim.x > 1024 || dim.y != 1 || dim.z != 1 || grid.x == 0 || grid.y == 0 || grid.z == 0;
}

static Dim3 block_number(unsigned long long i, Dim3 grid) {
    return Dim3{(unsigned)(i % grid.x), (unsigned)(i / grid.x % grid.y), (unsigned)(i / grid.x / grid.y)};
}

static unsigned warps_of(unsigned threads) {
    return (threads + 31) / 32;
}

// A block of `dim` threads' shared state: two exchange slot sets per thread, and per warp two
// butterfly results (host.hpp's Block).
static void size_block(Block& b, Dim3 dim) {
    b.dim = dim;
    b.slots.assign(2 * (size_t)dim.x * SLOT_BYTES, 0);
    b.exchanges.assign(dim.x, 0);
    b.butterflies.assign(2 * (size_t)warps_of(dim.x) * 32 * RESULT_BYTES, 0);
    b.butterfly_of.assign(2 * (size_t)warps_of(dim.x), 0);
}

// the detail of the calling OS thread's last launch's fault, which `kernels_host_last_fault`
// hands to the Rust side after the launch returns
static thread_local char last_fault_detail[sizeof(Block::fault_detail)];

void note_fault(Fault kind, const char* format, ...) {
    int none = 0;
    if (!block->fault.compare_exchange_strong(none, kind)) {
        return;
    }
    // where in the grid, then what
    char* detail = block->fault_detail;
    const size_t room = sizeof block->fault_detail;
    const int at = std::snprintf(detail, room, "block (%u, %u, %u), thread %u: ", block_idx.x, block_idx.y, block_idx.z, thread_idx.x);
    const size_t used = at < 0 ? 0 : ((size_t)at < room ? (size_t)at : room - 1);
    va_list args;
    va_start(args, format);
    std::vsnprintf(detail + used, room - used, format, args);
    va_end(args);
}

// Notes a warp exchanging values with fewer than 32 lanes running.
static void note_partial_warp(unsigned warp) {
    note_fault(PARTIAL_WARP, "warp %u exchanged values with fewer than 32 lanes running", warp);
}

// The place in the source of a block barrier's call.
struct Site {
    const char* file = nullptr;
    unsigned line = 0;
};

// Notes the first block barrier of the launch that a thread met at another line than the
// barrier's first arrival did.
static void note_barrier(Site& first, Site here) {
    if (first.file == nullptr) {
        first = here;
        return;
    }
    if (first.line == here.line && std::strcmp(first.file, here.file) == 0) {
        return;
    }
    note_fault(DIVERGENT_BARRIER, "met __syncthreads at %s:%u, where the block's first thread there met it at %s:%u", here.file, here.line,
               first.file, first.line);
}

// The launch's status once its blocks ran: its first fault (whose detail the calling thread
// keeps for `kernels_host_last_fault`), else `status`.
static int fault_status(const Block& b, int status) {
    if (const int fault = b.fault.load()) {
        std::memcpy(last_fault_detail, b.fault_detail, sizeof last_fault_detail);
        return fault;
    }
    return status;
}

}  // namespace host

// The kernels are compiled with `-fsanitize=alignment` (build.rs): the compiler checks each
// typed load and store (a `float*` read, a store through a `uint32_t*`) whose alignment it cannot
// prove, and calls this where the address is not a multiple of its type's alignment. On a GPU
// that access faults, so it is kept for the launch's report as the aligned loads' check keeps
// theirs; the host then makes the access and the launch goes on. This is the handler's ABI as
// GCC's and Clang's instrumentation call it (libubsan's, which is not linked).
namespace {
struct SourceLocation {
    const char* file;
    uint32_t line;
    uint32_t column;
};
struct TypeDescriptor {
    uint16_t kind;
    uint16_t info;
    char name[1];  // quoted, as `'float'`
};
struct TypeMismatchData {
    SourceLocation location;
    const TypeDescriptor* type;
    unsigned char log_alignment;
    unsigned char check_kind;
};
// The operands of `-fsanitize=shift-exponent`'s and `-fsanitize=float-cast-overflow`'s checks
// (build.rs), both with the source location first.
struct ShiftData {
    SourceLocation location;
    const TypeDescriptor* left;
    const TypeDescriptor* right;
};
struct ConversionData {
    SourceLocation location;
    const TypeDescriptor* from;
    const TypeDescriptor* to;
};
}  // namespace

// Keeps the launch's first arithmetic that the host and a GPU do differently, for its report.
static void note_difference(const char* what, const SourceLocation& at) {
    if (host::block == nullptr) {
        std::fprintf(stderr, "%s at %s:%u, outside a kernel\n", what, at.file, at.line);
        std::abort();
    }
    host::note_fault(host::DIFFERS_ON_A_GPU, "%s at %s:%u", what, at.file, at.line);
}

// A shift by the type's width or more, or by a negative count: x86 takes the count modulo the
// width, a GPU's shift (PTX `shl`, `shr`) clamps it, giving 0 (or the sign).
extern "C" void __ubsan_handle_shift_out_of_bounds(ShiftData* data, uintptr_t, uintptr_t) {
    note_difference("shift by at least its operand's width, or by a negative count", data->location);
}

// A float converted to an integer type that cannot hold it (or a NaN): x86 gives the type's
// smallest value, a GPU's conversion (PTX `cvt.rzi`) saturates, and a NaN gives 0.
extern "C" void __ubsan_handle_float_cast_overflow(ConversionData* data, uintptr_t) {
    note_difference("conversion of a float outside the integer type's range (or a NaN)", data->location);
}

extern "C" void __ubsan_handle_type_mismatch_v1(TypeMismatchData* data, uintptr_t pointer) {
    const unsigned need = 1u << data->log_alignment;
    if (pointer % need == 0) {
        return;  // the other checks of this handler (null pointers, object sizes) are not enabled
    }
    if (host::block == nullptr) {
        // the harness's own code, outside any launch: a defect of the harness, not of a kernel
        std::fprintf(stderr, "misaligned access to a %s at %s:%u\n", data->type->name, data->location.file, data->location.line);
        std::abort();
    }
    host::note_fault(host::MISALIGNED, "a %s at %#llx (%s:%u), which is not %u-byte aligned", data->type->name, (unsigned long long)pointer,
                     data->location.file, data->location.line, need);
}

#ifdef KERNELS_HOST_OS_THREADS

#include <barrier>
#include <thread>

namespace host {

// the running block's barriers (one launch, one block at a time); the block barrier's completion
// forgets where its first thread arrived from, before it releases them
static Site all_barrier_site;
static std::mutex all_barrier_site_lock;
static void forget_site() noexcept {
    all_barrier_site = Site{};
}
static std::unique_ptr<std::barrier<decltype(&forget_site)>> all_barrier;
static std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;

void fresh_shared_locked(void* at, size_t bytes, unsigned long long* filled_for) {
    static std::mutex declaring;
    std::lock_guard<std::mutex> lock(declaring);
    fresh_shared(at, bytes, filled_for);
}

void sync_threads(const char* file, unsigned line) {
    {
        std::lock_guard<std::mutex> lock(all_barrier_site_lock);
        note_barrier(all_barrier_site, Site{file, line});
    }
    all_barrier->arrive_and_wait();
}

void sync_warp() {
    // lanes beyond the block (those that returned are not seen here: the fibers check them)
    const unsigned warp = thread_idx.x / 32;
    if (lanes_of_warp(warp, block->dim.x) < 32) {
        note_partial_warp(warp);
    }
    warp_barriers[warp]->arrive_and_wait();
}

static void reset_barriers(unsigned threads) {
    forget_site();
    all_barrier = std::make_unique<std::barrier<decltype(&forget_site)>>(threads, &forget_site);
    warp_barriers.clear();
    for (unsigned w = 0; w * 32 < threads; w++) {
        warp_barriers.push_back(std::make_unique<std::barrier<>>(lanes_of_warp(w, threads)));
    }
}

// A block's worth of OS threads, made once per launch; they run every block in turn and meet
// at a barrier between blocks, where the block's barriers are made afresh (a thread that
// returned early had dropped out of them).
int launch(Dim3 grid, Dim3 dim, const std::function<void()>& kernel) {
    static std::mutex one_launch_at_a_time;
    std::lock_guard<std::mutex> lock(one_launch_at_a_time);
    if (bad_geometry(grid, dim)) {
        return 1;
    }
    const unsigned long long blocks = (unsigned long long)grid.x * grid.y * grid.z;
    // the blocks of the launches before this one: this launch's block i is number first + i + 1
    static unsigned long long blocks_before = 0;
    const unsigned long long first = blocks_before;
    blocks_before += blocks;
    Block b;
    size_block(b, dim);
    reset_barriers(dim.x);
    auto next_block = [dim]() noexcept { reset_barriers(dim.x); };
    std::barrier<decltype(next_block)> between(dim.x, next_block);
    std::vector<std::thread> threads;
    threads.reserve(dim.x);
    for (unsigned t = 0; t < dim.x; t++) {
        threads.emplace_back([&, t] {
            thread_idx = Dim3{t, 0, 0};
            block = &b;
            for (unsigned long long i = 0; i < blocks; i++) {
                block_idx = block_number(i, grid);
                block_serial = first + i + 1;
                b.exchanges[t] = 0;
                kernel();
                // a thread that returns no longer holds the others at the block's barriers
                warp_barriers[t / 32]->arrive_and_drop();
                all_barrier->arrive_and_drop();
                between.arrive_and_wait();
            }
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    return fault_status(b, 0);
}

}  // namespace host

#else

// Fibers: a block's threads as user-level threads on the launching OS thread. A thread that
// waits at a barrier switches straight to the next thread of the block that can run (round
// robin), and to the launcher only when none can: the block is finished, or its threads wait at
// barriers that cannot complete. Each launch takes a launcher state (fibers and barriers) of its
// own from a pool, so launches from different OS threads run side by side.

extern "C" void kernels_host_switch(void** save, void* to);
extern "C" void kernels_host_fiber_entry();

// The switch saves the System V callee-saved registers. MXCSR and the x87 control word, also
// callee-saved, are left alone: no kernel changes them, so every fiber runs with the launching
// thread's (two serialising loads per switch saved).
asm(R"(
    .pushsection .text
    .globl kernels_host_switch
    .type kernels_host_switch, @function
kernels_host_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size kernels_host_switch, .-kernels_host_switch

    .globl kernels_host_fiber_entry
    .type kernels_host_fiber_entry, @function
kernels_host_fiber_entry:
    movq %r12, %rdi
    call kernels_host_fiber_main@PLT
    ud2
    .size kernels_host_fiber_entry, .-kernels_host_fiber_entry
    .popsection
)");

namespace host {

constexpr size_t FIBER_STACK = 128 * 1024;

enum Wait { RUNNING, AT_BLOCK_BARRIER, AT_WARP_BARRIER };

struct Fiber {
    void* sp = nullptr;
    std::unique_ptr<char[]> stack{new char[FIBER_STACK]};
    unsigned t = 0;
    bool done = false;
    Wait wait = RUNNING;
    unsigned long long generation = 0;  // of the barrier it waits at
};

// A barrier of the running block: the threads still running (`live`) and those arrived; each
// completion starts a new generation, which releases the threads that waited for it.
struct BarrierState {
    unsigned live = 0;
    unsigned arrived = 0;
    unsigned long long generation = 0;
    Site first;  // where this generation's first thread arrived from (a block barrier's)

    bool complete() const {
        return arrived > 0 && arrived == live;
    }
    void release() {
        arrived = 0;
        generation++;
        first = Site{};
    }
};

// One launch's state: the fibers (kept with their stacks from launch to launch), the block's
// barriers, and where the launcher waits.
struct Launcher {
    std::vector<std::unique_ptr<Fiber>> fibers;
    void* launcher_sp = nullptr;
    const std::function<void()>* kernel = nullptr;
    BarrierState all;
    std::vector<BarrierState> warps;
};

// The launcher of the launch running on this OS thread.
static thread_local Launcher* here = nullptr;

static bool blocked(const Launcher& l, const Fiber& f) {
    switch (f.wait) {
        case AT_BLOCK_BARRIER:
            return f.generation == l.all.generation;
        case AT_WARP_BARRIER:
            return f.generation == l.warps[f.t / 32].generation;
        default:
            return false;
    }
}

// Leaves fiber `from` (waiting at a barrier, or done) for the next fiber after it that can run,
// or for the launcher when none can.
static void switch_from(Fiber* from) {
    Launcher& l = *here;
    const unsigned n = block->dim.x;
    unsigned t = from->t;
    for (unsigned k = 1; k < n; k++) {
        t = t + 1 == n ? 0 : t + 1;
        Fiber& f = *l.fibers[t];
        if (f.done || blocked(l, f)) {
            continue;
        }
        f.wait = RUNNING;
        thread_idx = Dim3{t, 0, 0};
        kernels_host_switch(&from->sp, f.sp);
        return;
    }
    kernels_host_switch(&from->sp, l.launcher_sp);
}

static void arrive(Wait kind) {
    Launcher& l = *here;
    Fiber* f = l.fibers[thread_idx.x].get();
    BarrierState& s = kind == AT_BLOCK_BARRIER ? l.all : l.warps[f->t / 32];
    s.arrived++;
    if (s.complete()) {
        s.release();  // the last to arrive goes on at once
        return;
    }
    f->wait = kind;
    f->generation = s.generation;
    switch_from(f);
}

void sync_threads(const char* file, unsigned line) {
    note_barrier(here->all.first, Site{file, line});
    arrive(AT_BLOCK_BARRIER);
}

void sync_warp() {
    // a lane returned or absent: the device's full-mask shuffle would name it
    const unsigned warp = thread_idx.x / 32;
    if (here->warps[warp].live < 32) {
        note_partial_warp(warp);
    }
    arrive(AT_WARP_BARRIER);
}

static void prepare(Fiber& f) {
    // the initial frame kernels_host_switch pops: six registers, then the return address
    uintptr_t top = (uintptr_t)(f.stack.get() + FIBER_STACK) & ~(uintptr_t)15;
    uint64_t* sp = (uint64_t*)top;
    // the return address at 8 mod 16: after `ret` the stack is 16-byte aligned for the call
    *--sp = (uint64_t)&kernels_host_fiber_entry;
    *--sp = 0;                                      // rbp
    *--sp = 0;                                      // rbx
    *--sp = (uint64_t)&f;                           // r12: the entry's argument
    *--sp = 0;                                      // r13
    *--sp = 0;                                      // r14
    *--sp = 0;                                      // r15
    f.sp = sp;
    f.done = false;
    f.wait = RUNNING;
}

}  // namespace host

extern "C" void kernels_host_fiber_main(host::Fiber* f) {
    using namespace host;
    Launcher& l = *here;
    (*l.kernel)();
    f->done = true;
    // a thread that returns leaves both barriers, which may complete them
    BarrierState& w = l.warps[f->t / 32];
    l.all.live--;
    w.live--;
    if (l.all.complete()) {
        l.all.release();
    }
    if (w.complete()) {
        w.release();
    }
    switch_from(f);
    __builtin_unreachable();
}

namespace host {

// Launcher states not in use, each with the fibers of the largest block it ran.
static std::mutex pool_lock;
static std::vector<std::unique_ptr<Launcher>> pool;

int launch(Dim3 grid, Dim3 dim, const std::function<void()>& kernel) {
    if (bad_geometry(grid, dim)) {
        return 1;
    }
    std::unique_ptr<Launcher> taken;
    {
        std::lock_guard<std::mutex> lock(pool_lock);
        if (!pool.empty()) {
            taken = std::move(pool.back());
            pool.pop_back();
        }
    }
    if (!taken) {
        taken = std::make_unique<Launcher>();
    }
    Launcher& l = *taken;
    while (l.fibers.size() < dim.x) {
        l.fibers.push_back(std::make_unique<Fiber>());
    }
    l.kernel = &kernel;
    here = &l;
    Block b;
    size_block(b, dim);
    block = &b;
    const unsigned warps = warps_of(dim.x);
    const unsigned long long blocks = (unsigned long long)grid.x * grid.y * grid.z;
    int status = 0;
    for (unsigned long long i = 0; i < blocks && status == 0; i++) {
        block_idx = block_number(i, grid);
        block_serial++;
        l.all = BarrierState{dim.x, 0, 0, Site{}};
        l.warps.assign(warps, BarrierState{});
        for (unsigned w = 0; w < warps; w++) {
            l.warps[w].live = lanes_of_warp(w, dim.x);
        }
        for (unsigned t = 0; t < dim.x; t++) {
            l.fibers[t]->t = t;
            prepare(*l.fibers[t]);
        }
        std::fill(b.exchanges.begin(), b.exchanges.end(), 0);
        std::fill(b.butterfly_of.begin(), b.butterfly_of.end(), 0);
        // thread 0 first; the launcher goes on when no thread can run
        thread_idx = Dim3{0, 0, 0};
        kernels_host_switch(&l.launcher_sp, l.fibers[0]->sp);
        for (unsigned t = 0; t < dim.x; t++) {
            if (!l.fibers[t]->done) {
                thread_idx = Dim3{t, 0, 0};  // the first thread left waiting, for the report
                note_fault(DEADLOCK, "waits at a barrier that cannot complete");
                status = DEADLOCK;
                break;
            }
        }
    }
    here = nullptr;
    block = nullptr;
    std::lock_guard<std::mutex> lock(pool_lock);
    pool.push_back(std::move(taken));
    return fault_status(b, status);
}

}  // namespace host

#endif

// The detail of the calling thread's last launch's fault (the launch returned its `Fault`):
// copied to `out` (`len` bytes, NUL-terminated), its length returned.
extern "C" size_t kernels_host_last_fault(char* out, size_t len) {
    const size_t n = std::strlen(host::last_fault_detail);
    if (len > 0) {
        const size_t copied = n < len - 1 ? n : len - 1;
        std::memcpy(out, host::last_fault_detail, copied);
        out[copied] = '\0';
    }
    return n;
}
