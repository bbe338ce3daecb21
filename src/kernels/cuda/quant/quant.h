// Quantization kernels of `model` numerics (docs/numerics.md) and the cache entry formats of docs/gpu-design.md:
//   act_quant_fp8          bf16 GEMM input -> e4m3 + f32 power-of-two scales per 128 (official act_quant, UE8M0)
//   kv_nope_fp8_round_trip KV nope dims -> FP8 and back in blocks of 64, in place (Precision::kv_nope_fp8)
//   indexer_rotate_fp4     Hadamard (Sylvester, x n^-0.5) -> bf16 -> FP4 round trip per 32, in place
//   pack_kv_entries / unpack_kv_entries   bf16 KV rows <-> packed cache entries (e4m3 nope, bf16 rope, UE8M0)
//   pack_indexer_keys      bf16 indexer keys -> Hadamard -> bf16 -> packed e2m1 + E8M0 per 32
// Every encoder matches the CPU reference bit for bit (tests/gpu/quant_test.cpp). Launchers check the contract on
// the host (quant.cpp) and throw dsv4::Error before launching.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/compressor/kv_entry_layout.h"

namespace dsv4::cuda {

inline constexpr int64_t kActQuantBlock = 128;           // FP8 GEMM-input blocks along K
inline constexpr int64_t kKvQuantBlock = kKvScaleBlock;  // KV nope FP8 blocks
inline constexpr int64_t kFp4Block = kIndexScaleBlock;   // indexer FP4 blocks
inline constexpr int64_t kKvEntryAlign = 8;              // packed KV entries are padded to this many bytes

// A trailing partial block (only in tiny test models) is quantized as a block of its own, as the CPU does.
struct ActQuantParams {
    const __nv_bfloat16* x = nullptr;  // [rows, cols] bf16, row stride x_stride elements
    uint8_t* q = nullptr;              // [rows, cols] e4m3 codes, dense
    float* scales = nullptr;           // [rows, ceil(cols / 128)] f32, powers of two (UE8M0 values)
    int64_t rows = 0, cols = 0, x_stride = 0;
};
void act_quant_fp8(const ActQuantParams& p, cudaStream_t stream);

struct KvNopeFp8Params {
    __nv_bfloat16* x = nullptr;  // [rows, row_stride] bf16; x[r, 0..nope_dim) is rewritten in place
    int64_t rows = 0, nope_dim = 0, row_stride = 0;
};
void kv_nope_fp8_round_trip(const KvNopeFp8Params& p, cudaStream_t stream);

// dim: index_head_dim, a power of two (the Hadamard transform's size), at most kMaxIndexerDim. 32, 64 and 128 (V4
// and the repository's fixtures) run warp-per-row kernels; any other power of two (small models) a CTA-per-row
// kernel with the same arithmetic, so the same bits (indexer_hadamard_path).
inline constexpr int64_t kMaxIndexerDim = 8192;  // the row in 32 KiB of shared memory
enum class IndexerHadamardPath { kWarp32, kWarp64, kWarp128, kGeneric };
constexpr IndexerHadamardPath indexer_hadamard_path(int64_t dim) {
    return dim == 32 ? IndexerHadamardPath::kWarp32
                     : (dim == 64 ? IndexerHadamardPath::kWarp64
                                  : (dim == 128 ? IndexerHadamardPath::kWarp128 : IndexerHadamardPath::kGeneric));
}

struct IndexerRotateParams {
    __nv_bfloat16* x = nullptr;  // [rows, row_stride] bf16; x[r, 0..dim) is rewritten in place
    int64_t rows = 0, dim = 0, row_stride = 0;
    // Optional RoPE first (the indexer's queries; rope_inv_freq null: none): row r is a head of token r / rope_heads,
    // its last rope_dim values rotated forward at positions[r / rope_heads] with apply_rope's arithmetic (rope_math),
    // so the launch equals apply_rope then the rotation bit for bit. rope_dim and dim - rope_dim are even.
    const float* rope_inv_freq = nullptr;  // [rope_dim / 2]
    const int32_t* positions = nullptr;    // [rows / rope_heads]
    int64_t rope_dim = 0, rope_heads = 1;
};
void indexer_rotate_fp4(const IndexerRotateParams& p, cudaStream_t stream);

// One packed KV entry (window slot or compressed entry), as compressor/kv_entry_layout.h defines it (the one
// definition), with its offsets as plain fields for the pack/unpack kernels. V4: 448 + 128 + 7 -> 584.
struct KvEntryLayout {
    int64_t nope = 0, rope = 0;  // values
    int64_t rope_offset = 0, scale_offset = 0, n_scales = 0, bytes = 0;
};
constexpr KvEntryLayout kv_entry_layout(int64_t head_dim, int64_t rope_dim) {
    const MainEntryLayout m = main_entry_layout(head_dim, rope_dim);
    return KvEntryLayout{m.nope, m.rope, m.rope_offset(), m.scale_offset(), m.scales(), m.bytes()};
}
static_assert(kv_entry_layout(512, 64).bytes == 584, "the V4 entry is vLLM's fp8_ds_mla size");
static_assert(kv_entry_layout(512, 64).bytes % kKvEntryAlign == 0, "entries stay 8-byte aligned");

struct KvPackParams {
    const __nv_bfloat16* kv = nullptr;  // [rows, head_dim] bf16 (after norm and RoPE), row stride kv_stride
    uint8_t* cache = nullptr;           // [slots, layout.bytes] packed entries
    const int32_t* slots = nullptr;     // [rows] destination entry of each row, < 0: not stored; nullptr: r -> r
    int64_t rows = 0, head_dim = 0, rope_dim = 0, kv_stride = 0;
};
void pack_kv_entries(const KvPackParams& p, cudaStream_t stream);

struct KvUnpackParams {
    const uint8_t* cache = nullptr;  // [slots, layout.bytes] packed entries
    const int32_t* slots = nullptr;  // [rows] entry to read for each row; nullptr: entry r
    __nv_bfloat16* kv = nullptr;     // [rows, head_dim] bf16, row stride kv_stride
    int64_t rows = 0, head_dim = 0, rope_dim = 0, kv_stride = 0;
};
void unpack_kv_entries(const KvUnpackParams& p, cudaStream_t stream);

// Packed indexer key (IndexEntryLayout): dim / 2 bytes of e2m1 pairs (low nibble = even element), then one E8M0
// byte per 32 values.
constexpr int64_t indexer_key_bytes(int64_t dim) {
    return IndexEntryLayout{dim}.bytes();
}

struct IndexerKeyPackParams {
    const __nv_bfloat16* x = nullptr;  // [rows, dim] bf16 keys before the rotation, row stride x_stride
    uint8_t* cache = nullptr;          // [slots, indexer_key_bytes(dim)]
    const int32_t* slots = nullptr;    // [rows]; nullptr: row r -> entry r
    int64_t rows = 0, dim = 0, x_stride = 0;
};
void pack_indexer_keys(const IndexerKeyPackParams& p, cudaStream_t stream);

// The kernel launches behind the checked launchers above (quant.cu); they assume a valid contract.
namespace detail {
void launch_act_quant_fp8(const ActQuantParams& p, cudaStream_t stream);
void launch_kv_nope_fp8_round_trip(const KvNopeFp8Params& p, cudaStream_t stream);
void launch_indexer_rotate_fp4(const IndexerRotateParams& p, cudaStream_t stream);
void launch_pack_kv_entries(const KvPackParams& p, cudaStream_t stream);
void launch_unpack_kv_entries(const KvUnpackParams& p, cudaStream_t stream);
void launch_pack_indexer_keys(const IndexerKeyPackParams& p, cudaStream_t stream);
}  // namespace detail

}  // namespace dsv4::cuda
