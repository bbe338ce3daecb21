// Which routed-expert scale codes the warpgroup kernel's wide passes fold into their f16 weights (moe_mma_common.cuh:
// e8m0_codes_foldable, e4m3_codes_foldable), as one rule the kernels and the tests share (tests/gpu/moe_gemm_test.cpp
// names the codes of a mismatching item with it).
//
// The fold multiplies a 16- or 32-column block's decoded weights (e2m1 x 2^-14) by its scale's power of two 2^k in
// f16 and promotes the tensor cores' sum by the activation scale alone, where the promoted path multiplies the sum by
// both. The two agree bit for bit only where the tensor cores' f16 sum is invariant under that scaling, and it is not
// for every k: the tensor cores align the 16 products at a top exponent read from the operands' exponent fields (a
// subnormal f16 weight counts as 2^-14, its field) and drop product bits more than 26 below it. Folded down far
// enough, every weight is subnormal, the top stays at the field while the products shrink, and low bits fall out of
// the window. Worst case (e4m3 activations up to 448 with bits down to 2^-9, a 12 x 2^(k-15) weight beside a
// 2^(k-15) one): nothing drops for k >= -7. Measured on an H100 (TensorCoreSum, 17 M random sums a k, one MMA and
// two chained): 34 % of the sums differ at k = -9, 12 % at -8, none from -7 to 15; that window model of 26 bits gives
// the same 34 % and 12 % (tools/fold_mismatch/window_fit.py). The rule below keeps one octave inside that edge.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DSV4_SCALE_FOLD_FN __host__ __device__ constexpr
#else
#define DSV4_SCALE_FOLD_FN constexpr
#endif

namespace dsv4::cuda::moe_mma {

// The folded factors 2^k: k in [kFoldLowestExponent, kFoldHighestExponent]. The top keeps the weights (at most
// 6 x 2^-14 x 2^15 = 12) and the factor's f16 exponent field (k + 15 <= 30) in range.
constexpr int kFoldLowestExponent = -6;
constexpr int kFoldHighestExponent = 15;

// MXFP4: E8M0 code e has the factor 2^(e - 127) x 2^14 = 2^(e - 113).
constexpr uint32_t kFoldLowestE8m0 = uint32_t(113 + kFoldLowestExponent);    // 107
constexpr uint32_t kFoldHighestE8m0 = uint32_t(113 + kFoldHighestExponent);  // 128
DSV4_SCALE_FOLD_FN bool e8m0_code_foldable(uint32_t code) {
    return code >= kFoldLowestE8m0 && code <= kFoldHighestE8m0;
}

// NVFP4 folds where its scales are powers of two (NVIDIA's releases are a lossless cast of the MXFP4 experts): an e4m3
// code 0 EEEE 000 is 2^(E - 7), a global 2^G, so the factor is 2^(E - 7) x 2^G x 2^14 = 2^(E + G + 7), whose f16
// exponent field is E + bias with bias = G + 22. nvfp4_fold_bias_of_bits: the bias for the global's f32 bits, or -1
// where the global is not a positive normal power of two (nothing folds).
DSV4_SCALE_FOLD_FN int nvfp4_fold_bias_of_bits(uint32_t global_bits) {
    const uint32_t e = global_bits >> 23;
    return (global_bits & 0x7FFFFFu) == 0 && e >= 1 && e <= 254 ? int(e) - 127 + 22 : -1;
}
// The range of E (the e4m3 code's exponent field, 1..15: normal powers of two) whose factor folds under `bias`.
DSV4_SCALE_FOLD_FN int nvfp4_fold_lowest_field(int bias) {
    return 1 > 15 + kFoldLowestExponent - bias ? 1 : 15 + kFoldLowestExponent - bias;
}
DSV4_SCALE_FOLD_FN int nvfp4_fold_highest_field(int bias) {
    return 15 < 15 + kFoldHighestExponent - bias ? 15 : 15 + kFoldHighestExponent - bias;
}
DSV4_SCALE_FOLD_FN bool e4m3_code_foldable(uint32_t code, int bias) {
    const int e = int(code >> 3) & 15;
    return bias >= 0 && (code & 0x87u) == 0 && e >= nvfp4_fold_lowest_field(bias) &&
           e <= nvfp4_fold_highest_field(bias);
}

static_assert(e8m0_code_foldable(107) && !e8m0_code_foldable(106) && e8m0_code_foldable(128) &&
              !e8m0_code_foldable(129));
static_assert(nvfp4_fold_bias_of_bits(0x37000000u) == 5);  // global 2^-17: code 0x20 (E 4) is 2^-6, the lowest factor
static_assert(e4m3_code_foldable(0x20, 5) && !e4m3_code_foldable(0x18, 5) && e4m3_code_foldable(0x78, 5));

}  // namespace dsv4::cuda::moe_mma
