// The compressor state machine (spec §7.3, §7.8) against a direct evaluation of the pooling formula on the whole
// sequence: overlap (ratio 4, CSA) and non-overlap (ratio 16 and 128, HCA). Entries appear exactly when a
// window closes, at every position, so any chunking of the token stream gives the same entries.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "model/compressor.h"

using namespace dsv4;

namespace {

// e_w[ch] = sum over slots softmax(Z)[slot] * C[slot], straight from the spec: overlap windows take the
// previous window's first half and this window's second half; the window before 0 does not exist.
std::vector<double> direct_entry(const std::vector<float>& C, const std::vector<float>& Z, const std::vector<float>& ape,
                                 int64_t w, int64_t m, int64_t d, bool overlap) {
    const int64_t width = (overlap ? 2 : 1) * d;
    std::vector<double> e(static_cast<size_t>(d));
    for (int64_t ch = 0; ch < d; ++ch) {
        std::vector<std::pair<double, double>> slots;  // (score, value)
        if (overlap && w > 0)
            for (int64_t t = (w - 1) * m; t < w * m; ++t)
                slots.push_back({double(Z[static_cast<size_t>(t * width + ch)]) + ape[static_cast<size_t>((t % m) * width + ch)],
                                 C[static_cast<size_t>(t * width + ch)]});
        const int64_t off = overlap ? d : 0;
        for (int64_t t = w * m; t < (w + 1) * m; ++t)
            slots.push_back({double(Z[static_cast<size_t>(t * width + off + ch)]) + ape[static_cast<size_t>((t % m) * width + off + ch)],
                             C[static_cast<size_t>(t * width + off + ch)]});
        double mx = -1e300, den = 0, num = 0;
        for (auto& s : slots) mx = std::max(mx, s.first);
        for (auto& s : slots) {
            den += std::exp(s.first - mx);
            num += std::exp(s.first - mx) * s.second;
        }
        e[static_cast<size_t>(ch)] = num / den;
    }
    return e;
}

void check_ratio(int64_t m, int64_t d, int64_t tokens) {
    const bool overlap = m == 4;
    const int64_t width = (overlap ? 2 : 1) * d;
    std::mt19937 rng(unsigned(m * 1000 + d));
    std::normal_distribution<float> normal(0.0f, 1.5f);
    CompressorWeights w;
    w.ratio = m;
    w.head_dim = d;
    w.overlap = overlap;
    w.ape.resize(static_cast<size_t>(m * width));
    for (auto& a : w.ape) a = normal(rng);
    std::vector<float> C(static_cast<size_t>(tokens * width)), Z(static_cast<size_t>(tokens * width));
    for (auto& v : C) v = normal(rng);
    for (auto& v : Z) v = normal(rng);

    CompressorState state;
    state.init(w);
    std::vector<float> entry(static_cast<size_t>(d));
    int64_t produced = 0;
    for (int64_t t = 0; t < tokens; ++t) {
        bool closed = compressor_step(state, w, t, C.data() + t * width, Z.data() + t * width, entry.data());
        ASSERT_EQ(closed, (t + 1) % m == 0) << "m=" << m << " position " << t;
        if (!closed) continue;
        const int64_t index = t / m;
        ASSERT_EQ(index, produced);
        std::vector<double> ref = direct_entry(C, Z, w.ape, index, m, d, overlap);
        double worst = 0;
        for (int64_t ch = 0; ch < d; ++ch) worst = std::max(worst, std::fabs(entry[static_cast<size_t>(ch)] - ref[static_cast<size_t>(ch)]));
        EXPECT_LT(worst, 1e-5) << "m=" << m << " entry " << index;
        ++produced;
    }
    EXPECT_EQ(produced, tokens / m);
}

}  // namespace

TEST(Compressor, OverlappingCsaMatchesDirectPooling) { check_ratio(4, 24, 103); }
TEST(Compressor, HcaRatio16MatchesDirectPooling) { check_ratio(16, 20, 83); }
TEST(Compressor, HcaRatio128MatchesDirectPooling) { check_ratio(128, 8, 390); }
