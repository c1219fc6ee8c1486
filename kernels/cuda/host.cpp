// The CPU execution harness's launcher: the grid's blocks one after another, one launch at a
// time (a kernel's `__shared__` statics are then the running block's). A block's threads are
// fibers on the launching OS thread, switched at the barriers (a warp shuffle is two warp
// barriers), round robin: cheap enough to run whole models in the tests. Built for
// ThreadSanitizer (KERNELS_HOST_OS_THREADS) they are OS threads instead, so that the
// sanitizer sees the kernels' accesses from real concurrent threads.
#include <cstdio>
#include <memory>
#include <mutex>

#include "host.hpp"

namespace host {

thread_local Dim3 thread_idx;
thread_local Dim3 block_idx;
thread_local Block* block = nullptr;

static bool bad_geometry(Dim3 grid, Dim3 dim) {
    return dim.x == 0 || dim.x > 1024 || dim.y != 1 || dim.z != 1 || grid.x == 0 || grid.y == 0 || grid.z == 0;
}

static Dim3 block_number(unsigned long long i, Dim3 grid) {
    return Dim3{(unsigned)(i % grid.x), (unsigned)(i / grid.x % grid.y), (unsigned)(i / grid.x / grid.y)};
}

static unsigned lanes_of_warp(unsigned w, unsigned threads) {
    return threads - w * 32 < 32 ? threads - w * 32 : 32;
}

}  // namespace host

#ifdef KERNELS_HOST_OS_THREADS

#include <barrier>
#include <thread>

namespace host {

// the running block's barriers (one launch, one block at a time)
static std::unique_ptr<std::barrier<>> all_barrier;
static std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;

void sync_threads() {
    all_barrier->arrive_and_wait();
}

void sync_warp() {
    warp_barriers[thread_idx.x / 32]->arrive_and_wait();
}

static void reset_barriers(unsigned threads) {
    all_barrier = std::make_unique<std::barrier<>>(threads);
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
    Block b;
    b.dim = dim;
    b.slots.assign(dim.x, 0);
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
    return 0;
}

}  // namespace host

#else

// Switching between fibers: the callee-saved registers and the floating-point control words
// are pushed on the running stack, its stack pointer stored in *save, and the stack at `to`
// popped the same way (System V x86-64). A new fiber's stack is made to look as if it had
// switched away just before `kernels_host_fiber_entry`.
extern "C" void kernels_host_switch(void** save, void* to);
extern "C" void kernels_host_fiber_entry();

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
    subq $16, %rsp
    stmxcsr 8(%rsp)
    fnstcw (%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    fldcw (%rsp)
    ldmxcsr 8(%rsp)
    addq $16, %rsp
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

// A barrier's state: threads still running the kernel, threads arrived, and a generation that
// advances each time every live thread has arrived (which lets the waiting ones go).
struct BarrierState {
    unsigned live = 0;
    unsigned arrived = 0;
    unsigned long long generation = 0;

    bool complete() const {
        return arrived > 0 && arrived == live;
    }
    void release() {
        arrived = 0;
        generation++;
    }
};

// The scheduler of the running launch (one at a time).
static std::vector<std::unique_ptr<Fiber>> fibers;
static void* scheduler_sp = nullptr;
static Fiber* current = nullptr;
static const std::function<void()>* running_kernel = nullptr;
static BarrierState all_state;
static std::vector<BarrierState> warp_states;

static void arrive(Wait kind) {
    Fiber* f = current;
    BarrierState& s = kind == AT_BLOCK_BARRIER ? all_state : warp_states[f->t / 32];
    s.arrived++;
    if (s.complete()) {
        s.release();  // the last to arrive goes on at once
        return;
    }
    f->wait = kind;
    f->generation = s.generation;
    kernels_host_switch(&f->sp, scheduler_sp);
}

void sync_threads() {
    arrive(AT_BLOCK_BARRIER);
}

void sync_warp() {
    arrive(AT_WARP_BARRIER);
}

static bool blocked(const Fiber& f) {
    switch (f.wait) {
        case AT_BLOCK_BARRIER:
            return f.generation == all_state.generation;
        case AT_WARP_BARRIER:
            return f.generation == warp_states[f.t / 32].generation;
        default:
            return false;
    }
}

static void prepare(Fiber& f) {
    // the frame kernels_host_switch pops: control words, r15..r12, rbx, rbp, return address
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
    *--sp = 0x1f80;                                 // mxcsr (the default: round to nearest, all masked)
    *--sp = 0x037f;                                 // x87 control word (the default)
    f.sp = sp;
    f.done = false;
    f.wait = RUNNING;
}

}  // namespace host

extern "C" void kernels_host_fiber_main(host::Fiber* f) {
    using namespace host;
    (*running_kernel)();
    f->done = true;
    // a thread that returns no longer holds the others at a barrier
    BarrierState& w = warp_states[f->t / 32];
    all_state.live--;
    w.live--;
    if (all_state.complete()) {
        all_state.release();
    }
    if (w.complete()) {
        w.release();
    }
    kernels_host_switch(&f->sp, scheduler_sp);
    __builtin_unreachable();
}

namespace host {

int launch(Dim3 grid, Dim3 dim, const std::function<void()>& kernel) {
    static std::mutex one_launch_at_a_time;
    std::lock_guard<std::mutex> lock(one_launch_at_a_time);
    if (bad_geometry(grid, dim)) {
        return 1;
    }
    while (fibers.size() < dim.x) {
        fibers.push_back(std::make_unique<Fiber>());
    }
    Block b;
    b.dim = dim;
    b.slots.assign(dim.x, 0);
    block = &b;
    running_kernel = &kernel;
    const unsigned warps = (dim.x + 31) / 32;
    const unsigned long long blocks = (unsigned long long)grid.x * grid.y * grid.z;
    for (unsigned long long i = 0; i < blocks; i++) {
        block_idx = block_number(i, grid);
        all_state = BarrierState{dim.x, 0, 0};
        warp_states.assign(warps, BarrierState{});
        for (unsigned w = 0; w < warps; w++) {
            warp_states[w].live = lanes_of_warp(w, dim.x);
        }
        for (unsigned t = 0; t < dim.x; t++) {
            fibers[t]->t = t;
            prepare(*fibers[t]);
        }
        unsigned remaining = dim.x;
        while (remaining > 0) {
            bool progressed = false;
            for (unsigned t = 0; t < dim.x; t++) {
                Fiber& f = *fibers[t];
                if (f.done || blocked(f)) {
                    continue;
                }
                f.wait = RUNNING;
                thread_idx = Dim3{t, 0, 0};
                current = &f;
                kernels_host_switch(&scheduler_sp, f.sp);
                progressed = true;
                remaining -= f.done ? 1 : 0;
            }
            if (!progressed) {
                // every live thread waits at a barrier that can never complete
                std::fprintf(stderr, "kernel block (%u, %u): the threads wait at barriers that cannot complete\n", block_idx.x, block_idx.y);
                return 2;
            }
        }
    }
    return 0;
}

}  // namespace host

#endif
