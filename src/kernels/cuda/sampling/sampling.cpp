// Host-side contract checks of sample_rows (sampling.h); the kernel is in sampling.cu.
#include "kernels/cuda/sampling/sampling.h"

#include "core/error.h"

namespace dsv4::cuda {

void sample_rows(const SampleParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.logits && p.draws && p.ids && p.candidates, "sample_rows: null pointer");
    DSV4_CHECK(p.draws_count >= 0 && p.vocab > 0 && p.vocab <= kMaxDrawVocab,
               "sample_rows: bad shape: {} draws, vocab {}", p.draws_count, p.vocab);
    if (p.draws_count) detail::launch_sample_rows(p, stream);
}

}  // namespace dsv4::cuda
