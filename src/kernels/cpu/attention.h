// Sparse attention with a sink for one query head over a gathered key set (spec §7.6). K = V.
// Tested in tests/kernels/attention_test.cpp.
#pragma once

#include <cstdint>

namespace dsv4::cpu {

// l_j = (q . kv_j) * scale; o = sum_j exp(l_j - M) kv_j / (sum_j exp(l_j - M) + exp(sink - M)), M = max_j l_j.
// keys: `count` pointers to [d] vectors. With `round_probs_bf16`, exp(l_j - M) is rounded to bf16 before the
// P.V product (the official kernel's precision); the denominator stays f32. count == 0 gives zeros.
void sparse_attention_head(const float* q, const float* const* keys, int64_t count, int64_t d, float scale,
                           float sink, bool round_probs_bf16, float* out);

}  // namespace dsv4::cpu
