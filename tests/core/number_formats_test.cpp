// Number formats against values worked out by hand from the format definitions (spec §11.3).
#include <gtest/gtest.h>

#include <cmath>

#include "core/number_formats.h"

using namespace dsv4;

TEST(Bf16, RoundsToNearestEven) {
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
    // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (mantissa 0) -> 1.0
    EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
    // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even) -> 1 + 2^-6
    EXPECT_EQ(round_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
    EXPECT_EQ(round_bf16(-2.5f), -2.5f);
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(F16, DecodesNormalSubnormalAndSpecial) {
    EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
    EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
    EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
    EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
    EXPECT_TRUE(std::isinf(f16_to_f32(0x7C00)));
}

TEST(E4M3, DecodesEveryClass) {
    EXPECT_EQ(e4m3_to_f32(0x00), 0.0f);
    EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);              // e=7, m=0
    EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);            // e=15, m=6: 1.75 * 2^8
    EXPECT_EQ(e4m3_to_f32(0xFE), -448.0f);
    EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
    EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
    EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7F)));
    EXPECT_TRUE(std::isnan(e4m3_to_f32(0xFF)));
}

TEST(E4M3, EncodeRoundTripsEveryFiniteCode) {
    for (int b = 0; b < 256; ++b) {
        float v = e4m3_to_f32(uint8_t(b));
        if (std::isnan(v)) continue;
        if (b == 0x80) continue;  // -0 encodes as 0x80 too, checked below
        EXPECT_EQ(f32_to_e4m3(v), b) << "code " << b;
    }
    EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
}

TEST(E4M3, RoundsTiesToEvenAndSaturates) {
    // Between 1.0 (m=0) and 1.125 (m=1), the midpoint 1.0625 goes to 1.0; 1.1875 goes to 1.25 (m=2).
    EXPECT_EQ(round_e4m3(1.0625f), 1.0f);
    EXPECT_EQ(round_e4m3(1.1875f), 1.25f);
    EXPECT_EQ(round_e4m3(1.07f), 1.125f);
    EXPECT_EQ(round_e4m3(500.0f), 448.0f);
    EXPECT_EQ(round_e4m3(-1e9f), -448.0f);
    // Subnormal quantum 2^-9: 1.5 * 2^-9 is a tie between 1 and 2 quanta -> 2 (even).
    EXPECT_EQ(round_e4m3(1.5f * std::ldexp(1.0f, -9)), std::ldexp(1.0f, -8));
}

TEST(E8M0, DecodesPowersOfTwo) {
    EXPECT_EQ(e8m0_to_f32(127), 1.0f);
    EXPECT_EQ(e8m0_to_f32(120), std::ldexp(1.0f, -7));
    EXPECT_EQ(e8m0_to_f32(130), 8.0f);
    EXPECT_TRUE(std::isnan(e8m0_to_f32(0xFF)));
}

TEST(Ue8m0, CeilPow2ByExponentBits) {
    EXPECT_EQ(ue8m0_ceil_pow2(1.0f), 1.0f);      // exact power of two stays
    EXPECT_EQ(ue8m0_ceil_pow2(1.01f), 2.0f);
    EXPECT_EQ(ue8m0_ceil_pow2(0.75f), 1.0f);
    EXPECT_EQ(ue8m0_ceil_pow2(0.5f), 0.5f);
    EXPECT_EQ(ue8m0_ceil_pow2(3.0f / 448.0f), std::ldexp(1.0f, -7));  // 0.0067 -> 2^-7 = 0.0078
}

TEST(E2M1, DecodesAllNibbles) {
    const float expected[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int n = 0; n < 16; ++n) {
        EXPECT_EQ(e2m1_to_f32(uint8_t(n)), expected[n]) << n;
        EXPECT_EQ(std::signbit(e2m1_to_f32(uint8_t(n))), n >= 8) << n;
    }
}

TEST(E2M1, RoundsTiesToEvenAndSaturates) {
    EXPECT_EQ(round_e2m1(0.25f), 0.0f);   // tie 0 | 0.5 -> 0 (even)
    EXPECT_EQ(round_e2m1(0.75f), 1.0f);   // tie 0.5 | 1 -> 1
    EXPECT_EQ(round_e2m1(1.25f), 1.0f);   // tie 1 | 1.5 -> 1
    EXPECT_EQ(round_e2m1(1.75f), 2.0f);   // tie 1.5 | 2 -> 2
    EXPECT_EQ(round_e2m1(2.5f), 2.0f);    // tie 2 | 3 -> 2
    EXPECT_EQ(round_e2m1(3.5f), 4.0f);    // tie 3 | 4 -> 4
    EXPECT_EQ(round_e2m1(5.0f), 4.0f);    // tie 4 | 6 -> 4
    EXPECT_EQ(round_e2m1(5.1f), 6.0f);
    EXPECT_EQ(round_e2m1(100.0f), 6.0f);
    EXPECT_EQ(round_e2m1(-2.9f), -3.0f);
    EXPECT_EQ(f32_to_e2m1(-3.0f), 0xD);
    EXPECT_EQ(f32_to_e2m1(6.0f), 0x7);
}
