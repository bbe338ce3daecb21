// Lightning-indexer scores kernel (see indexer.h; the top-k is in indexer_topk.cu).
//   indexer_scores_kernel: one CTA per (token, 64 keys), or per (8 tokens, 64 keys) in prefill pieces, which then
//     gathers a sequence's keys once for its tokens (IndexerScoresParams::sequence_runs): dequantized FP4 keys and the
//     token's queries in shared memory, q.k on tensor cores (mma.sync bf16 -> f32: q and k are FP4 values times
//     power-of-two scales, exact in bf16), the bf16 stages per (head, key), then one thread per key sums the heads in
//     head order (the CPU order).
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/cp_async.cuh"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/compressor/entry_codec.cuh"
#include "kernels/cuda/compressor/kv_entry_layout.h"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/indexer/visible_entries.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kScoreThreads = 128;  // 4 warps = 4 m-tiles of 16 heads
constexpr int kKeys = 64;           // keys per CTA
constexpr int kMaxHeads = 64, kMaxDim = 128;
constexpr int kRowStride = kMaxDim + 8;
constexpr int kTStride = kKeys + 4;

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t b) {
    return __uint_as_float(uint32_t(b) << 16);
}

// Copies the packed entries of a tile's keys (pool rows key_rows[r], -1: a zero entry) into `raw`, in units of
// `Unit` (32-bit words where the entries are whole words: one round trip for V4's 4,352 bytes, where bytes took
// three), kUnroll units per thread in flight at once.
template <typename Unit>
__device__ __forceinline__ void gather_entries(const uint8_t* keys, const int64_t* key_rows, int entry_bytes,
                                               uint8_t* raw) {
    constexpr int kUnroll = 16;
    const int units = kKeys * entry_bytes / int(sizeof(Unit)), row_units = entry_bytes / int(sizeof(Unit));
    const Unit* src = reinterpret_cast<const Unit*>(keys);
    Unit* dst = reinterpret_cast<Unit*>(raw);
    for (int i0 = threadIdx.x; i0 < units; i0 += kScoreThreads * kUnroll) {
        Unit held[kUnroll];
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
            const int i = i0 + j * kScoreThreads, r = i / row_units;
            held[j] = i < units && key_rows[r] >= 0 ? __ldg(src + key_rows[r] * row_units + i % row_units) : Unit(0);
        }
#pragma unroll
        for (int j = 0; j < kUnroll; ++j)
            if (i0 + j * kScoreThreads < units) dst[i0 + j * kScoreThreads] = held[j];
    }
}

