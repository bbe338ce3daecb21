// Next-token draws on the GPU, by the host sampler's definition (runtime/sampler.h, steps 1-5) for the draws that
// need no order of the vocabulary: greedy (the first index of the row's maximum), and temperature with an optional
// min-p, where the candidates' weights e^((l - max) / T) (exp_nonpositive's arithmetic, each operation rounded as the
// host's) are summed in double in blocks of kSampleBlock candidates in ascending id order and the draw walks the
// block sums with the row's uniform u, which the caller takes from the request's generator (one per non-greedy
// draw, as the host sampler does). So a draw gives the host sampler's id for the same logits and generator. top-k
// and top-p are not here (they need the vocabulary in order): such requests stay on the host. CudaModel draws with
// it for the items that ask (BatchItem::draw). tests/gpu/sampling_test.cpp holds it to the host sampler.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

constexpr int64_t kDrawBlock = 1024;  // candidates per block of the sums: runtime/sampler.h's kSampleBlock
constexpr int64_t kMaxDrawVocab = 1024 * kDrawBlock;  // a row's block sums fit one CTA's shared memory

// One draw.
struct RowDraw {
    double u = 0.0;  // step 4's uniform in [0, 1); unused when greedy
    float temperature = 1.0f;
    float min_p = 0.0f;  // 0: every token a candidate
    int32_t greedy = 1;
    int32_t logits_row = 0;  // the row of SampleParams::logits drawn from (each row at most once)
};

struct SampleParams {
    // [*, vocab] f32. A non-greedy draw overwrites its row with the weights (the logits are not needed after it,
    // and a batch of V4's vocabulary needs no scratch of its size).
    float* logits = nullptr;
    const RowDraw* draws = nullptr;  // [draws] device
    int32_t* ids = nullptr;          // [draws] out: the drawn id, or -1 where the row holds a NaN
    void* scratch = nullptr;         // sample_rows_scratch_bytes(draws_count, vocab): the candidates (min-p) and the
                                     // row segments' partial results
    int64_t draws_count = 0, vocab = 0;
    // CTAs per row in the passes over the row, 1 .. kMaxDrawSegments (0: draw_segments(draws_count)). Any count
    // gives the same ids; more spread a small batch's rows over the GPU (at one draw the time is latency).
    int segments = 0;
};
constexpr int kMaxDrawSegments = 64;
int draw_segments(int64_t draws_count);
size_t sample_rows_scratch_bytes(int64_t draws_count, int64_t vocab);
void sample_rows(const SampleParams& p, cudaStream_t stream);

namespace detail {
void launch_sample_rows(const SampleParams& p, cudaStream_t stream);  // unchecked, segments set (sampling.cu)
size_t draw_scratch_bytes(int64_t draws_count, int64_t vocab);
}  // namespace detail

}  // namespace dsv4::cuda
