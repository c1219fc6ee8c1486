// Memory read bandwidth probe: every 8-byte word of a large array read once per pass, summed
// into 32 independent integer accumulators per thread (integer sums need no reassociation
// licence, so the compiler vectorises them with whatever the CPU has: SSE2, AVX2, AVX-512),
// with 1 and 2 threads, best of 6 passes. The decode roofline of a model is this bandwidth
// divided by its weight bytes.
//
// Build and run (any x86-64 CPU):
//   gcc -O3 -march=native -fopenmp tools/membw.c -o /tmp/membw && /tmp/membw [MiB, default 2048]
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
    const size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 2048;
    const size_t n = mib * 1024 * 1024 / sizeof(uint64_t) / 32 * 32;
    uint64_t* a = aligned_alloc(64, n * sizeof(uint64_t));
    if (a == NULL || n == 0) {
        fprintf(stderr, "cannot allocate %zu MiB\n", mib);
        return 2;
    }
    memset(a, 1, n * sizeof(uint64_t));  // touch every page before timing
    uint64_t sink = 0;
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        double best = 0.0;
        for (int pass = 0; pass < 6; pass++) {
            const double t0 = omp_get_wtime();
            uint64_t total = 0;
#pragma omp parallel reduction(+ : total)
            {
                uint64_t s[32] = {0};
#pragma omp for schedule(static)
                for (size_t i = 0; i < n; i += 32) {
                    for (int k = 0; k < 32; k++) {
                        s[k] += a[i + k];
                    }
                }
                for (int k = 0; k < 32; k++) {
                    total += s[k];
                }
            }
            const double gbs = (double)(n * sizeof(uint64_t)) / (omp_get_wtime() - t0) / 1e9;
            best = gbs > best ? gbs : best;
            sink += total;
        }
        printf("threads %d: best %.1f GB/s\n", threads, best);
    }
    return sink == 42 ? 1 : 0;  // the sums are used, so the reads cannot be dropped
}
