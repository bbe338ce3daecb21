// RoPE tables against tools/refgen/quant_vectors.py (spec §6 in float64, then rounded to f32), the YaRN
// correction range read off the table, and rotation properties (identity at 0, inverse, hand angles).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/rope.h"

using namespace dsv4;
using cpu::RopeTable;

namespace {

// Printed by tools/refgen/quant_vectors.py.
const std::vector<float> kPlain10000 = {
    1.0f,           0.749894202f,    0.562341332f,    0.421696514f,    0.316227764f,    0.237137377f,
    0.177827939f,   0.133352146f,    0.100000001f,    0.0749894232f,   0.0562341325f,   0.0421696492f,
    0.0316227749f,  0.0237137377f,   0.0177827943f,   0.013335214f,    0.00999999978f,  0.00749894232f,
    0.00562341325f, 0.00421696482f,  0.00316227763f,  0.00237137382f,  0.00177827943f,  0.00133352145f,
    0.00100000005f, 0.000749894185f, 0.000562341302f, 0.000421696517f, 0.000316227757f, 0.00023713737f,
    0.00017782794f, 0.00013335215f,
};
const std::vector<float> kYarnRelease = {
    // theta 160000, factor 16, orig 65536, beta 32/1: low 15, high 25
    1.0f,
    0.687656045f,
    0.472870797f,
    0.325172454f,
    0.223606795f,
    0.153764561f,
    0.105737127f,
    0.0727107748f,
    0.0500000007f,
    0.0343828015f,
    0.0236435402f,
    0.0162586235f,
    0.0111803403f,
    0.00768822804f,
    0.00528685609f,
    0.00363553851f,
    0.00226562493f,
    0.00139680132f,
    0.000849689706f,
    0.000508081983f,
    0.000296977785f,
    0.000168179991f,
    9.08678412e-05f,
    4.54442306e-05f,
    1.95312496e-05f,
    5.3723129e-06f,
    3.69430313e-06f,
    2.54040992e-06f,
    1.74692809e-06f,
    1.20128561e-06f,
    8.260713e-07f,
    5.68052883e-07f,
};
const std::vector<float> kYarnTiny = {
    // rope_dim 16, theta 160000, factor 4, orig 64, beta 32/1: low 0, high 2
    1.0f,
    0.139754251f,
    0.0125000002f,
    0.00279508508f,
    0.000624999986f,
    0.000139754251f,
    3.12500015e-05f,
    6.98771237e-06f,
};
const std::vector<float> kYarnDegenerate = {
    // rope_dim 64, theta 10000, factor 16, orig 6: low == high == 0
    1.0f,
    0.0468683876f,
    0.0351463333f,
    0.0263560321f,
    0.0197642352f,
    0.0148210861f,
    0.0111142462f,
    0.0083345091f,
    0.00625000009f,
    0.00468683895f,
    0.00351463328f,
    0.00263560307f,
    0.00197642343f,
    0.00148210861f,
    0.00111142464f,
    0.000833450875f,
    0.000624999986f,
    0.000468683895f,
    0.000351463328f,
    0.000263560301f,
    0.000197642352f,
    0.000148210864f,
    0.000111142464f,
    8.33450904e-05f,
    6.2500003e-05f,
    4.68683866e-05f,
    3.51463314e-05f,
    2.63560323e-05f,
    1.97642348e-05f,
    1.48210856e-05f,
    1.11142463e-05f,
    8.3345094e-06f,
};

RopeParams yarn(double theta, double factor, int64_t orig) {
    return RopeParams{
        .theta = theta,
        .yarn = YarnParams{
            .factor = factor, .original_max_position_embeddings = orig, .beta_fast = 32.0, .beta_slow = 1.0}};
}

// Tolerances of the f32 tables against the float64 formula (u = 2^-24). Plain: f32 pow (< 1 ulp <= 2 u) and the
// reciprocal (u): 3 u. YaRN adds the ramp quotient, two products and the sum (4 u), and the official
// 1 - (1 - ramp) round trip, which moves the ramp by up to 2^-25 absolute and so the result, which is at least
// w / factor, by up to factor * 2^-25 relative (8 u for factor 16).
double yarn_tolerance_units(double factor) {
    return 3.0 + 4.0 + factor / 2.0;
}

void expect_table(const RopeTable& table, const std::vector<float>& want, double units, const char* what) {
    ASSERT_EQ(table.inv_freq.size(), want.size());
    test::Worst worst(what);
    for (size_t i = 0; i < want.size(); ++i)
        worst.add(int64_t(i), table.inv_freq[i], want[i], units * test::kF32Unit * std::fabs(want[i]));
    worst.expect_ok();
}

}  // namespace

TEST(Rope, PlainTableMatchesRefgen) {
    expect_table(cpu::make_rope_table(64, RopeParams{.theta = 10000.0, .yarn = std::nullopt}), kPlain10000, 3.0,
                 "inv_freq theta 10000");
}

TEST(Rope, YarnReleaseTableMatchesRefgen) {
    expect_table(cpu::make_rope_table(64, yarn(160000.0, 16.0, 65536)), kYarnRelease, yarn_tolerance_units(16.0),
                 "inv_freq theta 160000 YaRN");
}

