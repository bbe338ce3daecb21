// Embedding gather: one CTA per token; 16-byte copies when the rows allow, element copies otherwise.
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/embed/embed.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) embed_kernel(EmbedParams p, bool vectorized) {
    const int64_t t = blockIdx.x;
    const int32_t id = p.ids[t];
    __nv_bfloat16* out = p.streams + t * p.n_hc * p.dim;
    if (id < 0 || id >= p.vocab) {
        const __nv_bfloat16 nan = __ushort_as_bfloat16(0x7FC0);
        for (int64_t i = threadIdx.x; i < p.n_hc * p.dim; i += kThreads) out[i] = nan;
        return;
    }
    const __nv_bfloat16* row = p.table + int64_t(id) * p.dim;
    if (vectorized) {  // dim % 8 == 0 and 16-byte aligned bases: 8 bf16 per uint4
        const int64_t chunks = p.dim / 8;
        const uint4* src = reinterpret_cast<const uint4*>(row);
        uint4* dst = reinterpret_cast<uint4*>(out);
        for (int64_t i = threadIdx.x; i < chunks; i += kThreads) {
            const uint4 v = src[i];
            for (int64_t j = 0; j < p.n_hc; ++j) dst[j * chunks + i] = v;
        }
    } else {
        for (int64_t i = threadIdx.x; i < p.dim; i += kThreads) {
            const __nv_bfloat16 v = row[i];
            for (int64_t j = 0; j < p.n_hc; ++j) out[j * p.dim + i] = v;
        }
    }
}

}  // namespace

namespace detail {
void launch_embed(const EmbedParams& p, cudaStream_t stream) {
    const bool vectorized = p.dim % 8 == 0 && reinterpret_cast<uintptr_t>(p.table) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(p.streams) % 16 == 0;
    embed_kernel<<<unsigned(p.tokens), kThreads, 0, stream>>>(p, vectorized);
    DSV4_CUDA_CHECK(cudaGetLastError());
}
}  // namespace detail

}  // namespace dsv4::cuda
