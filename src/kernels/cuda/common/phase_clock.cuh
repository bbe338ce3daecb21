// A latency-bound kernel's phases on the clock: where a kernel is given a phase-clock buffer (a params field, null in
// the model), thread 0 of each CTA records the GPU's global nanosecond timer and its SM's cycle counter at the
// kernel's marks, so a bench can say how long each CTA spent between two marks and how far apart the CTAs started.
// Ncu's stall samples are too few to place the time of a 10-20 us kernel of a few CTAs; this is the instrument the
// decode-kernel bench reads (dsv4_bench_decode_kernels phases). A null buffer costs one uniform branch a mark.
#pragma once

#include <cstdint>

namespace dsv4::cuda {

// Per CTA (linear block index), kPhaseMarks marks of two values each: the global timer (ns), then clock64.
inline constexpr int kPhaseMarks = 8;
inline constexpr int kPhaseValues = 2 * kPhaseMarks;

__device__ __forceinline__ void phase_mark(int64_t* clock, int mark) {
    if (clock == nullptr || threadIdx.x != 0) return;
    uint64_t ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    const int64_t cycles = clock64();
    const int64_t cta = int64_t(blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    clock[cta * kPhaseValues + 2 * mark] = int64_t(ns);
    clock[cta * kPhaseValues + 2 * mark + 1] = cycles;
}

}  // namespace dsv4::cuda
