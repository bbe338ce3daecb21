// The premise of the routed experts' scale fold (kernels/cuda/moe_gemm/moe_mma_common.cuh, e8m0_codes_foldable):
// the tensor cores' f16 sum of products, scaled by a power of two in one operand, is the unscaled sum times it. The
// NVFP4 fold-edge case that once differed by one bf16 ulp (docs/perf.md, "An NVFP4 fold-edge case where the warpgroup
// kernel and the warp-MMA kernel differ") suggests it holds only while no weight crosses between f16 normal and
// subnormal. This test measures it on the hardware: random e2m1 weights decoded at a base (2^-14, the kernels' decode,
// where the e2m1 0.5 is the subnormal 2^-15; or 2^-13, where every nonzero weight is normal), random e4m3 activations
// over their whole range (so that the sum's alignment truncates), one mma.sync m16n8k16 (or two chained, as an MXFP4
// block's 32 columns are) with the weights times 2^k against the same without, times 2^k. It prints how many of the
// sums differ for each k and asserts what the fold may rely on.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/common/e4m3_pairs.cuh"
#include "kernels/cuda/moe_gemm/moe_mma_common.cuh"

namespace dsv4 {
namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t x) {  // splitmix64's finalizer
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                         const float (&c)[4]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// Four random bytes as e4m3 codes without NaN (0x7F / 0xFF become 448's neighbours), as two f16 pairs, exactly.
__device__ __forceinline__ void e4m3_f16_pairs(uint32_t bytes, uint32_t& lo, uint32_t& hi) {
    for (int i = 0; i < 4; ++i)
        if (((bytes >> (8 * i)) & 0x7Fu) == 0x7Fu) bytes ^= 1u << (8 * i);
    cuda::f16x2_pairs(bytes, lo, hi);
}

struct Probe {
    int base_shift;  // weights e2m1 x 2^-14 x 2^base_shift (0: the kernels' decode; 1: every nonzero weight normal)
    int k;           // the fold's factor 2^k
    bool chained;    // two k16 MMAs into one accumulator (an MXFP4 block) rather than one (an NVFP4 half)
};

// Per warp and iteration: 128 sums (16 rows x 8 columns) of random weights and activations, promoted (the sum, times
// 2^k in f32) against folded (the weights times 2^k in f16, then the sum). mismatches: the sums that differ; first:
// the first differing case's seed and values, for the report.
__global__ void count_fold_mismatches(Probe probe, uint64_t seed, int iterations, unsigned long long* mismatches,
                                      unsigned long long* first) {
    const int lane = threadIdx.x % 32;
    const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const uint32_t factor = uint32_t(probe.k + 15) * 0x04000400u;  // f16 pair 2^k (k in [-14, 15])
    const uint32_t base = uint32_t(probe.base_shift + 15) * 0x04000400u;
    const float scale = __uint_as_float(uint32_t(probe.k + 127) << 23);
    unsigned long long bad = 0;
    for (int it = 0; it < iterations; ++it) {
        const uint64_t r = mix64(seed ^ mix64(warp * 0x100000001ull + uint64_t(it) * 64 + lane));
        const uint64_t r2 = mix64(r);
        uint32_t a[2][4], af[2][4], b[2][2];
        for (int m = 0; m < 2; ++m) {
            const uint32_t q = uint32_t(m ? r >> 32 : r);
            for (int i = 0; i < 4; ++i) {
                a[m][i] = cuda::moe_mma::mul_f16x2(cuda::moe_mma::e2m1_pair_scaled(q, i), base);
                af[m][i] = cuda::moe_mma::mul_f16x2(a[m][i], factor);
            }
            e4m3_f16_pairs(uint32_t(m ? r2 >> 32 : r2), b[m][0], b[m][1]);
        }
        const float zero[4] = {0.f, 0.f, 0.f, 0.f};
        float d[4], df[4];
        mma16816(d, a[0], b[0], zero);
        mma16816(df, af[0], b[0], zero);
        if (probe.chained) {
            float c[4] = {d[0], d[1], d[2], d[3]}, cf[4] = {df[0], df[1], df[2], df[3]};
            mma16816(d, a[1], b[1], c);
            mma16816(df, af[1], b[1], cf);
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
    constexpr int kBlocks = 264, kThreads = 256, kIterations = 64;
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

// The table of differing sums over k for one decode base, one and two MMAs; returns [chained][k - k_lo].
std::vector<std::vector<Count>> probe_table(int base_shift, int k_lo, int k_hi, uint64_t seed) {
    std::vector<std::vector<Count>> t(2);
    std::printf("[ probe    ] weights e2m1 x 2^%d, sums of 16 (one MMA) and 32 (two chained) products, %s\n",
                base_shift - 14, "folded x 2^k against promoted:");
    for (int k = k_lo; k <= k_hi; ++k) {
        for (int chained = 0; chained < 2; ++chained)
            t[chained].push_back(run_probe({base_shift, k, chained != 0}, seed));
        const Count &one = t[0].back(), &two = t[1].back();
        std::printf("[ probe    ]   k %3d: %9llu of %llu differ (one MMA), %9llu (two)\n", k, one.differ, one.sums,
                    two.differ);
        if (one.differ)
            std::printf("[ probe    ]     first: promoted 0x%08x, folded 0x%08x\n", one.promoted, one.folded);
    }
    return t;
}

// The kernels' decode (2^-14): the table, to be read against the fold's rule (e8m0_codes_foldable: factors 2^-9 ..
// 2^15). No assertion yet: this is what decides the rule.
TEST(TensorCoreSum, FoldTableAtTheKernelsDecode) {
    DSV4_REQUIRE_GPU();
    gpu_test::Rng rng;
    probe_table(0, -9, 15, (uint64_t(rng.engine()()) << 32) | rng.engine()());
}

// Every nonzero weight normal before and after (decode 2^-13, factors 1 .. 2^15): the unnormalized model of the
// tensor cores' sums (tools/fold_mismatch/tensor_core_model.py) says the fold is exact there.
TEST(TensorCoreSum, FoldIsExactWhileEveryWeightStaysNormal) {
    DSV4_REQUIRE_GPU();
    gpu_test::Rng rng;
    const auto t = probe_table(1, -4, 15, (uint64_t(rng.engine()()) << 32) | rng.engine()());
    for (int chained = 0; chained < 2; ++chained)
        for (int k = 0; k <= 15; ++k)
            EXPECT_EQ(t[chained][k + 4].differ, 0u) << "decode 2^-13, factor 2^" << k << (chained ? ", two MMAs" : "");
}

}  // namespace
}  // namespace dsv4
