// Sampler: greedy picks the argmax; top-k 1 equals greedy; a fixed seed reproduces; the draw frequencies follow
// the tempered softmax; min-p drops the unlikely tail after temperature and before top-p; every draw equals the
// plain sampler's (plain_sampler.h: the definition in sampler.h computed by sorting everything) at V4's vocabulary
// size under every option, on rows with ties, and at uniforms on the edges of the block sums; bad parameters are
// errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "runtime/plain_sampler.h"
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

TEST(Sampler, MinPDropsTokensBelowTheFractionOfTheMostLikely) {
    // p = 0.5, 0.3, 0.15, 0.05; min_p 0.35 keeps p >= 0.175: tokens 0 and 1, drawn 0.625 : 0.375.
    const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
    Sampler s({.greedy = false, .temperature = 1.0f, .top_p = 1.0f, .top_k = 0, .min_p = 0.35f, .seed = 11});
    int counts[4] = {};
    const int n = 20000;
    for (int i = 0; i < n; ++i) ++counts[s.sample(logits.data(), 4)];
    EXPECT_EQ(counts[2] + counts[3], 0);
    EXPECT_NEAR(double(counts[0]) / n, 0.625, 0.015);
    // min_p 1 keeps only the most likely token.
    Sampler one({.greedy = false, .temperature = 1.0f, .top_p = 1.0f, .top_k = 0, .min_p = 1.0f, .seed = 4});
    for (int i = 0; i < 100; ++i) EXPECT_EQ(one.sample(logits.data(), 4), 0);
}

TEST(Sampler, MinPComesAfterTemperature) {
    // Relative probability of token 1: 0.2 at temperature 1 (below min_p 0.3), sqrt(0.2) = 0.447 at temperature 2.
    const std::vector<float> logits = {0.0f, std::log(0.2f)};
    Sampler cold({.greedy = false, .temperature = 1.0f, .top_p = 1.0f, .top_k = 0, .min_p = 0.3f, .seed = 9});
    Sampler hot({.greedy = false, .temperature = 2.0f, .top_p = 1.0f, .top_k = 0, .min_p = 0.3f, .seed = 9});
    int cold_ones = 0, hot_ones = 0;
    for (int i = 0; i < 2000; ++i) {
        cold_ones += cold.sample(logits.data(), 2);
        hot_ones += hot.sample(logits.data(), 2);
    }
    EXPECT_EQ(cold_ones, 0);
    EXPECT_NEAR(hot_ones / 2000.0, 0.447 / 1.447, 0.03);
}

TEST(Sampler, MinPComesBeforeTopP) {
    // p = 0.5, 0.3, 0.2. min_p 0.5 leaves 0.5, 0.3, renormalized 0.625, 0.375; top_p 0.6 then keeps token 0 only.
    // (top-p first would keep tokens 0 and 1: 0.5 < 0.6 <= 0.8.)
    const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
    Sampler s({.greedy = false, .temperature = 1.0f, .top_p = 0.6f, .top_k = 0, .min_p = 0.5f, .seed = 13});
    for (int i = 0; i < 500; ++i) EXPECT_EQ(s.sample(logits.data(), 3), 0);
    Sampler no_min_p({.greedy = false, .temperature = 1.0f, .top_p = 0.6f, .top_k = 0, .seed = 13});
    int ones = 0;
    for (int i = 0; i < 500; ++i) ones += no_min_p.sample(logits.data(), 3) == 1;
    EXPECT_GT(ones, 100);
}

TEST(Sampler, RejectsBadParametersAndNaN) {
    EXPECT_THROW(Sampler({.greedy = false, .temperature = 0.0f}), Error);
    EXPECT_THROW(Sampler({.greedy = false, .temperature = 1.0f, .top_p = 1.5f}), Error);
    EXPECT_THROW(Sampler({.greedy = false, .temperature = 1.0f, .min_p = -0.1f}), Error);
    EXPECT_THROW(Sampler({.greedy = false, .temperature = 1.0f, .min_p = 1.01f}), Error);
    EXPECT_THROW(Sampler({.greedy = false, .temperature = 1.0f, .min_p = NAN}), Error);
    std::vector<float> logits = {0.0f, NAN};
    Sampler s({});
    EXPECT_THROW(s.sample(logits.data(), 2), Error);
}

