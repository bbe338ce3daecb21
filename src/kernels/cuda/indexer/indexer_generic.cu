// Lightning-indexer scores for any even dim and head count (IndexerScoresPath::kGeneric, see indexer.h): the shapes
// the tensor-core kernel does not stage (small models: index_head_dim 2 .. 16 or 256 and up, more than 64 heads).
// One thread per (token, key), indexer_scores of src/model/attention.cpp operation by operation: per head the f32
// dot over the dequantized key in index order (no FMA contraction), -> bf16, ReLU, x head weight -> bf16, summed in
// f32 in head order, -> bf16. q and k are FP4 values times powers of two, so the dots are the CPU's bits.
// Tested in tests/gpu/indexer_test.cpp (GenericPath*) against the CPU reference.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/compressor/kv_entry_layout.h"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/indexer/visible_entries.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kKeys = 64;  // keys per CTA, one per thread

__device__ __forceinline__ float bf16_bits(uint16_t b) {
    return __uint_as_float(uint32_t(b) << 16);
}

__global__ void __launch_bounds__(kKeys) indexer_scores_generic_kernel(const IndexerScoresParams p) {
    const int token = blockIdx.x, w = blockIdx.y * kKeys + threadIdx.x;
    const int visible = visible_entries(p.token_position[token], p.ratio, p.max_visible);
    if (w >= visible) return;
    const IndexEntryLayout layout{p.dim};
    const int32_t* pages = p.page_table + int64_t(p.token_state[token]) * p.max_pages;
    const uint8_t* key = p.keys + (int64_t(pages[w / p.page_size]) * p.page_size + w % p.page_size) * layout.bytes();
    const uint16_t* q = p.q + int64_t(token) * p.heads * p.dim;
    const uint16_t* weights = p.head_weights + int64_t(token) * p.heads;
    float total = 0.0f;
    for (int h = 0; h < p.heads; ++h) {
        float dot = 0.0f;
        for (int i = 0; i < p.dim; ++i) {
            const uint8_t byte = key[i / 2];
            const float k = e2m1_to_f32(uint8_t(i % 2 ? byte >> 4 : byte & 0xF)) *
                            e8m0_to_f32(key[layout.scale_offset() + i / kIndexScaleBlock]);
            dot = __fadd_rn(dot, __fmul_rn(bf16_bits(q[int64_t(h) * p.dim + i]), k));
        }
        const float relu = fmaxf(round_bf16(dot), 0.0f);
        total = __fadd_rn(total, round_bf16(__fmul_rn(relu, bf16_bits(weights[h]))));
    }
    p.scores[int64_t(token) * p.max_visible + w] = __bfloat16_as_ushort(f32_to_bf16(total));
}

}  // namespace

namespace detail {

void indexer_scores_generic_launch(const IndexerScoresParams& p, cudaStream_t stream) {
    const dim3 grid(unsigned(p.tokens), unsigned((p.max_visible + kKeys - 1) / kKeys));
    indexer_scores_generic_kernel<<<grid, kKeys, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail
}  // namespace dsv4::cuda
