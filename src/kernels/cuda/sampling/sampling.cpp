// Host side of sample_rows (sampling.h): the contract checks, how many CTAs a row gets, the scratch's size; the
// kernels are in sampling.cu.
#include "kernels/cuda/sampling/sampling.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4::cuda {

int draw_segments(int64_t draws_count) {
    // About two CTAs per SM of an H100 / H200 (132 SMs) over all rows, at most kMaxDrawSegments per row.
    constexpr int64_t kTargetCtas = 264;
    return int(
        std::clamp<int64_t>((kTargetCtas + std::max<int64_t>(draws_count, 1) - 1) / std::max<int64_t>(draws_count, 1),
                            1, kMaxDrawSegments));
}

size_t sample_rows_scratch_bytes(int64_t draws_count, int64_t vocab) {
    return detail::draw_scratch_bytes(draws_count, vocab);
}

void sample_rows(const SampleParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.logits && p.draws && p.ids && p.scratch, "sample_rows: null pointer");
    DSV4_CHECK(p.draws_count >= 0 && p.vocab > 0 && p.vocab <= kMaxDrawVocab,
               "sample_rows: bad shape: {} draws, vocab {}", p.draws_count, p.vocab);
    DSV4_CHECK(p.segments >= 0 && p.segments <= kMaxDrawSegments, "sample_rows: {} segments per row (at most {})",
               p.segments, kMaxDrawSegments);
    if (p.draws_count == 0) return;
    SampleParams q = p;
    if (q.segments == 0) q.segments = draw_segments(q.draws_count);
    detail::launch_sample_rows(q, stream);
}

}  // namespace dsv4::cuda
