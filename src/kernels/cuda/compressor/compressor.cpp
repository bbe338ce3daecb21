// Host-side contract of the compressor launcher (see compressor.h); the kernels are in compressor.cu.
#include "kernels/cuda/compressor/compressor.h"

#include "core/error.h"

namespace dsv4::cuda {

void compressor(const CompressorParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.tokens >= 0 && p.seqs >= 0, "compressor: negative tokens {} or seqs {}", p.tokens, p.seqs);
    if (p.tokens == 0) return;
    DSV4_CHECK(p.seqs > 0 && p.seqs <= 65535, "compressor: {} sequences (1 to 65535 per launch)", p.seqs);
    DSV4_CHECK(p.ratio > 0, "compressor: ratio {} must be positive", p.ratio);
    DSV4_CHECK(p.head_dim > 0 && p.head_dim <= kMaxCompressorDim, "compressor: head_dim {} outside [1, {}]", p.head_dim,
               kMaxCompressorDim);
    DSV4_CHECK(p.rope_dim >= 0 && p.rope_dim % 2 == 0 && p.rope_dim <= p.head_dim,
               "compressor: rope_dim {} must be even and at most head_dim {}", p.rope_dim, p.head_dim);
    const int64_t width = (p.ratio == 4 ? 2 : 1) * int64_t(p.head_dim);
    DSV4_CHECK(p.row_stride >= width, "compressor: row stride {} of kv and score below their width {}", p.row_stride,
               width);
    if (p.kind == CompressorKind::kIndexer)
        DSV4_CHECK((p.head_dim & (p.head_dim - 1)) == 0 && p.head_dim >= 2,
                   "compressor: indexer head_dim {} must be a power of two (Hadamard)", p.head_dim);
    DSV4_CHECK(p.page_size > 0 && p.max_pages > 0, "compressor: page_size {} and max_pages {} must be positive",
               p.page_size, p.max_pages);
    DSV4_CHECK(p.kv && p.score && p.token_seq && p.seq_first_row && p.seq_tokens && p.seq_start_position &&
                   p.seq_state && p.ape && p.norm_weight && p.state_kv && p.state_score && p.cache && p.page_table &&
                   (p.rope_dim == 0 || p.rope_inv_freq),
               "compressor: a required pointer is null");
    detail::compressor_launch(p, stream);
}

}  // namespace dsv4::cuda
