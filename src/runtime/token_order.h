// The vocabulary ordered by logit for sampling and logprobs: most likely first, ties to the lower id (the order a
// stable sort of the ids by descending logit gives), made without comparison sorts of the whole vocabulary: at V4's
// 129,280 ids a sort by comparator costs ~15-25 ms per token, and the host samples every sequence of a batch each
// step. Tested in tests/runtime/token_order_test.cpp against std::stable_sort.
#pragma once

#include <cstdint>
#include <vector>

#include "core/vector_isa.h"

namespace dsv4 {

// One pass over a row of logits: whether it holds a NaN, and the first index of its largest value.
struct LogitScan {
    bool has_nan = false;
    int64_t argmax = 0;  // meaningless when has_nan
};
// Built for the baseline and AVX2 (core/vector_isa.h; AVX-512 takes the AVX2 build): this CPU's widest, or `isa`
// (one it runs).
LogitScan scan_logits(const float* logits, int64_t vocab);
LogitScan scan_logits(const float* logits, int64_t vocab, VectorIsa isa);

// The `count` most likely ids of a row (1 <= count <= vocab), most likely first, ties to the lower id; -0.0 and +0.0
// are the same value, as they are to a comparison. No NaN may be in the row (scan_logits first). `ids` gets exactly
// `count` entries; `scratch` is reused between calls to spare the allocations.
struct TokenOrderScratch {
    std::vector<uint64_t> keys, swap;  // (descending-logit key << 32) | id
};
void most_likely(const float* logits, int64_t vocab, int64_t count, std::vector<int32_t>& ids,
                 TokenOrderScratch& scratch);

// The candidates (the ids in `candidates`, ascending, or every id of the row when it is null) in the order above:
// at least as many of the first as it takes for their `weights` (any values >= 0), summed in double in that order,
// to reach `mass`; all of them when they never do. Only the tokens that can be among those are sorted: those with
// logits at least max_logit - k * logit_step for the first k (up to 4) whose weights reach the mass. With sampling
// weights e^((l - max) / T), logit_step = 8 T takes tokens down to a weight of e^-8 first.
void ordered_to_mass(const float* logits, const float* weights, int64_t vocab, const std::vector<int32_t>* candidates,
                     double mass, float max_logit, float logit_step, std::vector<int32_t>& ordered,
                     TokenOrderScratch& scratch);
// The same in the build for `isa` (one this CPU runs; AVX-512 takes the AVX2 build): ordered_to_mass above runs this
// CPU's widest.
void ordered_to_mass(const float* logits, const float* weights, int64_t vocab, const std::vector<int32_t>* candidates,
                     double mass, float max_logit, float logit_step, std::vector<int32_t>& ordered,
                     TokenOrderScratch& scratch, VectorIsa isa);

}  // namespace dsv4