// kGroup tokens per CTA (IndexerScoresParams::sequence_runs: prefill pieces, where neighbouring tokens are mostly of
// one sequence): the CTA gathers and dequantizes its 64 keys once for every token of the group of the same sequence
// as the group's first, up to the most keys any of them sees, then runs each token's queries against them in turn (a
// token of another sequence gathers its own). Each token's scores are the same computation as with kGroup 1.
// kDim: V4's index_head_dim 128 as a constant, so that the loops' divisions by the dimension and the entry size are
// shifts and multiplies (by p.dim they were integer divisions: a third of the kernel's issued instructions went to
// address arithmetic, ncu 2026-12-06); 0: p.dim.
template <int kGroup, int kDim>
__global__ void __launch_bounds__(kScoreThreads) indexer_scores_kernel(const IndexerScoresParams p) {
    __shared__ __align__(16) __nv_bfloat16 qs[kMaxHeads * kRowStride];
    __shared__ __align__(16) __nv_bfloat16 ks[kKeys * kRowStride];
    __shared__ __align__(16) __nv_bfloat16 terms[kMaxHeads * kTStride];  // bf16 values: exact; pairs stored as words
    __shared__ float weights[kMaxHeads];
    __shared__ int64_t key_rows[kKeys];                                               // pool row of each visible key
    __shared__ __align__(16) uint8_t raw[kKeys * IndexEntryLayout{kMaxDim}.bytes()];  // the packed entries
    __shared__ float e2m1_values[16];  // entry::e2m1_to_f32 of every nibble: one load a value in the dequantization

    __shared__ int gathered_state, gathered_visible;  // whose keys ks holds, and how many of the tile's are real
    const int w0 = blockIdx.y * kKeys;
    const int dim = kDim ? kDim : p.dim, m_tiles = (p.heads + 15) / 16;
    const IndexEntryLayout layout{dim};
    const int entry_bytes = int(layout.bytes());
    if (threadIdx.x == 0) gathered_state = -1;
    if (threadIdx.x < 16) e2m1_values[threadIdx.x] = entry::e2m1_to_f32(threadIdx.x);  // read after the barriers below
    // Each member's visible keys and sequence, once for the CTA: the loop below reads them for every member (members
    // past the piece: no keys, no sequence).
    __shared__ int member_visible[kGroup], member_state[kGroup];
    if (threadIdx.x < kGroup) {
        const int token = blockIdx.x * kGroup + int(threadIdx.x);
        const bool real = token < p.tokens;
        member_visible[threadIdx.x] = real ? visible_entries(p.token_position[token], p.ratio, p.max_visible) : 0;
        member_state[threadIdx.x] = real ? p.token_state[token] : -1;
    }
    __syncthreads();
    for (int member = 0; member < kGroup; ++member) {
        const int token = blockIdx.x * kGroup + member;
        if (token >= p.tokens) break;
        const int visible = member_visible[member];
        if (w0 >= visible) continue;  // the same for every thread of the CTA
        // The keys this token needs: those of its sequence up to the most the group's tokens of it see (positions grow
        // along a run, so usually the group's last token's count).
        int need = visible;
        for (int h = member + 1; h < kGroup; ++h)
            if (member_state[h] == member_state[member]) need = max(need, member_visible[h]);
        __syncthreads();  // the previous token's readers of qs, ks and terms are done; gathered_state is set
        const bool gather = gathered_state != p.token_state[token] || gathered_visible < min(need, w0 + kKeys);

        // Queries by 16-byte cp.async (rows past `heads` are zeros), head weights, and the keys' pool rows; then the
        // packed key entries (gather_entries). Every load is issued before its first use, so the tile costs two
        // memory round trips (rows, then entries) instead of one per loop iteration.
        const uint16_t* q = p.q + int64_t(token) * p.heads * dim;
        for (int i = threadIdx.x; i < m_tiles * 16 * (dim / 8); i += kScoreThreads) {
            const int h = i / (dim / 8), c = i % (dim / 8);
            __nv_bfloat16* dst = &qs[h * kRowStride + 8 * c];
            if (h < p.heads)
                cp_async16(smem_addr(dst), q + h * dim + 8 * c);
            else
                *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
        }
        for (int h = threadIdx.x; h < p.heads; h += kScoreThreads)
            weights[h] = bf16_bits_to_f32(p.head_weights[int64_t(token) * p.heads + h]);
        if (gather && threadIdx.x < kKeys) {
            const int w = w0 + threadIdx.x;
            const int32_t* pages = p.page_table + int64_t(p.token_state[token]) * p.max_pages;
            key_rows[threadIdx.x] = w < need ? int64_t(pages[w / p.page_size]) * p.page_size + w % p.page_size : -1;
        }
        __syncthreads();
        if (gather) {
            if (entry_bytes % 4 == 0 && reinterpret_cast<uintptr_t>(p.keys) % 4 == 0)
                gather_entries<uint32_t>(p.keys, key_rows, entry_bytes, raw);  // V4's 68-byte entries
            else
                gather_entries<uint8_t>(p.keys, key_rows, entry_bytes, raw);
        }
        cp_async_wait_all();
        __syncthreads();

        // Keys: four packed bytes (eight e2m1 values of one scale block: the dimension is whole blocks on this path)
        // per step, stored as 16 bytes of bf16 pairs; keys past `need` are zeros (their scores are not written).
        for (int i = threadIdx.x; gather && i < kKeys * (dim / 8); i += kScoreThreads) {
            const int r = i / (dim / 8), c = i % (dim / 8);
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (key_rows[r] >= 0) {
                const uint8_t* entry = raw + r * entry_bytes;
                const uint32_t packed = entry_bytes % 4 == 0
                                            ? *reinterpret_cast<const uint32_t*>(entry + 4 * c)
                                            : uint32_t(entry[4 * c]) | uint32_t(entry[4 * c + 1]) << 8 |
                                                  uint32_t(entry[4 * c + 2]) << 16 | uint32_t(entry[4 * c + 3]) << 24;
                const float scale = entry::e8m0_to_f32(entry[layout.scale_offset() + (8 * c) / kIndexScaleBlock]);
                uint32_t pairs[4];
#pragma unroll
                for (int b = 0; b < 4; ++b) {
                    const uint32_t byte = packed >> (8 * b) & 0xFFu;
                    const __nv_bfloat162 pair =
                        __floats2bfloat162_rn(e2m1_values[byte & 0xFu] * scale, e2m1_values[byte >> 4] * scale);
                    pairs[b] = *reinterpret_cast<const uint32_t*>(&pair);
                }
                v = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
            }
            *reinterpret_cast<uint4*>(&ks[r * kRowStride + 8 * c]) = v;
        }
        if (gather && threadIdx.x == 0) gathered_state = p.token_state[token], gathered_visible = min(need, w0 + kKeys);
        __syncthreads();

        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
        if (warp < m_tiles) {
            float s[8][4];
            for (int nt = 0; nt < 8; ++nt)
                for (int i = 0; i < 4; ++i) s[nt][i] = 0.0f;
            const __nv_bfloat16* qa = &qs[(warp * 16 + g) * kRowStride + 2 * tig];
            const __nv_bfloat16* kb = &ks[g * kRowStride + 2 * tig];
            for (int k0 = 0; k0 < dim; k0 += 16) {
                const uint32_t a[4] = {ld32(qa + k0), ld32(qa + 8 * kRowStride + k0), ld32(qa + k0 + 8),
                                       ld32(qa + 8 * kRowStride + k0 + 8)};
#pragma unroll
                for (int nt = 0; nt < 8; ++nt) {
                    const __nv_bfloat16* b = kb + nt * 8 * kRowStride + k0;
                    mma_16816(s[nt], a, ld32(b), ld32(b + 8));
                }
            }
            // The bf16 stages of indexer_scores: q.k -> bf16, ReLU, x head weight -> bf16. A fragment's two values of
            // a row are adjacent keys of one head: converted as a pair and stored as one word.
            for (int half = 0; half < 2; ++half) {
                const int h = warp * 16 + g + 8 * half;
                const bool real = h < p.heads;
                const float weight = real ? weights[h] : 0.0f;
#pragma unroll
                for (int nt = 0; nt < 8; ++nt) {
                    const float2 dots = __bfloat1622float2(__floats2bfloat162_rn(s[nt][2 * half], s[nt][2 * half + 1]));
                    const float d0 = fmaxf(dots.x, 0.0f), d1 = fmaxf(dots.y, 0.0f);
                    *reinterpret_cast<__nv_bfloat162*>(&terms[h * kTStride + nt * 8 + 2 * tig]) =
                        __floats2bfloat162_rn(real ? d0 * weight : 0.0f, real ? d1 * weight : 0.0f);
                }
            }
        }
        __syncthreads();
        if (threadIdx.x < kKeys && w0 + int(threadIdx.x) < visible) {
            float total = 0.0f;  // f32, heads in order
            for (int h = 0; h < p.heads; ++h) total += __bfloat162float(terms[h * kTStride + threadIdx.x]);
            const __nv_bfloat16 v = __float2bfloat16_rn(total);
            p.scores[int64_t(token) * p.max_visible + w0 + threadIdx.x] = *reinterpret_cast<const uint16_t*>(&v);
        }
    }
}

}  // namespace

