// attention_slots kernel (see attention_slots.h): one CTA per token, threads over its slots.
#include "kernels/cuda/attention_slots/attention_slots.h"
#include "kernels/cuda/attention_slots/attention_slots_row.cuh"
#include "kernels/cuda/common/cuda_check.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void attention_slots_kernel(const AttentionSlotsParams p) {
    const int t = blockIdx.x;
    write_attention_slots(p, t, [&](int i) { return p.selected[int64_t(t) * p.topk + i]; });
}

}  // namespace

namespace detail {
void launch_attention_slots(const AttentionSlotsParams& p, cudaStream_t stream) {
    attention_slots_kernel<<<unsigned(p.tokens), kThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}
}  // namespace detail

}  // namespace dsv4::cuda
