// Compressor state machine: see compressor.h.
#include "model/compressor.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ieee_exp.h"

namespace dsv4 {

void CompressorState::init(const CompressorWeights& w) {
    ratio = w.ratio;
    overlap = w.overlap;
    width = (overlap ? 2 : 1) * w.head_dim;
    const int64_t slots = (overlap ? 2 : 1) * ratio;
    kv.assign(static_cast<size_t>(slots * width), 0.0f);
    score.assign(static_cast<size_t>(slots * width), -std::numeric_limits<float>::infinity());
}

bool compressor_step(CompressorState& s, const CompressorWeights& w, int64_t position, const float* kv,
                     const float* score, float* entry) {
    const int64_t m = s.ratio, d = w.head_dim, width = s.width;
    const int64_t phase = position % m;
    const int64_t slot = (s.overlap ? m : 0) + phase;
    const float* ape = w.ape.data() + phase * width;
    for (int64_t c = 0; c < width; ++c) {
        s.kv[static_cast<size_t>(slot * width + c)] = kv[c];
        s.score[static_cast<size_t>(slot * width + c)] = score[c] + ape[c];
    }
    if (phase != m - 1) return false;

    // Pool: per channel, softmax over the slots of the gate scores, weighted sum of the projections.
    // Overlap: slots [0, m) contribute their first half (Za, Ca: the previous window), slots [m, 2m) their
    // second half (Zb, Cb: this window).
    const int64_t slots = s.overlap ? 2 * m : m;
    for (int64_t ch = 0; ch < d; ++ch) {
        auto column = [&](int64_t sl) { return sl * width + ((s.overlap && sl >= m) ? d + ch : ch); };
        float max_score = -std::numeric_limits<float>::infinity();
        for (int64_t sl = 0; sl < slots; ++sl) max_score = std::max(max_score, s.score[static_cast<size_t>(column(sl))]);
        float denom = 0.0f, acc = 0.0f;
        for (int64_t sl = 0; sl < slots; ++sl) {
            float z = s.score[static_cast<size_t>(column(sl))];
            // ieee_expf: the bits the GPU compressor computes too (glibc's expf and the device's differ by an ulp
            // now and then, and a pooled value near a bf16 boundary then rounds the other way).
            float p = std::isinf(z) ? 0.0f : ieee_expf(z - max_score);
            denom += p;
            acc += p * s.kv[static_cast<size_t>(column(sl))];
        }
        entry[ch] = acc / denom;
    }
    if (s.overlap)  // this window becomes the previous one
        for (int64_t i = 0; i < m * width; ++i) {
            s.kv[static_cast<size_t>(i)] = s.kv[static_cast<size_t>(m * width + i)];
            s.score[static_cast<size_t>(i)] = s.score[static_cast<size_t>(m * width + i)];
        }
    return true;
}

}  // namespace dsv4
