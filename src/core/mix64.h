// mix64: splitmix64's finalizer, a bijective, well-mixed 64-bit hash; one definition for the host and for CUDA
// kernels, so a value drawn on either side is the same bits (dsv4 bench's weights: model/bench_weights.h on the
// host, kernels/cuda/random_fill on the device). Tested in tests/core/mix64_test.cpp (splitmix64's known outputs)
// and tests/gpu/random_fill_test.cpp (device = host).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DSV4_MIX64_FN __host__ __device__ __forceinline__
#else
#define DSV4_MIX64_FN inline
#endif

namespace dsv4 {

DSV4_MIX64_FN uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

}  // namespace dsv4

#undef DSV4_MIX64_FN
