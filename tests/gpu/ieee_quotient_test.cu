// core/ieee_quotient.h on the device: quotient_rn, and quotient_corrected where quotients_exact admits it, give the
// bits of the device's IEEE division (__fdiv_rn) for every denominator significand in [1, 2) and in [2^37, 2^38), 32
// numerators each of either sign and magnitudes 2^-110 .. 2^110 (hashed as tests/core/ieee_quotient_test.cpp hashes
// them on the host), and for denominators of every exponent and sign, subnormals included. The sparse attention's
// epilogue divides through them (kernels/cuda/sparse_attention).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <tuple>

#include "core/ieee_quotient.h"
#include "core/mix64.h"
#include "gpu_test_util.h"
#include "kernels/cuda/common/device_buffer.h"

namespace dsv4 {
namespace {

__device__ float hashed_float(uint64_t h, int lo, int hi) {
    const int e = lo + int((h >> 40) % uint64_t(hi - lo + 1));
    const uint32_t sign = uint32_t(h >> 63) << 31;
    return __uint_as_float(sign | uint32_t(127 + e) << 23 | uint32_t(h & 0x7FFFFF));
}

// counts[0]: pairs; [1]: quotient_rn differs from a / d; [2]: pairs quotients_exact admits; [3]: of those,
// quotient_corrected differs.
__global__ void count_quotient_mismatches(unsigned long long* counts, int exponent_lo, int exponent_hi, bool any_d) {
    unsigned long long pairs = 0, differ = 0, ranged = 0, ranged_differ = 0;
    const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
    for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t(1) << 23); i += stride) {
        for (int e = exponent_lo; e <= exponent_hi; ++e) {
            float d = __uint_as_float(uint32_t(127 + e) << 23 | uint32_t(i));
            if (any_d) {  // every exponent, either sign, a subnormal one in 64
                const uint64_t h = mix64(~(i * 131 + uint64_t(e)));
                d = h % 64 ? hashed_float(h, -126, 127) : __uint_as_float(uint32_t(h >> 9) & 0x807FFFFFu);
            }
            const float inv = __fdiv_rn(1.0f, d);
            for (int j = 0; j < 32; ++j) {
                const float a = hashed_float(mix64((i * 64 + uint64_t(e + 128)) * 64 + uint64_t(j)), -110, 110);
                const float want = __fdiv_rn(a, d);
                ++pairs;
                differ += __float_as_uint(quotient_rn(a, d, inv)) != __float_as_uint(want);
                if (quotients_exact(fabsf(a), fabsf(a), d)) {
                    ++ranged;
                    ranged_differ += __float_as_uint(quotient_corrected(a, d, inv)) != __float_as_uint(want);
                }
            }
        }
    }
    atomicAdd(counts + 0, pairs);
    atomicAdd(counts + 1, differ);
    atomicAdd(counts + 2, ranged);
    atomicAdd(counts + 3, ranged_differ);
}

TEST(IeeeQuotientGpu, EqualsTheDevicesDivision) {
    DSV4_REQUIRE_GPU();
    cuda::DeviceBuffer<unsigned long long> counts(4);
    for (auto [lo, hi, any_d] : {std::tuple{0, 0, false}, std::tuple{37, 37, false}, std::tuple{0, 1, true}}) {
        const unsigned long long zeros[4] = {0, 0, 0, 0};
        ASSERT_EQ(cudaMemcpy(counts.get(), zeros, sizeof(zeros), cudaMemcpyHostToDevice), cudaSuccess);
        count_quotient_mismatches<<<2048, 256>>>(counts.get(), lo, hi, any_d);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        unsigned long long c[4];
        ASSERT_EQ(cudaMemcpy(c, counts.get(), sizeof(c), cudaMemcpyDeviceToHost), cudaSuccess);
        std::printf("[ quotient ] device, %s: %llu pairs, %llu differ from __fdiv_rn; %llu in quotients_exact's range, "
                    "%llu of them differ corrected\n",
                    any_d ? "every denominator exponent" : lo == 0 ? "d in [1, 2)" : "d in [2^37, 2^38)", c[0], c[1],
                    c[2], c[3]);
        EXPECT_EQ(c[1], 0u);
        EXPECT_EQ(c[3], 0u);
        // The corrected quotient must be exercised. The last case's denominators lie in quotients_exact's [1, 2^100]
        // a fifth of the time (101 of 254 exponents, one sign), their numerators in [2^-99 d, 2^99] two thirds of
        // that: ~13 % of its pairs.
        EXPECT_GT(c[2], c[0] / (any_d ? 16 : 4));
    }
}

}  // namespace
}  // namespace dsv4
