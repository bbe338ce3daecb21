// attention_slots kernel (see attention_slots.h): one CTA per token, threads over its slots.
#include "kernels/cuda/attention_slots/attention_slots.h"
#include "kernels/cuda/common/cuda_check.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void attention_slots_kernel(const AttentionSlotsParams p) {
    const int t = blockIdx.x;
    const int64_t position = p.positions[t];
    const int q = p.token_seq[t];
    const int64_t start = p.seq_start_position[q], first_row = p.seq_first_row[q], state = p.seq_state[q];
    const int64_t first = position - p.window + 1 > 0 ? position - p.window + 1 : 0;
    const int64_t ring = p.ring_row + state * p.window;
    auto compressed = [&](int64_t e) {
        const int64_t page = p.page_table[state * p.max_pages + e / p.page_size];
        return p.compressed_row + page * p.page_size + e % p.page_size;
    };
    int32_t* out = p.indices + int64_t(t) * p.slots;
    for (int j = threadIdx.x; j < p.slots; j += blockDim.x) {
        int64_t row = -1;
        if (j < p.window) {
            const int64_t k = first + j;
            if (k <= position) row = k < start ? ring + k % p.window : p.chunk_row + first_row + (k - start);
        } else {
            const int i = j - p.window;
            if (p.selected) {
                const int32_t e = i < p.topk ? p.selected[int64_t(t) * p.topk + i] : -1;
                if (e >= 0) row = compressed(e);
            } else if (i < (position + 1) / p.ratio) {
                row = compressed(i);
            }
        }
        out[j] = int32_t(row);
    }
}

}  // namespace

namespace detail {
void launch_attention_slots(const AttentionSlotsParams& p, cudaStream_t stream) {
    attention_slots_kernel<<<unsigned(p.tokens), kThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}
}  // namespace detail

}  // namespace dsv4::cuda
