// Quantization simulations (act_quant, fp4_act_quant, Hadamard) against vectors from
// tools/refgen/quant_vectors.py (a different route: float64 log2 scales, ml_dtypes float8_e4m3fn /
// float4_e2m1fn casts, an explicit Sylvester matrix) and hand-worked cases.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/number_formats.h"
#include "kernel_test_util.h"
#include "kernels/cpu/quant_sim.h"

using namespace dsv4;

namespace {

// The refgen input: x[i] = ((31 i^2 + 7919 i + 11) % 257 - 128) * 2^(e_block - 6), exact in f32 and bf16.
std::vector<float> formula_input(int64_t n, int64_t block, const std::vector<int>& exponents) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        int64_t v = (31 * i * i + 7919 * i + 11) % 257 - 128;
        x[size_t(i)] = std::ldexp(float(v), exponents[size_t(i / block)] - 6);
    }
    return x;
}

// Printed by tools/refgen/quant_vectors.py.
const std::vector<float> kFp8Expected = {
    -1.875f,
    1.875f,
    -1.375f,
    0.28125f,
    -1.125f,
    -1.5f,
    -0.9375f,
    0.625f,
    -0.9375f,
    -1.5f,
    -1.0f,
    0.34375f,
    -1.25f,
    -2.0f,
    -1.75f,
    -0.46875f,
    1.75f,
    0.9375f,
    1.0f,
    -1.875f,
    0.234375f,
    -0.75f,
    -0.75f,
    0.234375f,
    -1.875f,
    1.0f,
    0.9375f,
    1.75f,
    -0.46875f,
    -1.75f,
    -2.0f,
    -1.25f,
    0.34375f,
    -1.0f,
    -1.5f,
    -0.9375f,
    0.625f,
    -0.9375f,
    -1.5f,
    -1.125f,
    0.28125f,
    -1.375f,
    1.875f,
    -1.875f,
    -0.625f,
    1.625f,
    0.75f,
    0.875f,
    2.0f,
    0.03125f,
    -0.9375f,
    -1.0f,
    -0.015625f,
    1.875f,
    0.75f,
    0.625f,
    1.5f,
    -0.8125f,
    2.0f,
    1.625f,
    -1.75f,
    -0.046875f,
    -1.5f,
    -1.875f,
    -0.00134277344f,
    0.000137329102f,
    -0.00134277344f,
    -0.001953125f,
    -0.00158691406f,
    -0.000228881836f,
    -0.00183105469f,
    0.00134277344f,
    0.00158691406f,
    -0.00109863281f,
    0.0009765625f,
    0.000152587891f,
    0.000244140625f,
    0.00134277344f,
    -0.000610351562f,
    -0.00158691406f,
    -0.00158691406f,
    -0.000732421875f,
    0.00122070312f,
    4.57763672e-05f,
    -0.000122070312f,
    0.000671386719f,
    -0.00158691406f,
    0.00109863281f,
    0.000854492188f,
    0.00146484375f,
    -0.000854492188f,
    0.00170898438f,
    0.00122070312f,
    0.00170898438f,
    -0.000732421875f,
    0.00170898438f,
    0.00109863281f,
    0.00146484375f,
    -0.00122070312f,
    0.00109863281f,
    0.000366210938f,
    0.000610351562f,
    0.00170898438f,
    -3.05175781e-05f,
    -0.000854492188f,
    -0.000793457031f,
    0.000244140625f,
    -0.00170898438f,
    0.00122070312f,
    0.00122070312f,
    -0.00183105469f,
    1.52587891e-05f,
    -0.00109863281f,
    -0.00134277344f,
    -0.000549316406f,
    0.00122070312f,
    -9.15527344e-05f,
    -0.000427246094f,
    0.000213623047f,
    0.00183105469f,
    0.000366210938f,
    -7.62939453e-05f,
    0.000427246094f,
    0.00183105469f,
    0.000305175781f,
    -0.000305175781f,
    6.10351562e-05f,
    0.00134277344f,
    -2.98023224e-07f,
    -1.07288361e-06f,
    -8.34465027e-07f,
    2.98023224e-07f,
    -1.43051147e-06f,
    1.54972076e-06f,
    1.54972076e-06f,
    -1.1920929e-06f,
    7.15255737e-07f,
    -2.98023224e-07f,
    -3.57627869e-07f,
    4.76837158e-07f,
    -1.54972076e-06f,
    1.1920929e-06f,
    9.53674316e-07f,
    1.66893005e-06f,
    -4.76837158e-07f,
    -1.66893005e-06f,
    1.78813934e-06f,
    -1.43051147e-06f,
    7.4505806e-08f,
    -1.31130219e-06f,
    -1.78813934e-06f,
    -1.31130219e-06f,
    7.4505806e-08f,
    -1.43051147e-06f,
    1.78813934e-06f,
    -1.66893005e-06f,
    -4.76837158e-07f,
    1.66893005e-06f,
    9.53674316e-07f,
    1.1920929e-06f,
    -1.54972076e-06f,
    4.76837158e-07f,
    -3.57627869e-07f,
    -2.98023224e-07f,
    7.15255737e-07f,
    -1.1920929e-06f,
    1.54972076e-06f,
    1.54972076e-06f,
    -1.43051147e-06f,
    2.98023224e-07f,
    -8.34465027e-07f,
    -1.07288361e-06f,
    -2.98023224e-07f,
    1.31130219e-06f,
    5.96046448e-08f,
    -2.98023224e-07f,
    2.98023224e-07f,
    1.78813934e-06f,
    4.17232513e-07f,
    -7.4505806e-08f,
    3.57627869e-07f,
    1.78813934e-06f,
    2.08616257e-07f,
    -4.17232513e-07f,
    -8.94069672e-08f,
    1.1920929e-06f,
    -5.36441803e-07f,
    -1.31130219e-06f,
    -1.07288361e-06f,
    1.49011612e-08f,
    -1.78813934e-06f,
    1.1920929e-06f,
};
const std::vector<float> kFp4Expected = {
    -2.0f,
    2.0f,
    -1.5f,
    0.25f,
    -1.0f,
    -1.5f,
    -1.0f,
    0.5f,
    -1.0f,
    -1.5f,
    -1.0f,
    0.25f,
    -1.5f,
    -2.0f,
    -1.5f,
    -0.5f,
    2.0f,
    1.0f,
    1.0f,
    -2.0f,
    0.25f,
    -0.75f,
    -0.75f,
    0.25f,
    -2.0f,
    1.0f,
    1.0f,
    2.0f,
    -0.5f,
    -1.5f,
    -2.0f,
    -1.5f,
    2.0f,
    -8.0f,
    -12.0f,
    -8.0f,
    4.0f,
    -8.0f,
    -12.0f,
    -8.0f,
    2.0f,
    -12.0f,
    16.0f,
    -16.0f,
    -4.0f,
    12.0f,
    6.0f,
    8.0f,
    16.0f,
    0.0f,
    -8.0f,
    -8.0f,
    -0.0f,
    16.0f,
    6.0f,
    4.0f,
    12.0f,
    -6.0f,
    16.0f,
    12.0f,
    -12.0f,
    -0.0f,
    -12.0f,
    -16.0f,
    -0.046875f,
    0.0078125f,
    -0.046875f,
    -0.0625f,
    -0.046875f,
    -0.0078125f,
    -0.0625f,
    0.046875f,
    0.046875f,
    -0.03125f,
    0.03125f,
    0.0078125f,
    0.0078125f,
    0.046875f,
    -0.015625f,
    -0.046875f,
    -0.046875f,
    -0.0234375f,
    0.03125f,
    0.0f,
    -0.0f,
    0.0234375f,
    -0.046875f,
    0.03125f,
    0.0234375f,
    0.046875f,
    -0.03125f,
    0.046875f,
    0.03125f,
    0.0625f,
    -0.0234375f,
    0.046875f,
    1.17549435e-38f,
    1.76324153e-38f,
    -1.17549435e-38f,
    1.17549435e-38f,
    5.87747175e-39f,
    5.87747175e-39f,
    2.3509887e-38f,
    -0.0f,
    -1.17549435e-38f,
    -1.17549435e-38f,
    0.0f,
    -1.76324153e-38f,
    1.76324153e-38f,
    1.17549435e-38f,
    -2.3509887e-38f,
    0.0f,
    -1.17549435e-38f,
    -1.76324153e-38f,
    -5.87747175e-39f,
    1.17549435e-38f,
    -0.0f,
    -5.87747175e-39f,
    0.0f,
    2.3509887e-38f,
    5.87747175e-39f,
    -0.0f,
    5.87747175e-39f,
    2.3509887e-38f,
    5.87747175e-39f,
    -5.87747175e-39f,
    0.0f,
    1.76324153e-38f,
};
const std::vector<float> kHadamardExpected = {
    -0.930839777f, -1.58546603f,  0.378412604f,  1.22086406f,   0.756825209f,  1.73185921f,   -0.795495152f,
    -0.709868908f, -0.615956306f, -0.795495152f, 0.538616478f,  0.0f,          -1.76224267f,  -0.709868908f,
    2.83947563f,   -0.709868908f, -2.65165043f,  0.538616478f,  1.07723296f,   -0.709868908f, -1.39487863f,
    0.0f,          0.709868908f,  0.0f,          0.049718447f,  -2.12960672f,  0.0f,          0.709868908f,
    2.12960672f,   -2.83947563f,  0.709868908f,  0.0f,          -1.75395632f,  -1.76224267f,  0.0248592235f,
    0.0f,          1.46945632f,   -0.709868908f, 0.0f,          -2.12960672f,  -0.610432029f, 0.0f,
    -0.709868908f, -1.41973782f,  0.0f,          2.12960672f,   0.0f,          -2.12960672f,  -1.22086406f,
    -0.709868908f, -1.41973782f,  0.709868908f,  0.709868908f,  0.0f,          0.709868908f,  1.41973782f,
    0.0f,          -2.12960672f,  0.0f,          -0.709868908f, -2.12960672f,  0.0f,          0.709868908f,
    -1.41973782f,  -2.08817482f,  1.44459701f,   0.049718447f,  -0.709868908f, 2.22904372f,   0.0f,
    0.709868908f,  0.0f,          1.61861157f,   0.709868908f,  2.83947563f,   0.709868908f,  -0.709868908f,
    0.0f,          0.709868908f,  0.0f,          -0.312121361f, -1.41973782f,  -2.12960672f,  1.41973782f,
    -1.41973782f,  -0.709868908f, 0.0f,          -0.709868908f, -2.12960672f,  0.0f,          -0.709868908f,
    0.0f,          1.41973782f,   -0.709868908f, -2.83947563f,  -0.709868908f, -0.624242723f, -0.709868908f,
    -1.41973782f,  0.709868908f,  0.709868908f,  -2.83947563f,  0.709868908f,  -1.41973782f,  2.83947563f,
    0.709868908f,  0.0f,          -0.709868908f, 0.709868908f,  0.0f,          0.709868908f,  1.41973782f,
    0.709868908f,  -1.41973782f,  0.709868908f,  0.0f,          0.0f,          -0.709868908f, 0.0f,
    0.709868908f,  2.12960672f,   0.0f,          -0.709868908f, -1.41973782f,  0.0f,          -0.709868908f,
    0.0f,          0.709868908f,
};

