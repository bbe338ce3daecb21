// Sampler: greedy picks the argmax; top-k 1 equals greedy; a fixed seed reproduces; the draw frequencies follow
// the tempered softmax; bad parameters are errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "runtime/sampler.h"

using namespace dsv4;

TEST(Sampler, GreedyIsArgmaxWithLowestTie) {
    std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f};
    Sampler s({});
    EXPECT_EQ(s.sample(logits.data(), 4), 1);
}

TEST(Sampler, TopK1IsGreedyAndSeedReproduces) {
    std::vector<float> logits = {0.5f, 0.2f, 2.0f, 1.9f, -3.0f};
    Sampler k1({.greedy = false, .temperature = 1.0f, .top_p = 1.0f, .top_k = 1, .seed = 7});
    for (int i = 0; i < 20; ++i) EXPECT_EQ(k1.sample(logits.data(), 5), 2);
    Sampler a({.greedy = false, .temperature = 0.8f, .top_p = 0.9f, .top_k = 0, .seed = 42});
    Sampler b({.greedy = false, .temperature = 0.8f, .top_p = 0.9f, .top_k = 0, .seed = 42});
    for (int i = 0; i < 50; ++i) EXPECT_EQ(a.sample(logits.data(), 5), b.sample(logits.data(), 5));
}

TEST(Sampler, FrequenciesFollowTemperedSoftmax) {
    std::vector<float> logits = {0.0f, std::log(3.0f)};  // probabilities 1/4, 3/4 at temperature 1
    Sampler s({.greedy = false, .temperature = 1.0f, .top_p = 1.0f, .top_k = 0, .seed = 1});
    int ones = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) ones += s.sample(logits.data(), 2);
    EXPECT_NEAR(double(ones) / n, 0.75, 0.015);
}

TEST(Sampler, TopPKeepsTheNucleusOnly) {
    std::vector<float> logits = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
    Sampler s({.greedy = false, .temperature = 1.0f, .top_p = 0.5f, .top_k = 0, .seed = 3});
    for (int i = 0; i < 200; ++i) EXPECT_EQ(s.sample(logits.data(), 3), 0);
}

TEST(Sampler, RejectsBadParametersAndNaN) {
    EXPECT_THROW(Sampler({.greedy = false, .temperature = 0.0f}), Error);
    EXPECT_THROW(Sampler({.greedy = false, .temperature = 1.0f, .top_p = 1.5f}), Error);
    std::vector<float> logits = {0.0f, NAN};
    Sampler s({});
    EXPECT_THROW(s.sample(logits.data(), 2), Error);
}
