// quotient_rn (core/ieee_quotient.h) against IEEE division, bit for bit: every denominator significand in [1, 2) and
// in [2^37, 2^38), each with numerators of either sign and of magnitudes 2^-110 .. 2^110 (their significands hashed);
// denominators of either sign and every exponent, subnormals included; and the values it hands to the division (zeros,
// tiny numerators and quotients, infinities, NaN). The device compiles the same header with the _rn intrinsics, which
// round as the host's float operations do.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/ieee_quotient.h"
#include "core/mix64.h"
#include "core/number_formats.h"
#include "core/thread_pool.h"

using namespace dsv4;

namespace {

// The float with sign and exponent from the hash's high bits (exponent in [lo, hi]) and its low 23 bits as the
// significand.
float hashed_float(uint64_t h, int lo, int hi) {
    const int e = lo + int((h >> 40) % uint64_t(hi - lo + 1));
    const uint32_t sign = uint32_t(h >> 63) << 31;
    return bits_float(sign | uint32_t(127 + e) << 23 | uint32_t(h & 0x7FFFFF));
}

struct Count {
    std::atomic<int64_t> cases{0}, differ{0}, product_differs{0}, ranged{0}, ranged_differ{0};
};

// Numerators per denominator `d`: `per` hashed ones with exponents in [-110, 110].
void check(float d, uint64_t key, int per, Count& count) {
    const float inv = 1.0f / d;
    int64_t differ = 0, product_differs = 0, ranged = 0, ranged_differ = 0;
    for (int i = 0; i < per; ++i) {
        const float a = hashed_float(mix64(key * 64 + uint64_t(i)), -110, 110);
        const float want = a / d;
        differ += float_bits(quotient_rn(a, d, inv)) != float_bits(want);
        product_differs += float_bits(a * inv) != float_bits(want);
        if (quotients_exact(std::fabs(a), std::fabs(a), d)) {  // the range a row's check admits
            ++ranged;
            ranged_differ += float_bits(quotient_corrected(a, d, inv)) != float_bits(want);
        }
    }
    count.cases += per;
    count.differ += differ;
    count.product_differs += product_differs;
    count.ranged += ranged;
    count.ranged_differ += ranged_differ;
}

}  // namespace

TEST(IeeeQuotient, EqualsDivisionForEveryDenominatorSignificand) {
    ThreadPool pool;
    Count count;
    for (int exponent : {0, 37}) {
        pool.parallel_for(
            int64_t(1) << 23,
            [&](int64_t begin, int64_t end) {
                for (int64_t m = begin; m < end; ++m) {
                    const float d = bits_float(uint32_t(127 + exponent) << 23 | uint32_t(m));
                    check(d, uint64_t(m) * 2 + uint64_t(exponent), 4, count);
                }
            },
            1 << 16);
    }
    pool.parallel_for(
        int64_t(1) << 20,
        [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) {
                const uint64_t h = mix64(~uint64_t(i));
                const float d = h % 64 ? hashed_float(h, -126, 127) : bits_float(uint32_t(h >> 9) & 0x807FFFFFu);
                check(d, uint64_t(i) + (uint64_t(1) << 40), 8, count);
            }
        },
        1 << 14);
    std::printf(
        "[ quotient ] %lld pairs: %lld differ from a / d; the product a (1 / d) alone differs in %lld; %lld pairs in "
        "quotients_exact's range, of which quotient_corrected differs in %lld\n",
        (long long)count.cases.load(), (long long)count.differ.load(), (long long)count.product_differs.load(),
        (long long)count.ranged.load(), (long long)count.ranged_differ.load());
    EXPECT_EQ(count.differ.load(), 0);
    EXPECT_EQ(count.ranged_differ.load(), 0);
    EXPECT_GT(count.ranged.load(), count.cases.load() / 4);
    // The correction is what makes it exact: the product alone misses often.
    EXPECT_GT(count.product_differs.load(), count.cases.load() / 10);
}

TEST(IeeeQuotient, DividesWhereTheCorrectionWouldNotBeExact) {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    for (float d : {1.0f, 1.5f, -3.0f, 0x1.fffffep+0f, 1e30f, 0x1p-140f, 0x1p-120f, 0.0f, inf}) {
        const float inv = 1.0f / d;
        for (float a : {0.0f, -0.0f, 0x1p-149f, -0x1p-126f, 0x1.8p-101f, 0x1.234p-120f, -0x1.fffffep-100f, 1.0f,
                        -7.5f, 3e38f, -inf, inf}) {
            const float want = a / d, got = quotient_rn(a, d, inv);
            if (std::isnan(want))
                EXPECT_TRUE(std::isnan(got)) << a << " / " << d;
            else
                EXPECT_EQ(float_bits(got), float_bits(want)) << std::hexfloat << a << " / " << d;
        }
        EXPECT_TRUE(std::isnan(quotient_rn(nan, d, inv)));
    }
}