TEST(Rope, YarnTinyAndDegenerateTablesMatchRefgen) {
    expect_table(cpu::make_rope_table(16, yarn(160000.0, 4.0, 64)), kYarnTiny, yarn_tolerance_units(4.0),
                 "inv_freq tiny YaRN");
    expect_table(cpu::make_rope_table(64, yarn(10000.0, 16.0, 6)), kYarnDegenerate, yarn_tolerance_units(16.0),
                 "inv_freq degenerate YaRN");
}

TEST(Rope, YarnCorrectionRangeIs15To25ForTheRelease) {
    // ramp = 0 (frequency kept) up to index low = 15, ramp = 1 (frequency / 16) from index high = 25, strictly
    // in between for 16..24. Both end cases are exact in f32: w / 16 * 0 + w * 1 and w / 16 * 1 + w * 0.
    RopeTable plain = cpu::make_rope_table(64, RopeParams{.theta = 160000.0, .yarn = std::nullopt});
    RopeTable scaled = cpu::make_rope_table(64, yarn(160000.0, 16.0, 65536));
    for (size_t i = 0; i < 32; ++i) {
        float w = plain.inv_freq[i], got = scaled.inv_freq[i];
        if (i <= 15)
            EXPECT_EQ(got, w) << i;
        else if (i >= 25)
            EXPECT_EQ(got, w / 16.0f) << i;
        else
            EXPECT_TRUE(got < w && got > w / 16.0f) << i;
    }
}

TEST(Rope, PositionZeroIsIdentity) {
    test::Rng rng;
    RopeTable table = cpu::make_rope_table(64, yarn(160000.0, 16.0, 65536));
    std::vector<float> x = rng.normal_bf16(64), y = x;
    cpu::apply_rope(y.data(), table, 0);
    EXPECT_EQ(x, y);
    cpu::apply_rope(y.data(), table, 0, /*inverse=*/true);
    EXPECT_EQ(x, y);
}

TEST(Rope, RotatesInterleavedPairs) {
    // inv_freq[0] = 1 for every theta, so pair (0, 1) turns by `position` radians; (1, 0) -> (cos p, sin p).
    RopeTable table = cpu::make_rope_table(8, RopeParams{.theta = 10000.0, .yarn = std::nullopt});
    for (int64_t p : {1, 7, 1000}) {
        std::vector<float> x = {1.0f, 0.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        cpu::apply_rope(x.data(), table, p);
        double a = double(float(p));              // the angle is exact for inv_freq 1
        const double tol = 4.0 * test::kF32Unit;  // f32 cos/sin (<= 2 u) and the rounded products and sum
        EXPECT_NEAR(x[0], std::cos(a), tol) << p;
        EXPECT_NEAR(x[1], std::sin(a), tol) << p;
        // Pair (2, 3) = 0 + 1i turns by p * inv_freq[1]: (-sin, cos).
        double b = double(float(p) * table.inv_freq[1]);
        EXPECT_NEAR(x[2], -std::sin(b), tol) << p;
        EXPECT_NEAR(x[3], std::cos(b), tol) << p;
    }
}

TEST(Rope, MatchesDoubleRotationOfTheF32Angle) {
    test::Rng rng;
    RopeTable table = cpu::make_rope_table(64, yarn(160000.0, 16.0, 65536));
    test::Worst worst("apply_rope vs double rotation");
    for (int64_t p : {1, 2, 3, 127, 4096, 65535, 1000003}) {
        std::vector<float> x = rng.normal_bf16(64), y = x;
        cpu::apply_rope(y.data(), table, p);
        for (int64_t i = 0; i < 32; ++i) {
            double angle = double(float(p) * table.inv_freq[size_t(i)]);  // the reference's f32 angle
            double c = std::cos(angle), s = std::sin(angle), a = x[size_t(2 * i)], b = x[size_t(2 * i + 1)];
            // f32 cos/sin (< 1 ulp, <= 2 u absolute), two products and a difference: <= 4 u (|a| + |b|).
            double tol = 4.0 * test::kF32Unit * (std::fabs(a) + std::fabs(b));
            worst.add(p * 64 + 2 * i, y[size_t(2 * i)], a * c - b * s, tol);
            worst.add(p * 64 + 2 * i + 1, y[size_t(2 * i + 1)], a * s + b * c, tol);
        }
    }
    worst.expect_ok();
}

TEST(Rope, InverseUndoesRotation) {
    test::Rng rng;
    RopeTable table = cpu::make_rope_table(64, RopeParams{.theta = 10000.0, .yarn = std::nullopt});
    test::Worst worst("rope then inverse rope vs input");
    for (int64_t p : {1, 5, 128, 99999, 1048575}) {
        std::vector<float> x = rng.normal_bf16(64), y = x;
        cpu::apply_rope(y.data(), table, p);
        cpu::apply_rope(y.data(), table, p, /*inverse=*/true);
        for (int64_t i = 0; i < 32; ++i) {
            double a = x[size_t(2 * i)], b = x[size_t(2 * i + 1)];
            double tol = 8.0 * test::kF32Unit * (std::fabs(a) + std::fabs(b));  // two rotations of 4 u each
            worst.add(p * 64 + 2 * i, y[size_t(2 * i)], a, tol);
            worst.add(p * 64 + 2 * i + 1, y[size_t(2 * i + 1)], b, tol);
        }
    }
    worst.expect_ok();
}