void expect_bitwise(const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i], want[i]) << "element " << i;
        EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << "sign of element " << i;
    }
}

// The smallest power of two 2^m with 2^m >= a / qmax, decided exactly (qmax * 2^m is exact in double).
float exact_ceil_pow2_scale(float a, double qmax) {
    int m = -160;
    while (qmax * std::ldexp(1.0, m) < double(a)) ++m;
    return std::ldexp(1.0f, m);
}

}  // namespace

TEST(QuantSim, Fp8MatchesRefgen) {
    std::vector<float> x = formula_input(192, 64, {0, -10, -20});
    cpu::fp8_round_trip(x.data(), 192, 64);
    expect_bitwise(x, kFp8Expected);
}

TEST(QuantSim, Fp4MatchesRefgen) {
    std::vector<float> x = formula_input(128, 32, {0, 3, -5, -126});
    cpu::fp4_round_trip(x.data(), 128, 32);
    expect_bitwise(x, kFp4Expected);
}

TEST(QuantSim, Fp8ScaleAtExactPowerOfTwoTimes448) {
    // amax = 56 = 448 * 2^-3 gives s = 2^-3 exactly: 56 maps to 448 and 3 * 2^-12 to the subnormal 3 * 2^-9,
    // both exact. One bf16 step above (56.25) the scale doubles and 3 * 2^-12 becomes a tie at 1.5 * 2^-9,
    // rounded to even (2 * 2^-9), i.e. 2^-10.
    std::vector<float> x(64, 0.0f);
    x[0] = 56.0f;
    x[1] = 3.0f * std::ldexp(1.0f, -12);
    cpu::fp8_round_trip(x.data(), 64, 64);
    EXPECT_EQ(x[0], 56.0f);
    EXPECT_EQ(x[1], 3.0f * std::ldexp(1.0f, -12));

    std::vector<float> y(64, 0.0f);
    y[0] = 56.25f;
    y[1] = 3.0f * std::ldexp(1.0f, -12);
    cpu::fp8_round_trip(y.data(), 64, 64);
    EXPECT_EQ(y[0], 56.0f);  // 225 -> 224 (quantum 16 in [128, 256))
    EXPECT_EQ(y[1], std::ldexp(1.0f, -10));
}

