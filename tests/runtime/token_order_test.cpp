// Token order against std::stable_sort of the ids by descending logit (the order the sampler was specified with):
// every prefix length on both paths (selection and radix sort), rows with many ties, both zeros, infinities,
// subnormals and extremes, V4's vocabulary size; and scan_logits against a plain argmax scan, NaN anywhere, in
// every vector build the machine runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "runtime/token_order.h"

using namespace dsv4;

namespace {

std::vector<int32_t> stable_order(const std::vector<float>& logits) {
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(),
                     [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
    return ids;
}

int64_t plain_argmax(const std::vector<float>& logits) {
    int64_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i)
        if (logits[i] > logits[size_t(best)]) best = int64_t(i);
    return best;
}

enum class Kind { kNormal, kTies, kSpecial };

std::vector<float> make_row(int64_t vocab, Kind kind, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 4.0f);
    std::vector<float> row(static_cast<size_t>(vocab));
    const float specials[] = {0.0f,
                              -0.0f,
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::denorm_min(),
                              -std::numeric_limits<float>::denorm_min(),
                              std::numeric_limits<float>::max(),
                              std::numeric_limits<float>::lowest(),
                              1.0f,
                              -1.0f};
    for (float& x : row) {
        x = normal(rng);
        if (kind == Kind::kTies) x = std::round(x * 2.0f) / 2.0f;  // a few dozen distinct values, ±0 among them
        if (kind == Kind::kSpecial && rng() % 4 == 0) x = specials[rng() % std::size(specials)];
    }
    return row;
}

}  // namespace

TEST(TokenOrder, EveryPrefixEqualsTheStableSort) {
    TokenOrderScratch scratch;
    std::vector<int32_t> ids;
    for (int64_t vocab : {1, 2, 3, 17, 100, 1000, 5000})
        for (Kind kind : {Kind::kNormal, Kind::kTies, Kind::kSpecial}) {
            const std::vector<float> row = make_row(vocab, kind, uint64_t(vocab) * 7 + uint64_t(kind));
            const std::vector<int32_t> want = stable_order(row);
            std::vector<int64_t> counts = {1, 2, vocab / 16, vocab / 16 + 1, vocab / 2, vocab - 1, vocab};
            for (int64_t count : counts) {
                if (count < 1 || count > vocab) continue;
                most_likely(row.data(), vocab, count, ids, scratch);
                ASSERT_EQ(int64_t(ids.size()), count);
                for (int64_t i = 0; i < count; ++i)
                    ASSERT_EQ(ids[size_t(i)], want[size_t(i)])
                        << "vocab " << vocab << " kind " << int(kind) << " count " << count << " at " << i;
            }
        }
}

TEST(TokenOrder, V4VocabularyBothPaths) {
    const int64_t vocab = 129280;
    TokenOrderScratch scratch;
    std::vector<int32_t> ids;
    for (Kind kind : {Kind::kNormal, Kind::kTies}) {
        const std::vector<float> row = make_row(vocab, kind, 99 + uint64_t(kind));
        const std::vector<int32_t> want = stable_order(row);
        for (int64_t count : {int64_t(1), int64_t(50), int64_t(1000), vocab / 16, vocab}) {
            most_likely(row.data(), vocab, count, ids, scratch);
            ASSERT_TRUE(std::equal(ids.begin(), ids.end(), want.begin())) << "kind " << int(kind) << " count " << count;
        }
    }
}

TEST(TokenOrder, OneValueEverywhereKeepsIdOrder) {
    const std::vector<float> row(3000, 2.5f);
    TokenOrderScratch scratch;
    std::vector<int32_t> ids;
    for (int64_t count : {1, 10, 3000}) {
        most_likely(row.data(), 3000, count, ids, scratch);
        for (int64_t i = 0; i < count; ++i) ASSERT_EQ(ids[size_t(i)], i);
    }
}

TEST(TokenOrder, ScanFindsTheFirstMaximumAndAnyNaN) {
    for (int64_t vocab : {1, 5, 2047, 2048, 2049, 129280})
        for (Kind kind : {Kind::kNormal, Kind::kTies, Kind::kSpecial}) {
            std::vector<float> row = make_row(vocab, kind, uint64_t(vocab) + 3 * uint64_t(kind));
            const LogitScan scan = scan_logits(row.data(), vocab);
            EXPECT_FALSE(scan.has_nan);
            EXPECT_EQ(scan.argmax, plain_argmax(row)) << "vocab " << vocab << " kind " << int(kind);
            for (int64_t at : {int64_t(0), vocab / 2, vocab - 1}) {
                const float kept = row[size_t(at)];
                row[size_t(at)] = std::numeric_limits<float>::quiet_NaN();
                EXPECT_TRUE(scan_logits(row.data(), vocab).has_nan) << "NaN at " << at << " of " << vocab;
                row[size_t(at)] = kept;
            }
        }
    // The same maximum in two blocks, and -0.0 before +0.0 as the maximum: the first index wins.
    std::vector<float> row(10000, -1.0f);
    row[9000] = 3.0f, row[100] = 3.0f;
    EXPECT_EQ(scan_logits(row.data(), 10000).argmax, 100);
    std::vector<float> zeros(5000, -1.0f);
    zeros[4000] = 0.0f, zeros[3000] = -0.0f;
    EXPECT_EQ(scan_logits(zeros.data(), 5000).argmax, 3000);
}

