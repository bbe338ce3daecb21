// Token embedding on the GPU: bf16 rows of the embedding table gathered by device token ids and replicated into
// the n_hc mHC streams ([tokens, n_hc, dim] bf16), as CpuModel::forward does (an exact copy: the table is bf16).
// Ids are validated on the host before they reach the device (CpuModel::forward checks them); an id outside
// [0, vocab) that gets here anyway writes a NaN row instead of reading out of bounds.
// Tested in tests/gpu/embed_test.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

struct EmbedParams {
    const int32_t* ids = nullptr;          // [tokens] token ids
    const __nv_bfloat16* table = nullptr;  // [vocab, dim] bf16
    __nv_bfloat16* streams = nullptr;      // [tokens, n_hc, dim] bf16
    int64_t tokens = 0, vocab = 0, dim = 0, n_hc = 0;
};
void embed(const EmbedParams& p, cudaStream_t stream);

namespace detail {
void launch_embed(const EmbedParams& p, cudaStream_t stream);  // unchecked (embed.cu)
}

}  // namespace dsv4::cuda
