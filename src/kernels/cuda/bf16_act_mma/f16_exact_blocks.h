// Which 128-column blocks of bf16 activations bf16_act_mma may multiply as f16 with the same bits, and by what power
// of two they are scaled (host and device: the CPU tests check the rule, the kernel applies it).
//
// A bf16 value has 8 significant bits. It is exact in f16 when its exponent lies in [-17, 15]: f16's normals reach
// 2^15 (its largest, 65,504, exceeds bf16's largest below 2^16, 65,280), and its subnormals, steps of 2^-24, still
// hold 8 bits at 2^-17. So a block whose non-zero magnitudes have exponents in [e_max - 32, e_max] is exact in f16
// after a scale of 2^-s, s = e_max - 15. Its products with e4m3 weights are then the bf16 path's products times 2^-s,
// and, if the tensor cores sum f16 products as they sum bf16 ones (bench/hmma_f16_bf16_probe.cu measures that), the
// block's f32 sum times 2^s is the bf16 path's sum bit for bit, provided every product and partial sum is a normal
// f32 at both scales: exponents of at least -100 keep the products (e4m3's smallest magnitude is 2^-9) multiples of
// 2^-116, and at most 64 keep a block's sum below 2^82. Blocks outside that (a range of more than 33 binades, values
// below 2^-100 or bf16 subnormals, magnitudes of 2^65 and above, infinities, NaNs) keep the bf16 path.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DSV4_F16_BLOCK_FN __host__ __device__ __forceinline__
#else
#define DSV4_F16_BLOCK_FN inline
#endif

namespace dsv4::cuda::bf16_act_mma {

inline constexpr int kF16LowestExponent = -100;  // the smallest non-zero magnitude of an f16 block: >= 2^-100
inline constexpr int kF16HighestExponent = 64;   // the largest: < 2^65
inline constexpr int kF16WindowBinades = 33;     // exponents e_max - 32 .. e_max

struct F16Block {
    bool exact;  // the block may run as f16
    int shift;   // s: the f16 values are the block's values times 2^-s (0 for a block of zeros)
};

// The rule above, from the block's largest magnitude and its smallest non-zero magnitude, each as bf16 bits without
// the sign (0 .. 0x7FFF; largest == 0: every value is zero, and smallest_nonzero is not read).
DSV4_F16_BLOCK_FN F16Block f16_block(uint32_t largest, uint32_t smallest_nonzero) {
    if (largest == 0) return {true, 0};
    const int e_max = int(largest >> 7) - 127, e_min = int(smallest_nonzero >> 7) - 127;  // subnormals: -127
    const bool exact =
        e_max <= kF16HighestExponent && e_min >= kF16LowestExponent && e_min >= e_max - (kF16WindowBinades - 1);
    return {exact, e_max - 15};
}

}  // namespace dsv4::cuda::bf16_act_mma

#undef DSV4_F16_BLOCK_FN
