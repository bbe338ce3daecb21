// ieee_expf (core/ieee_exp.h) against std::exp: every f32 x with 2^-12 <= |x| and x in [-104, 89] (below 2^-12 every
// 97th), error measured against std::exp in double (the exact value to well below an f32 ulp), and special values. The
// device compiles the same header with the _rn intrinsics; that it then gives the same bits is checked through the
// compressor (tests/gpu/cuda_layer_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>

#include "core/ieee_exp.h"
#include "core/number_formats.h"
#include "core/thread_pool.h"

using namespace dsv4;

namespace {

// One f32 ulp at the exact value y > 0: 2^(e - 24) for y in [2^(e-1), 2^e), never below the subnormal spacing.
double f32_ulp(double y) {
    int e = 0;
    std::frexp(y, &e);
    return std::ldexp(1.0, std::max(e - 24, -149));
}

struct Tally {
    double worst_ulps = 0;
    float worst_x = 0;
    int64_t count = 0, not_nearest = 0, differ_from_libm = 0;
    void merge(const Tally& o) {
        if (o.worst_ulps > worst_ulps) worst_ulps = o.worst_ulps, worst_x = o.worst_x;
        count += o.count, not_nearest += o.not_nearest, differ_from_libm += o.differ_from_libm;
    }
};

// Every `stride`-th f32 with bit pattern in [first, last] (one sign, so the patterns are ordered by magnitude).
Tally sweep(ThreadPool& pool, uint32_t first, uint32_t last, uint32_t stride = 1) {
    Tally total;
    std::mutex m;
    auto run = [&](int64_t begin, int64_t end) {
        Tally t;
        for (int64_t i = begin; i < end; ++i) {
            const float x = bits_float(first + uint32_t(i) * stride);
            const float got = ieee_expf(x);
            const double exact = std::exp(double(x));
            const bool overflows = std::isinf(float(exact));  // rounds to +inf: only +inf is right
            const double ulps = overflows ? (std::isinf(got) ? 0.0 : std::numeric_limits<double>::infinity())
                                          : std::fabs(double(got) - exact) / f32_ulp(exact);
            if (!(ulps <= t.worst_ulps)) t.worst_ulps = ulps, t.worst_x = x;  // NaN becomes the worst
            ++t.count;
            t.not_nearest += got != float(exact);
            t.differ_from_libm += got != std::exp(x);
        }
        std::lock_guard<std::mutex> lock(m);
        total.merge(t);
    };
    pool.parallel_for((int64_t(last) - int64_t(first)) / stride + 1, run, 1 << 20);
    return total;
}

}  // namespace

TEST(IeeeExp, BelowOneUlpOnEveryFloatInRange) {
    ThreadPool pool;
    const float small = 0x1p-12f;
    Tally all = sweep(pool, float_bits(-small), float_bits(-104.0f));  // the pooling softmax's domain: x <= 0
    all.merge(sweep(pool, float_bits(small), float_bits(89.0f)));
    all.merge(sweep(pool, float_bits(-0.0f), float_bits(-small), 97));
    all.merge(sweep(pool, float_bits(0.0f), float_bits(small), 97));
    std::printf(
        "[ exp      ] %lld floats in [-104, 89]: worst %.4f ulps at x = %a; %lld (%.5f %%) not the nearest f32 of the "
        "exact value; %lld (%.5f %%) differ from std::exp(float)\n",
        (long long)all.count, all.worst_ulps, double(all.worst_x), (long long)all.not_nearest,
        100.0 * double(all.not_nearest) / double(all.count), (long long)all.differ_from_libm,
        100.0 * double(all.differ_from_libm) / double(all.count));
    EXPECT_LT(all.worst_ulps, 1.0) << "at x = " << all.worst_x;
}

TEST(IeeeExp, SpecialValues) {
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(ieee_expf(0.0f), 1.0f);
    EXPECT_EQ(ieee_expf(-0.0f), 1.0f);
    EXPECT_EQ(ieee_expf(-inf), 0.0f);
    EXPECT_EQ(ieee_expf(-1e30f), 0.0f);
    EXPECT_EQ(ieee_expf(inf), inf);
    EXPECT_EQ(ieee_expf(1e30f), inf);
    EXPECT_EQ(ieee_expf(88.8f), inf);  // above ln(FLT_MAX) = 88.7228
    EXPECT_TRUE(std::isnan(ieee_expf(std::numeric_limits<float>::quiet_NaN())));
    EXPECT_EQ(ieee_expf(std::nextafter(-0.0f, -1.0f)), 1.0f);
}
