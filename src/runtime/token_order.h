// The vocabulary ordered by logit for sampling and logprobs: most likely first, ties to the lower id (the order a
// stable sort of the ids by descending logit gives), made without comparison sorts of the whole vocabulary. At V4's
// 129,280 ids a sort by comparator costs ~25 ms per token; the host samples every sequence of a batch each step,
// so at batch 256 that was seconds per step. Tested in tests/runtime/token_order_test.cpp against std::stable_sort.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4 {

// One pass over a row of logits: whether it holds a NaN, and the first index of its largest value.
struct LogitScan {
    bool has_nan = false;
    int64_t argmax = 0;  // meaningless when has_nan
};
LogitScan scan_logits(const float* logits, int64_t vocab);

// The `count` most likely ids of a row (1 <= count <= vocab), most likely first, ties to the lower id; -0.0 and +0.0
// are the same value, as they are to a comparison. No NaN may be in the row (scan_logits first). `ids` gets exactly
// `count` entries; `scratch` is reused between calls to spare the allocations.
struct TokenOrderScratch {
    std::vector<uint64_t> keys, swap;  // (descending-logit key << 32) | id
};
void most_likely(const float* logits, int64_t vocab, int64_t count, std::vector<int32_t>& ids,
                 TokenOrderScratch& scratch);

}  // namespace dsv4