TEST(QuantSim, Fp8TiesToEvenAndRange) {
    // amax 448 gives s = 1, so the values are rounded to e4m3 directly.
    std::vector<float> x = {448.0f, -448.0f, 1.0625f, 1.1875f, 17.0f, 19.0f, -1.0625f, 0.0f};
    cpu::fp8_round_trip(x.data(), 8, 8);
    EXPECT_EQ(x, (std::vector<float>{448.0f, -448.0f, 1.0f, 1.25f, 16.0f, 20.0f, -1.0f, 0.0f}));

    // amax 449: s = 2, x / s = 224.5 -> 224 -> 448; the largest magnitude always lands within +-448 * s.
    std::vector<float> y = {449.0f, -449.0f, 3.0f, 0.0f};
    cpu::fp8_round_trip(y.data(), 4, 4);
    EXPECT_EQ(y, (std::vector<float>{448.0f, -448.0f, 3.0f, 0.0f}));
}

TEST(QuantSim, Fp8AmaxFloor) {
    // amax 2^-20 < 1e-4: s = 2^ceil(log2(1e-4 / 448)) = 2^-22 instead of 2^-28. 2^-33 / 2^-22 = 2^-11 is below
    // half the smallest subnormal (2^-10) and flushes to 0; with s = 2^-28 it would have survived.
    std::vector<float> x = {std::ldexp(1.0f, -20), 3.0f * std::ldexp(1.0f, -25), std::ldexp(1.0f, -33), 0.0f};
    cpu::fp8_round_trip(x.data(), 4, 4);
    EXPECT_EQ(x[0], std::ldexp(1.0f, -20));
    EXPECT_EQ(x[1], 3.0f * std::ldexp(1.0f, -25));
    EXPECT_EQ(x[2], 0.0f);
}

