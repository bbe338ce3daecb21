// The rule that lets bf16_act_mma multiply a block of bf16 activations as f16 (kernels/cuda/bf16_act_mma/
// f16_exact_blocks.h), checked on the host against an independent test of f16 representability (frexp / ldexp on
// doubles): every block it accepts is exact in f16 after its scale, for every largest and smallest exponent; the
// window it allows is the widest that is (one binade more loses bits); and the bounds it keeps are where it says.
// The GPU side (the same bits as the bf16 path) is GroupedLinear.ExactlyScaledF16BlocksMatchTheBf16Path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/bf16_act_mma/f16_exact_blocks.h"

namespace {

using dsv4::cuda::bf16_act_mma::f16_block;
using dsv4::cuda::bf16_act_mma::F16Block;

// Whether v is an f16 value: zero, or |v| < 2^16 and a multiple of f16's step at its binade (2^(e - 10) for normals,
// 2^-24 below 2^-14).
bool is_f16(double v) {
    if (v == 0.0) return true;
    int e = 0;
    std::frexp(std::fabs(v), &e);  // |v| in [2^(e-1), 2^e)
    if (e - 1 > 15) return false;
    const double steps = std::ldexp(std::fabs(v), -(std::max(e - 1, -14) - 10));
    return steps == std::floor(steps);
}

// The bf16 magnitude bits (no sign) of exponent e (unbiased; normal) and 7-bit mantissa m, and its value.
uint32_t bf16_bits(int e, uint32_t m) {
    return uint32_t(e + 127) << 7 | m;
}
double bf16_value(uint32_t bits) {
    const int field = int(bits >> 7);
    const double mantissa = double(bits & 0x7F) / 128.0;
    return field == 0 ? std::ldexp(mantissa, -126) : std::ldexp(1.0 + mantissa, field - 127);
}

TEST(F16ExactBlocks, EveryAcceptedBlockIsExactInF16AfterItsScale) {
    int64_t accepted = 0;
    for (int e_max = -126; e_max <= 127; ++e_max)
        for (int e_min = -126; e_min <= e_max; ++e_min) {
            const F16Block b = f16_block(bf16_bits(e_max, 0x7F), bf16_bits(e_min, 0));
            // The rule reads exponents only: the largest and smallest mantissas give the same answer.
            const F16Block same = f16_block(bf16_bits(e_max, 0), bf16_bits(e_min, 0x7F));
            ASSERT_EQ(b.exact, same.exact) << e_max << " " << e_min;
            if (!b.exact) continue;
            ASSERT_EQ(b.shift, same.shift);
            ++accepted;
            // Every bf16 magnitude in the block's exponent range (every mantissa at the ends and at each binade).
            for (int e = e_min; e <= e_max; ++e)
                for (uint32_t m = 0; m < 128; ++m) {
                    const double scaled = std::ldexp(bf16_value(bf16_bits(e, m)), -b.shift);
                    ASSERT_TRUE(is_f16(scaled)) << "exponents " << e_min << ".." << e_max << ": 2^" << e << " x (1 + "
                                                << m << "/128) times 2^" << -b.shift << " is not an f16";
                }
        }
    // Each largest exponent in [-68, 64] accepts 33 smallest ones, fewer down to -100.
    EXPECT_GT(accepted, 133 * 33);
}

TEST(F16ExactBlocks, TheWindowIsTheWidestExactOne) {
    for (int e_max = -60; e_max <= 60; ++e_max) {
        EXPECT_TRUE(f16_block(bf16_bits(e_max, 0), bf16_bits(e_max - 32, 0)).exact) << e_max;
        const F16Block wider = f16_block(bf16_bits(e_max, 0), bf16_bits(e_max - 33, 1));
        EXPECT_FALSE(wider.exact) << e_max;
        // With that shift (or any that keeps the largest below 2^16) the 34th binade's odd mantissa is no f16.
        const double largest = bf16_value(bf16_bits(e_max, 0x7F)), low = bf16_value(bf16_bits(e_max - 33, 1));
        EXPECT_TRUE(is_f16(std::ldexp(largest, -wider.shift)));
        EXPECT_FALSE(is_f16(std::ldexp(low, -wider.shift)));
        EXPECT_FALSE(is_f16(std::ldexp(largest, -(wider.shift - 1))));  // one binade up: past f16's range
    }
}

TEST(F16ExactBlocks, BoundsZerosAndSpecialValues) {
    EXPECT_TRUE(f16_block(bf16_bits(-68, 5), bf16_bits(-100, 0)).exact);   // the smallest allowed exponent
    EXPECT_FALSE(f16_block(bf16_bits(-70, 5), bf16_bits(-101, 0)).exact);  // below it
    EXPECT_TRUE(f16_block(bf16_bits(64, 0x7F), bf16_bits(40, 0)).exact);   // the largest allowed
    EXPECT_FALSE(f16_block(bf16_bits(65, 0), bf16_bits(40, 0)).exact);     // above it
    EXPECT_FALSE(f16_block(bf16_bits(-120, 0), 0x0001).exact);             // a bf16 subnormal among the values
    EXPECT_FALSE(f16_block(0x7F80, bf16_bits(0, 0)).exact);                // infinity
    EXPECT_FALSE(f16_block(0x7FC1, bf16_bits(0, 0)).exact);                // NaN
    const F16Block zeros = f16_block(0, 0xFFFF);                           // every value zero
    EXPECT_TRUE(zeros.exact);
    EXPECT_EQ(zeros.shift, 0);
    EXPECT_EQ(f16_block(bf16_bits(3, 0), bf16_bits(-2, 0)).shift, 3 - 15);  // the largest lands in [2^15, 2^16)
}

}  // namespace
