// The CPU execution harness's launcher: the grid's blocks one after another, each block's
// threads as host threads, one launch at a time (a kernel's `__shared__` statics are then the
// running block's).
#include <mutex>
#include <thread>

#include "host.hpp"

namespace host {

thread_local Dim3 thread_idx;
thread_local Dim3 block_idx;
thread_local Block* block = nullptr;

int launch(Dim3 grid, Dim3 dim, const std::function<void()>& kernel) {
    static std::mutex one_launch_at_a_time;
    std::lock_guard<std::mutex> lock(one_launch_at_a_time);
    if (dim.x == 0 || dim.x > 1024 || dim.y != 1 || dim.z != 1 || grid.x == 0 || grid.y == 0 || grid.z == 0) {
        return 1;
    }
    for (unsigned z = 0; z < grid.z; z++) {
        for (unsigned y = 0; y < grid.y; y++) {
            for (unsigned x = 0; x < grid.x; x++) {
                Block b;
                b.dim = dim;
                b.all = std::make_unique<std::barrier<>>(dim.x);
                for (unsigned w = 0; w * 32 < dim.x; w++) {
                    const unsigned lanes = dim.x - w * 32 < 32 ? dim.x - w * 32 : 32;
                    b.warps.push_back(std::make_unique<std::barrier<>>(lanes));
                }
                b.slots.assign(dim.x, 0);
                std::vector<std::thread> threads;
                threads.reserve(dim.x);
                for (unsigned t = 0; t < dim.x; t++) {
                    threads.emplace_back([&b, &kernel, t, x, y, z] {
                        thread_idx = Dim3{t, 0, 0};
                        block_idx = Dim3{x, y, z};
                        block = &b;
                        kernel();
                        // a thread that returns no longer holds the others at a barrier
                        b.warps[t / 32]->arrive_and_drop();
                        b.all->arrive_and_drop();
                    });
                }
                for (auto& t : threads) {
                    t.join();
                }
            }
        }
    }
    return 0;
}

}  // namespace host
