// mix64 (core/mix64.h) is splitmix64's output function: mix64(k * golden) is the (k+1)-th output of splitmix64
// seeded with 0, whose first values are published with the generator (Vigna's splitmix64.c).
#include "core/mix64.h"

#include <gtest/gtest.h>

namespace dsv4 {
namespace {

TEST(Mix64, SplitMix64FromSeedZero) {
    constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
    EXPECT_EQ(mix64(0), 0xE220A8397B1DCDAFull);
    EXPECT_EQ(mix64(kGolden), 0x6E789E6AA1B965F4ull);
    EXPECT_EQ(mix64(2 * kGolden), 0x06C45D188009454Full);
    EXPECT_EQ(mix64(3 * kGolden), 0xF88BB8A8724C81ECull);
}

}  // namespace
}  // namespace dsv4