TEST(QuantSim, AllZeroBlocksStayZero) {
    std::vector<float> x(64, 0.0f);
    cpu::fp8_round_trip(x.data(), 64, 64);
    for (float v : x) EXPECT_EQ(v, 0.0f);
    cpu::fp4_round_trip(x.data(), 64, 32);
    for (float v : x) EXPECT_EQ(v, 0.0f);
}

TEST(QuantSim, ReciprocalScaleEqualsExactCeiling) {
    // The kernel multiplies amax by f32(1/qmax) instead of dividing. Around every qmax * 2^k (where the two
    // could disagree) the power of two it picks is the exact ceiling.
    for (float qmax : {448.0f, 6.0f}) {
        for (int k = -100; k <= 100; ++k) {
            float center = std::ldexp(qmax, k);
            float a = center;
            for (int step = 0; step < 64; ++step) a = std::nextafter(a, 0.0f);
            for (int step = 0; step < 128; ++step, a = std::nextafter(a, INFINITY)) {
                float got = ue8m0_ceil_pow2(a * (1.0f / qmax));
                ASSERT_EQ(got, exact_ceil_pow2_scale(a, qmax)) << "qmax " << qmax << " amax " << a;
            }
        }
    }
}

TEST(QuantSim, Fp4TiesAndScale) {
    // amax 6 gives s = 1. Ties go to the even code: 0.25 -> 0, 0.75 -> 1, 2.5 -> 2, 5 -> 4, -1.25 -> -1.
    std::vector<float> x = {6.0f, 0.25f, 0.75f, 2.5f, 5.0f, -1.25f, 1.75f, -6.0f};
    cpu::fp4_round_trip(x.data(), 8, 8);
    EXPECT_EQ(x, (std::vector<float>{6.0f, 0.0f, 1.0f, 2.0f, 4.0f, -1.0f, 2.0f, -6.0f}));

    // amax 12 = 6 * 2: s = 2 exactly, so 1.0 -> 0.5 survives (s = 4 would make it a tie at 0.25 -> 0).
    std::vector<float> y = {12.0f, 1.0f, 0.0f, 0.0f};
    cpu::fp4_round_trip(y.data(), 4, 4);
    EXPECT_EQ(y, (std::vector<float>{12.0f, 1.0f, 0.0f, 0.0f}));
}

