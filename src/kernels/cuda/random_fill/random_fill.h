// random_table_fill: bytes drawn through a 65,536-entry table by a counter-based hash, on the GPU:
// out[i] = table[(mix64(key + (i & ~3)) >> (16 * (i & 3))) & 0xFFFF], one hash per four bytes (core/mix64.h, the
// host's definition). This is the rule of dsv4 bench's random weights (model/bench_weights.h, table_index), so a
// GPU generates the routed experts it holds instead of receiving them from the host (CudaOptions::
// random_experts_seed). Tested in tests/gpu/random_fill_test.cpp: bitwise against BenchWeights::table_index.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

struct RandomTableFillParams {
    const uint8_t* table = nullptr;  // [65536] on the device
    uint64_t key = 0;                // the tensor's key
    uint8_t* out = nullptr;          // [count] on the device, any alignment
    int64_t count = 0;
};
void random_table_fill(const RandomTableFillParams& p, cudaStream_t stream);

namespace detail {
void launch_random_table_fill(const RandomTableFillParams& p, cudaStream_t stream);  // unchecked (random_fill.cu)
}

}  // namespace dsv4::cuda
