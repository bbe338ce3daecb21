// Sparse attention with a sink for one query head (spec §7.6). Follows the official sparse_attn kernel
// (kernel.py), which runs an online softmax over blocks of gathered keys: per block it computes
// l = (q . kv) * scale in f32, P = exp(l - running_max) in f32, adds the unrounded P to the f32 running sum,
// casts P to bf16 for the P.V GEMM (f32 accumulation), and rescales the accumulator when the max grows; at the
// end it adds exp(sink - M) to the sum and divides the accumulator by it. This reference uses the final max M
// directly, so with round_probs_bf16 it rounds exp(l - M) rather than exp(l - block max): the kernel's rounding
// point differs by the factor exp(block max - M), so the two agree to bf16 rounding of P, not bit for bit.
// Tested in tests/kernels/attention_test.cpp against a double-precision softmax with the sink.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/number_formats.h"

namespace dsv4::cpu {

void sparse_attention_head(const float* q, const float* const* keys, int64_t count, int64_t d, float scale, float sink,
                           bool round_probs_bf16, float* out) {
    std::fill(out, out + d, 0.0f);
    if (count == 0) return;

    std::vector<float> logits(static_cast<size_t>(count));
    float max_logit = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < count; ++j) {
        float dot = 0.0f;
        for (int64_t i = 0; i < d; ++i) dot += q[i] * keys[j][i];
        logits[size_t(j)] = dot * scale;
        max_logit = std::max(max_logit, logits[size_t(j)]);
    }

    float denominator = 0.0f;  // unrounded probabilities, then the sink (a key with a zero value)
    for (int64_t j = 0; j < count; ++j) {
        float prob = std::exp(logits[size_t(j)] - max_logit);
        denominator += prob;
        float weight = round_probs_bf16 ? dsv4::round_bf16(prob) : prob;
        for (int64_t i = 0; i < d; ++i) out[i] += weight * keys[j][i];
    }
    denominator += std::exp(sink - max_logit);
    for (int64_t i = 0; i < d; ++i) out[i] /= denominator;
}

}  // namespace dsv4::cpu