TEST(TokenOrder, ScanInEveryVectorBuild) {
    // Each build this CPU runs (core/vector_isa.h) against the plain scan: rows of every kind and length around the
    // block (2,048) and vector widths, a NaN of each encoding at each place of a vector and of a block's edges, and
    // all -inf.
    const float nans[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                          std::bit_cast<float>(0x7F800001u), std::bit_cast<float>(0xFFFFFFFFu)};
    for (VectorIsa isa : runnable_vector_isas()) {
        for (int64_t vocab : {1, 7, 8, 15, 16, 17, 31, 33, 2047, 2048, 2049, 4100, 129280})
            for (Kind kind : {Kind::kNormal, Kind::kTies, Kind::kSpecial}) {
                std::vector<float> row = make_row(vocab, kind, uint64_t(vocab) * 7 + uint64_t(kind));
                const LogitScan scan = scan_logits(row.data(), vocab, isa);
                ASSERT_FALSE(scan.has_nan);
                ASSERT_EQ(scan.argmax, plain_argmax(row)) << vector_isa_name(isa) << ", vocab " << vocab;
            }
        std::vector<float> row = make_row(4100, Kind::kNormal, 5);
        for (int64_t at = 0; at < 4100; at += (at < 64 || (at > 2000 && at < 2100)) ? 1 : 97)
            for (float nan : nans) {
                const float kept = row[size_t(at)];
                row[size_t(at)] = nan;
                ASSERT_TRUE(scan_logits(row.data(), 4100, isa).has_nan) << vector_isa_name(isa) << ", NaN at " << at;
                row[size_t(at)] = kept;
            }
        const std::vector<float> all_minus_inf(3000, -std::numeric_limits<float>::infinity());
        EXPECT_EQ(scan_logits(all_minus_inf.data(), 3000, isa).argmax, 0);
        std::vector<float> zeros(5000, -1.0f);
        zeros[4500] = 0.0f, zeros[2100] = 0.0f, zeros[2099] = -0.0f;
        EXPECT_EQ(scan_logits(zeros.data(), 5000, isa).argmax, 2099) << vector_isa_name(isa);
    }
}

TEST(TokenOrder, OrderedToMassIsAPrefixOfTheOrderReachingTheMass) {
    // Against the stable sort: the result is the first entries of the candidates' order, as many as reach the mass
    // (summed in the order) or more, and all of them when the mass is never reached; in each vector build.
    TokenOrderScratch scratch;
    std::vector<int32_t> ordered;
    for (int64_t vocab : {100, 5000, 129280})
        for (Kind kind : {Kind::kNormal, Kind::kTies}) {
            const std::vector<float> row = make_row(vocab, kind, uint64_t(vocab) * 5 + uint64_t(kind));
            std::vector<float> weights(row.size());
            for (size_t i = 0; i < row.size(); ++i) weights[i] = std::exp((row[i] - 20.0f) / 3.0f);
            std::vector<int32_t> every_third;
            for (int32_t i = 0; i < int32_t(vocab); i += 3) every_third.push_back(i);
            for (const std::vector<int32_t>* candidates : {static_cast<const std::vector<int32_t>*>(nullptr),
                                                           static_cast<const std::vector<int32_t>*>(&every_third)}) {
                std::vector<float> picked;
                if (candidates)
                    for (int32_t id : *candidates) picked.push_back(row[size_t(id)]);
                std::vector<int32_t> want = stable_order(candidates ? picked : row);
                if (candidates)
                    for (int32_t& j : want) j = (*candidates)[size_t(j)];
                double all = 0.0;
                for (int32_t id : want) all += weights[size_t(id)];
                const float max_logit = *std::max_element(row.begin(), row.end());
                for (double share : {0.0, 0.3, 0.9, 0.999, 1.5})
                    for (float step : {24.0f, 0.5f})  // floors that reach the mass at once, or after some steps
                        for (VectorIsa isa : runnable_vector_isas()) {
                            ordered_to_mass(row.data(), weights.data(), vocab, candidates, share * all, max_logit, step,
                                            ordered, scratch, isa);
                            ASSERT_LE(ordered.size(), want.size());
                            ASSERT_TRUE(std::equal(ordered.begin(), ordered.end(), want.begin()))
                                << "vocab " << vocab << " share " << share;
                            double reached = 0.0;
                            for (int32_t id : ordered) reached += weights[size_t(id)];
                            EXPECT_TRUE(reached >= share * all || ordered.size() == want.size())
                                << "vocab " << vocab << " share " << share << ": " << ordered.size() << " of "
                                << want.size() << ", " << vector_isa_name(isa);
                        }
            }
        }
}
