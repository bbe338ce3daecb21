// The routed-expert kernels' e2m1 decode (kernels/cuda/moe_gemm/moe_mma_common.cuh): w_decode builds each MMA
// fragment from byte permutes of the nibbles' f16 high bytes; it must give exactly e2m1_pair_scaled's values, the
// definition the kernels' arithmetic is written against, for every one of the 2^32 words a lane can load.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>

#include "gpu_test_util.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/moe_gemm/moe_mma_common.cuh"

namespace dsv4 {
namespace {

using namespace cuda::moe_mma;

// Counts the words whose fragments differ; the first one found goes to first_bad.
__global__ void count_decode_mismatches(unsigned long long* mismatches, uint32_t* first_bad) {
    unsigned long long bad = 0;
    const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
    for (uint64_t x = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; x < (uint64_t(1) << 32); x += stride) {
        const uint32_t qa = uint32_t(x), qb = ~qa;  // both operands: the word and its complement
        uint32_t w0[4], w1[4];
        w_decode(qa, qb, w0, w1);
        const uint32_t want0[4] = {e2m1_pair_scaled(qa, 0), e2m1_pair_scaled(qb, 0), e2m1_pair_scaled(qa, 1),
                                   e2m1_pair_scaled(qb, 1)};
        const uint32_t want1[4] = {e2m1_pair_scaled(qa, 2), e2m1_pair_scaled(qb, 2), e2m1_pair_scaled(qa, 3),
                                   e2m1_pair_scaled(qb, 3)};
        bool same = true;
        for (int i = 0; i < 4; ++i) same = same && w0[i] == want0[i] && w1[i] == want1[i];
        if (!same) {
            ++bad;
            atomicMin(first_bad, qa);
        }
    }
    if (bad) atomicAdd(mismatches, bad);
}

TEST(E2m1Decode, FragmentsEqualThePairDefinitionForEveryWord) {
    DSV4_REQUIRE_GPU();
    cuda::DeviceBuffer<unsigned long long> mismatches(1);
    cuda::DeviceBuffer<uint32_t> first_bad(1);
    const unsigned long long zero = 0;
    const uint32_t none = 0xFFFFFFFFu;
    ASSERT_EQ(cudaMemcpy(mismatches.get(), &zero, sizeof(zero), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(first_bad.get(), &none, sizeof(none), cudaMemcpyHostToDevice), cudaSuccess);
    count_decode_mismatches<<<4096, 256>>>(mismatches.get(), first_bad.get());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    unsigned long long bad = 0;
    uint32_t first = 0;
    ASSERT_EQ(cudaMemcpy(&bad, mismatches.get(), sizeof(bad), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(&first, first_bad.get(), sizeof(first), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(bad, 0u) << "words whose fragments differ from e2m1_pair_scaled; the lowest: 0x" << std::hex << first;
    std::printf("[ bitwise  ] e2m1 decode: all 2^32 words (and their complements) equal e2m1_pair_scaled\n");
}

}  // namespace
}  // namespace dsv4