TEST(Sampler, DrawsEqualThePlainSampler) {
    // Rows of V4's vocabulary size shaped like a model's (a few likely tokens over a wide tail) and flat ones (the
    // nucleus then holds thousands of tokens), new ones every step; small vocabularies with many ties, of one block
    // and of several. Every path of sampler.cpp: all candidates or a list, top-k by selection and by a full order,
    // the nucleus from top-k's order, from a short list, from falling logit floors, and (top_p nearly 1) from all.
    const std::vector<SamplingParams> sets = {
        {.greedy = true},
        {.greedy = false, .temperature = 1.0f, .top_p = 1.0f, .top_k = 0, .seed = 1},
        {.greedy = false, .temperature = 0.6f, .top_p = 0.95f, .top_k = 0, .seed = 2},
        {.greedy = false, .temperature = 2.0f, .top_p = 0.9f, .top_k = 0, .seed = 3},
        {.greedy = false, .temperature = 1.0f, .top_p = 0.999999f, .top_k = 0, .seed = 4},
        {.greedy = false, .temperature = 1.0f, .top_p = 0.9f, .top_k = 50, .seed = 5},
        {.greedy = false, .temperature = 0.8f, .top_p = 1.0f, .top_k = 20000, .seed = 6},
        {.greedy = false, .temperature = 1.2f, .top_p = 0.7f, .top_k = 20000, .seed = 7},
        {.greedy = false, .temperature = 1.3f, .top_p = 0.98f, .top_k = 0, .min_p = 0.05f, .seed = 8},
        {.greedy = false, .temperature = 3.0f, .top_p = 1.0f, .top_k = 0, .min_p = 0.2f, .seed = 9},
        {.greedy = false, .temperature = 0.7f, .top_p = 1.0f, .top_k = 8, .min_p = 0.1f, .seed = 10},
    };
    std::mt19937_64 rng(2026);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const int64_t vocab : {int64_t(129280), int64_t(300), int64_t(3000)}) {
        const int steps = vocab > 100000 ? 12 : 100;
        for (size_t s = 0; s < sets.size(); ++s) {
            Sampler fast(sets[s]);
            test_reference::PlainSampler plain(sets[s]);
            std::vector<float> logits(static_cast<size_t>(vocab));
            for (int step = 0; step < steps; ++step) {
                for (float& x : logits) x = vocab > 100000 ? 2.5f * normal(rng) : std::round(2.0f * normal(rng));
                if (step % 2 == 0)
                    for (int hot = 0; hot < 6; ++hot) logits[rng() % uint64_t(vocab)] += 12.0f + float(hot);
                ASSERT_EQ(fast.sample(logits.data(), vocab), plain.sample(logits.data(), vocab))
                    << "vocab " << vocab << ", parameter set " << s << ", step " << step;
            }
        }
    }
}

TEST(Sampler, DrawsAtTheEdgesOfTheBlockSumsEqualThePlainSampler) {
    // sampler.cpp adds several blocks' chains side by side; each block's sum must still be its own additions in id
    // order, bit for bit. A block sum one ulp off moves the edge between two blocks, so the draw at a uniform that
    // puts u * total on (or one ulp either side of) the running sum at an edge tells them apart. V4's vocabulary,
    // all candidates and a min-p list (whose blocks hold other ids). The logits spread wide, so that the weights
    // span ~2^-100 .. 1 and their double sums round (of weights within 2^-29 of each other a block's sum is exact in
    // any order, and no order would show).
    const int64_t vocab = 129280;
    std::mt19937_64 rng(7);
    std::normal_distribution<float> normal(0.0f, 12.0f);
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (float& x : logits) x = normal(rng);
    for (const SamplingParams& params : {SamplingParams{.greedy = false, .temperature = 1.0f},
                                         SamplingParams{.greedy = false, .temperature = 1.0f, .min_p = 1e-25f}}) {
        // The definition's block sums over the candidates in id order (plain_sampler.h's loops).
        const float max_logit = *std::max_element(logits.begin(), logits.end());
        std::vector<float> w(static_cast<size_t>(vocab));
        sampling_weights(logits.data(), vocab, max_logit, params.temperature, w.data());
        std::vector<int32_t> by_id;
        for (int32_t i = 0; i < int32_t(vocab); ++i)
            if (w[size_t(i)] >= params.min_p) by_id.push_back(i);
        std::vector<double> edges;  // running sums of the block sums
        double total = 0.0;
        for (size_t begin = 0; begin < by_id.size(); begin += kSampleBlock) {
            double s = 0.0;
            for (size_t j = begin; j < std::min(by_id.size(), begin + kSampleBlock); ++j) s += w[size_t(by_id[j])];
            total += s;
            edges.push_back(total);
        }
        ASSERT_GT(edges.size(), 16u);
        Sampler fast(params);
        const test_reference::PlainSampler plain(params);
        // Every fifth edge and the last two (the plain sampler sorts the vocabulary each draw): a block sum off
        // moves every edge after it.
        int64_t checked = 0;
        for (size_t e = 0; e < edges.size(); ++e) {
            if (e % 5 != 0 && e + 2 < edges.size()) continue;
            const double at = edges[e] / total;
            for (double u : {std::nextafter(at, 0.0), at, std::nextafter(at, 1.0)}) {
                if (u >= 1.0) continue;
                ASSERT_EQ(fast.sample(logits.data(), vocab, u), plain.sample(logits.data(), vocab, u))
                    << "min_p " << params.min_p << ", u " << u;
                ++checked;
            }
        }
        EXPECT_GT(checked, int64_t(edges.size()) / 2);
    }
}
