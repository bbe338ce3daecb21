// Host-side contract checks of the quantization launchers (quant.h); the kernels are in quant.cu.
#include "kernels/cuda/quant/quant.h"

#include "core/error.h"

namespace dsv4::cuda {
namespace {

bool aligned(const void* p, size_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

void check_kv(const char* op, int64_t rows, int64_t head_dim, int64_t rope_dim, int64_t stride, const void* kv,
              const void* cache) {
    DSV4_CHECK(kv && cache, "{}: null pointer", op);
    DSV4_CHECK(rows >= 0, "{}: rows {} is negative", op, rows);
    DSV4_CHECK(head_dim > 0 && rope_dim >= 0 && rope_dim <= head_dim, "{}: rope_dim {} must lie in [0, head_dim {}]",
               op, rope_dim, head_dim);
    DSV4_CHECK(stride >= head_dim, "{}: row stride {} is smaller than head_dim {}", op, stride, head_dim);
    DSV4_CHECK(aligned(cache, kKvEntryAlign), "{}: cache is not {}-byte aligned", op, kKvEntryAlign);
}

void check_indexer_dim(const char* op, int64_t dim) {
    DSV4_CHECK(dim >= 2 && dim <= kMaxIndexerDim && (dim & (dim - 1)) == 0,
               "{}: dim {} is not a power of two in [2, {}] (the Hadamard transform's size)", op, dim, kMaxIndexerDim);
}

}  // namespace

void act_quant_fp8(const ActQuantParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.x && p.q && p.scales, "act_quant_fp8: null pointer");
    DSV4_CHECK(p.rows >= 0 && p.cols > 0, "act_quant_fp8: bad shape [{}, {}]", p.rows, p.cols);
    DSV4_CHECK(p.x_stride >= p.cols, "act_quant_fp8: x_stride {} < cols {}", p.x_stride, p.cols);
    detail::launch_act_quant_fp8(p, stream);
}

void kv_nope_fp8_round_trip(const KvNopeFp8Params& p, cudaStream_t stream) {
    DSV4_CHECK(p.x, "kv_nope_fp8_round_trip: null pointer");
    DSV4_CHECK(p.rows >= 0 && p.nope_dim > 0, "kv_nope_fp8_round_trip: bad shape [{}, {}]", p.rows, p.nope_dim);
    DSV4_CHECK(p.row_stride >= p.nope_dim, "kv_nope_fp8_round_trip: row_stride {} < nope_dim {}", p.row_stride,
               p.nope_dim);
    detail::launch_kv_nope_fp8_round_trip(p, stream);
}

void indexer_rotate_fp4(const IndexerRotateParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.x, "indexer_rotate_fp4: null pointer");
    check_indexer_dim("indexer_rotate_fp4", p.dim);
    DSV4_CHECK(p.rows >= 0 && p.row_stride >= p.dim, "indexer_rotate_fp4: rows {} / row_stride {} invalid for dim {}",
               p.rows, p.row_stride, p.dim);
    if (p.rope_inv_freq) {
        DSV4_CHECK(p.positions, "indexer_rotate_fp4: RoPE without positions");
        DSV4_CHECK(p.rope_dim > 0 && p.rope_dim <= p.dim && p.rope_dim % 2 == 0 && p.dim % 2 == 0,
                   "indexer_rotate_fp4: rope_dim {} is not an even count in (0, dim {}]", p.rope_dim, p.dim);
        DSV4_CHECK(p.rope_heads > 0 && p.rows % p.rope_heads == 0,
                   "indexer_rotate_fp4: {} rows are not whole tokens of {} heads", p.rows, p.rope_heads);
    }
    detail::launch_indexer_rotate_fp4(p, stream);
}

void pack_indexer_keys(const IndexerKeyPackParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.x && p.cache, "pack_indexer_keys: null pointer");
    check_indexer_dim("pack_indexer_keys", p.dim);
    DSV4_CHECK(p.rows >= 0 && p.x_stride >= p.dim, "pack_indexer_keys: rows {} / x_stride {} invalid for dim {}",
               p.rows, p.x_stride, p.dim);
    detail::launch_pack_indexer_keys(p, stream);
}

void pack_kv_entries(const KvPackParams& p, cudaStream_t stream) {
    check_kv("pack_kv_entries", p.rows, p.head_dim, p.rope_dim, p.kv_stride, p.kv, p.cache);
    detail::launch_pack_kv_entries(p, stream);
}

void unpack_kv_entries(const KvUnpackParams& p, cudaStream_t stream) {
    check_kv("unpack_kv_entries", p.rows, p.head_dim, p.rope_dim, p.kv_stride, p.kv, p.cache);
    detail::launch_unpack_kv_entries(p, stream);
}

}  // namespace dsv4::cuda