namespace detail {

void indexer_scores_launch(const IndexerScoresParams& p, cudaStream_t stream) {
    if (p.tokens == 0 || p.max_visible == 0) return;
    // Tokens per CTA where neighbouring tokens share a sequence: each key tile is gathered and dequantized once for
    // them (4 until 2026-12-06: the gather and dequantization were ~15 % of the kernel's stall samples).
    constexpr int kRunGroup = 8;
    constexpr int kV4Dim = 128;   // the kernel's constant-dimension instance (kDim)
    if (p.sequence_runs) {
        const dim3 grid((p.tokens + kRunGroup - 1) / kRunGroup, (p.max_visible + kKeys - 1) / kKeys);
        if (p.dim == kV4Dim)
            indexer_scores_kernel<kRunGroup, kV4Dim><<<grid, kScoreThreads, 0, stream>>>(p);
        else
            indexer_scores_kernel<kRunGroup, 0><<<grid, kScoreThreads, 0, stream>>>(p);
    } else {
        const dim3 grid(p.tokens, (p.max_visible + kKeys - 1) / kKeys);
        if (p.dim == kV4Dim)
            indexer_scores_kernel<1, kV4Dim><<<grid, kScoreThreads, 0, stream>>>(p);
        else
            indexer_scores_kernel<1, 0><<<grid, kScoreThreads, 0, stream>>>(p);
    }
    DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail
}  // namespace dsv4::cuda
