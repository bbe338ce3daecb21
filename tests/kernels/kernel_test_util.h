// Helpers shared by the CPU kernel tests: a seeded generator that is fresh every run (the seed is printed so a
// failure can be replayed with DSV4_TEST_SEED), and a tracker of the worst element of a comparison.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/number_formats.h"

namespace dsv4::test {

inline constexpr double kF32Unit = 0x1p-24;  // unit roundoff of f32 (half an ulp at 1)
inline constexpr double kBf16Unit = 0x1p-9;  // unit roundoff of bf16

class Rng {
  public:
    Rng() {
        const char* env = std::getenv("DSV4_TEST_SEED");
        seed_ = env ? uint32_t(std::strtoul(env, nullptr, 10)) : std::random_device{}();
        gen_.seed(seed_);
        std::printf("[ seed     ] DSV4_TEST_SEED=%u\n", seed_);
    }
    float normal(float stddev = 1.0f) { return std::normal_distribution<float>(0.0f, stddev)(gen_); }
    float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
    // Normal values rounded to bf16, as activations arrive in the model numerics.
    std::vector<float> normal_bf16(int64_t n, float stddev = 1.0f) {
        std::vector<float> v(static_cast<size_t>(n));
        for (float& x : v) x = round_bf16(normal(stddev));
        return v;
    }
    std::mt19937& engine() { return gen_; }

  private:
    uint32_t seed_ = 0;
    std::mt19937 gen_;
};

// The worst |got - want| / tolerance over a comparison; NaN or infinity in `got` counts as a failure.
class Worst {
  public:
    explicit Worst(std::string what) : what_(std::move(what)) {}
    void add(int64_t index, double got, double want, double tolerance) {
        double error = std::fabs(got - want);
        double ratio = std::isfinite(got) ? error / tolerance : std::numeric_limits<double>::infinity();
        if (index_ < 0 || !(ratio <= ratio_)) {  // NaN ratios replace anything and never pass
            ratio_ = ratio;
            index_ = index;
            got_ = got;
            want_ = want;
            tol_ = tolerance;
        }
    }
    bool ok() const { return ratio_ <= 1.0; }
    std::string describe() const {
        char buf[256];
        std::snprintf(buf, sizeof buf, "%s: worst element %lld got %.9g want %.9g |err| %.3g tol %.3g (%.3f of tol)",
                      what_.c_str(), (long long)index_, got_, want_, std::fabs(got_ - want_), tol_, ratio_);
        return buf;
    }
    // Prints the worst element (tests report it whether they pass or not) and checks it.
    void expect_ok() const {
        std::printf("[ worst    ] %s\n", describe().c_str());
        EXPECT_TRUE(ok()) << describe();
    }

  private:
    std::string what_;
    double ratio_ = 0.0, got_ = 0.0, want_ = 0.0, tol_ = 0.0;
    int64_t index_ = -1;
};

}  // namespace dsv4::test
