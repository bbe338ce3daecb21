// The premise of the routed experts' scale fold (kernels/cuda/moe_gemm/scale_fold.h): the tensor cores' f16 sum of
// products, with one operand scaled by a power of two 2^k, is the unscaled sum times 2^k, for every k the kernels
// fold. It is not for every k (scale_fold.h says why), so this measures it on the hardware: random e2m1 weights at
// the kernels' decode (e2m1 x 2^-14, the 0.5 the subnormal 2^-15), random e4m3 activations over their whole range
// (so that any truncation shows), one mma.sync m16n8k16 (an NVFP4 half's 16 columns) or two chained into one
// accumulator (an MXFP4 block's 32), the weights times 2^k in f16 against the sum times 2^k in f32. It prints how
// many sums differ for each k from 2^-9 (the old lower edge, where an NVFP4 case once differed) to 2^15 and asserts
// none across the folded range.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "core/mix64.h"
#include "gpu_test_util.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/common/e4m3_pairs.cuh"
#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/moe_gemm/moe_mma_common.cuh"
#include "kernels/cuda/moe_gemm/scale_fold.h"

namespace dsv4 {
namespace {

// Four random bytes as e4m3 codes without NaN (0x7F / 0xFF become 448's neighbours), as two f16 pairs, exactly.
__device__ __forceinline__ void e4m3_f16_pairs(uint32_t bytes, uint32_t& lo, uint32_t& hi) {
    for (int i = 0; i < 4; ++i)
        if (((bytes >> (8 * i)) & 0x7Fu) == 0x7Fu) bytes ^= 1u << (8 * i);
    cuda::f16x2_pairs(bytes, lo, hi);
}

struct Probe {
    int k;         // the fold's factor 2^k
    bool chained;  // two k16 MMAs into one accumulator (an MXFP4 block) rather than one (an NVFP4 half)
};

// Per warp and iteration: 128 sums (16 rows x 8 columns) of random weights and activations, promoted (the sum, times
// 2^k in f32) against folded (the weights times 2^k in f16, then the sum). mismatches: the sums that differ; first:
// the first differing case's seed and values, for the report.
__global__ void count_fold_mismatches(Probe probe, uint64_t seed, int iterations, unsigned long long* mismatches,
                                      unsigned long long* first) {
    const int lane = threadIdx.x % 32;
    const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const uint32_t factor = uint32_t(probe.k + 15) * 0x04000400u;  // f16 pair 2^k (k in [-14, 15])
    const float scale = __uint_as_float(uint32_t(probe.k + 127) << 23);
    unsigned long long bad = 0;
    for (int it = 0; it < iterations; ++it) {
        const uint64_t r = mix64(seed ^ mix64(warp * 0x100000001ull + uint64_t(it) * 64 + lane));
        const uint64_t r2 = mix64(r);
        uint32_t a[2][4], af[2][4], b[2][2];
        for (int m = 0; m < 2; ++m) {
            const uint32_t q = uint32_t(m ? r >> 32 : r);
            for (int i = 0; i < 4; ++i) {
                a[m][i] = cuda::moe_mma::e2m1_pair_scaled(q, i);
                af[m][i] = cuda::moe_mma::mul_f16x2(a[m][i], factor);
            }
            e4m3_f16_pairs(uint32_t(m ? r2 >> 32 : r2), b[m][0], b[m][1]);
        }
        float d[4] = {0.f, 0.f, 0.f, 0.f}, df[4] = {0.f, 0.f, 0.f, 0.f};
        cuda::mma_16816_f16(d, a[0], b[0][0], b[0][1]);
        cuda::mma_16816_f16(df, af[0], b[0][0], b[0][1]);
        if (probe.chained) {  // the second MMA into the first's accumulator
            cuda::mma_16816_f16(d, a[1], b[1][0], b[1][1]);
            cuda::mma_16816_f16(df, af[1], b[1][0], b[1][1]);
        }
        for (int i = 0; i < 4; ++i) {
            if (__float_as_uint(__fmul_rn(d[i], scale)) == __float_as_uint(df[i])) continue;
            if (++bad == 1 && atomicCAS(first, 0ull, (uint64_t(warp) << 32 | uint32_t(it)) + 1) == 0)
                first[1] = (uint64_t(__float_as_uint(__fmul_rn(d[i], scale))) << 32) | __float_as_uint(df[i]);
        }
    }
    if (bad) atomicAdd(mismatches, bad);
}

struct Count {
    unsigned long long differ = 0, sums = 0;
    uint32_t promoted = 0, folded = 0;
};

Count run_probe(const Probe& probe, uint64_t seed) {
    constexpr int kBlocks = 264, kThreads = 256, kIterations = 1024;  // 277 M sums a k
    cuda::DeviceBuffer<unsigned long long> mismatches(1), first(2);
    DSV4_CUDA_CHECK(cudaMemset(mismatches.get(), 0, mismatches.bytes()));
    DSV4_CUDA_CHECK(cudaMemset(first.get(), 0, first.bytes()));
    count_fold_mismatches<<<kBlocks, kThreads>>>(probe, seed, kIterations, mismatches.get(), first.get());
    DSV4_CUDA_CHECK(cudaGetLastError());
    const auto m = gpu_test::to_host(mismatches), f = gpu_test::to_host(first);
    Count c;
    c.differ = m[0];
    c.sums = uint64_t(kBlocks) * kThreads / 32 * kIterations * 128;
    c.promoted = uint32_t(f[1] >> 32), c.folded = uint32_t(f[1]);
    return c;
}

// The table of differing sums over k at the kernels' decode, one and two MMAs: [chained][k - k_lo].
std::vector<std::vector<Count>> probe_table(int k_lo, int k_hi, uint64_t seed) {
    std::vector<std::vector<Count>> t(2);
    std::printf(
        "[ probe    ] weights e2m1 x 2^-14, sums of 16 (one MMA) and 32 (two chained) products, folded x 2^k "
        "against promoted:\n");
    for (int k = k_lo; k <= k_hi; ++k) {
        for (int chained = 0; chained < 2; ++chained) t[chained].push_back(run_probe({k, chained != 0}, seed));
        const Count &one = t[0].back(), &two = t[1].back();
        std::printf("[ probe    ]   k %3d: %9llu of %llu differ (one MMA), %9llu (two)%s\n", k, one.differ, one.sums,
                    two.differ, k >= cuda::moe_mma::kFoldLowestExponent ? "" : "   (not folded)");
        if (one.differ)
            std::printf("[ probe    ]     first: promoted 0x%08x, folded 0x%08x\n", one.promoted, one.folded);
    }
    return t;
}

TEST(TensorCoreSum, FoldIsExactOverTheFoldedFactors) {
    DSV4_REQUIRE_GPU();
    // The window was measured on sm_90, and only sm_90's warpgroup kernels fold; another generation's tensor cores
    // need their own measurement before a kernel of theirs folds.
    if (!cuda::device_has_wgmma()) GTEST_SKIP() << "the scale fold runs only in sm_90's warpgroup kernels";
    gpu_test::Rng rng;
    constexpr int kLo = -9, kHi = cuda::moe_mma::kFoldHighestExponent;
    const auto t = probe_table(kLo, kHi, (uint64_t(rng.engine()()) << 32) | rng.engine()());
    for (int chained = 0; chained < 2; ++chained)
        for (int k = cuda::moe_mma::kFoldLowestExponent; k <= kHi; ++k)
            EXPECT_EQ(t[chained][size_t(k - kLo)].differ, 0u)
                << "factor 2^" << k << (chained ? ", two MMAs" : ", one MMA");
}

}  // namespace
}  // namespace dsv4