TEST(QuantSim, HadamardHandWorked) {
    // H_4 = [[1,1,1,1],[1,-1,1,-1],[1,1,-1,-1],[1,-1,-1,1]]; H_4 (1,2,3,4) / 2 = (5, -1, -2, 0).
    std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
    cpu::hadamard_transform(x.data(), 4);
    EXPECT_EQ(x, (std::vector<float>{5.0f, -1.0f, -2.0f, 0.0f}));
    // Column 1 of H_128 alternates in sign (Sylvester order), scaled by 128^-0.5.
    std::vector<float> e1(128, 0.0f);
    e1[1] = 1.0f;
    cpu::hadamard_transform(e1.data(), 128);
    const float s = float(1.0 / std::sqrt(128.0));
    for (int i = 0; i < 128; ++i) EXPECT_EQ(e1[size_t(i)], (i % 2 == 0) ? s : -s) << i;
}

TEST(QuantSim, HadamardMatchesExplicitMatrix) {
    // Seven butterfly levels, each rounding partial sums bounded by sum|x| (<= u of it per level), then the
    // multiply by the rounded scale (2 u): |error| <= (log2(n) + 2) u sum|x| / sqrt(n).
    std::vector<float> x = formula_input(128, 128, {0});
    double l1 = 0.0;
    for (float v : x) l1 += std::fabs(v);
    cpu::hadamard_transform(x.data(), 128);
    test::Worst worst("hadamard n=128 vs explicit matrix");
    const double tolerance = 9.0 * test::kF32Unit * l1 / std::sqrt(128.0);
    for (int i = 0; i < 128; ++i) worst.add(i, x[size_t(i)], kHadamardExpected[size_t(i)], tolerance);
    worst.expect_ok();
}

TEST(QuantSim, HadamardIsAnInvolution) {
    test::Rng rng;
    std::vector<float> x = rng.normal_bf16(128), y = x;
    cpu::hadamard_transform(y.data(), 128);
    cpu::hadamard_transform(y.data(), 128);
    double l1 = 0.0;
    for (float v : x) l1 += std::fabs(v);
    // The first pass errs by <= 9 u l1 / sqrt(n) per element, which the second (orthonormal) pass can gather
    // into <= 9 u l1 in one element; the second pass adds <= 9 u ||y||_1 / sqrt(n) <= 9 u l1.
    test::Worst worst("hadamard twice vs identity");
    const double tolerance = 18.0 * test::kF32Unit * l1;
    for (int i = 0; i < 128; ++i) worst.add(i, y[size_t(i)], x[size_t(i)], tolerance);
    worst.expect_ok();
}

TEST(QuantSim, RoundBf16RoundsEveryValue) {
    std::vector<float> x = {1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8), -3.0f};
    cpu::round_bf16(x.data(), 3);
    EXPECT_EQ(x, (std::vector<float>{1.0f, 1.0f + std::ldexp(1.0f, -6), -3.0f}));
}
