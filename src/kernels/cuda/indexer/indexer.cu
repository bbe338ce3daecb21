// Lightning-indexer kernels (see indexer.h).
//   indexer_scores_kernel: one CTA per (token, 64 keys), or per (8 tokens, 64 keys) in prefill pieces, which then
//     gathers a sequence's keys once for its tokens (IndexerScoresParams::sequence_runs): dequantized FP4 keys and the
//     token's queries in shared memory, q.k on tensor cores (mma.sync bf16 -> f32: q and k are FP4 values times
//     power-of-two scales, exact in bf16), the bf16 stages per (head, key), then one thread per key sums the heads in
//     head order (the CPU order).
//   indexer_topk_kernel: one CTA per token: a radix select on the 16-bit order key of the bf16 scores (two 8-bit
//     histogram passes find the k-th largest key T, a warp scanning the 256 bins), an ordered compaction (keys > T,
//     then the lowest-index keys == T), a bitonic sort of the k winners by (score desc, index asc), then optionally
//     the attention's key list from them. One CTA per token is enough for prefill; a decode step over ~256K entries
//     would want the histogram split over CTAs (not done yet).
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/attention_slots/attention_slots_row.cuh"
#include "kernels/cuda/common/cp_async.cuh"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/common/warp_scan.cuh"
#include "kernels/cuda/compressor/entry_codec.cuh"
#include "kernels/cuda/compressor/kv_entry_layout.h"
#include "kernels/cuda/indexer/indexer.h"

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

__device__ __forceinline__ int visible_entries(int position, int ratio, int max_visible) {
    return min((position + 1) / ratio, max_visible);
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

// ---- top-k

constexpr int kTopkThreads = 512;

// Order-preserving 16-bit key of a bf16 score (larger score -> larger key); -0 is keyed as +0 (they compare equal).
__device__ __forceinline__ uint32_t order_key(uint16_t bits) {
    if (bits == 0x8000u) bits = 0;
    return (bits & 0x8000u) ? (~uint32_t(bits) & 0xFFFFu) : (uint32_t(bits) | 0x8000u);
}

// Exclusive prefix sum over the block; `total` gets the block sum. All threads must call it.
__device__ int block_exclusive_scan(int x, int& total, int* scratch) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int inclusive = warp_inclusive_sum(x);
    if (lane == 31) scratch[warp] = inclusive;
    __syncthreads();
    int warp_base = 0, sum = 0;
    for (int w = 0; w < kTopkThreads / 32; ++w) {
        if (w == warp) warp_base = sum;
        sum += scratch[w];
    }
    __syncthreads();
    total = sum;
    return warp_base + inclusive - x;
}

__global__ void __launch_bounds__(kTopkThreads) indexer_topk_kernel(const IndexerTopkParams p) {
    __shared__ int hist[256];
    __shared__ int scratch[kTopkThreads / 32];
    extern __shared__ unsigned long long cand[];  // [indexer_topk_candidates(topk)]
    __shared__ uint32_t threshold_shared;
    __shared__ int above_shared;

    const int token = blockIdx.x;
    const int visible = visible_entries(p.token_position[token], p.ratio, p.max_visible);
    const int k = min(p.topk, visible);
    const uint16_t* scores = p.scores + int64_t(token) * p.max_visible;
    int32_t* out = p.selected + int64_t(token) * p.topk;
    if (k == 0) {
        for (int j = threadIdx.x; j < p.topk; j += kTopkThreads) out[j] = -1;
        if (p.slots.indices) write_attention_slots(p.slots, token, [](int) { return -1; });
        return;
    }

    // 1. Radix select: the k-th largest key T and the number of keys above it.
    uint32_t prefix = 0;
    int above = 0;  // keys greater than the current prefix range
    for (int pass = 0; pass < 2; ++pass) {
        for (int b = threadIdx.x; b < 256; b += kTopkThreads) hist[b] = 0;
        __syncthreads();
        for (int w = threadIdx.x; w < visible; w += kTopkThreads) {
            const uint32_t key = order_key(scores[w]);
            if (pass == 0 || (key >> 8) == prefix) atomicAdd(&hist[pass == 0 ? key >> 8 : key & 0xFFu], 1);
        }
        __syncthreads();
        if (threadIdx.x < 32) {
            // The highest bin whose count from the top, with `above`, reaches k, and the count above it. Lane l owns
            // bins 255 - 8 l down to 248 - 8 l: a scan over the lanes finds the lane, which walks its 8 bins.
            const int lane = threadIdx.x;
            int mine = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) mine += hist[255 - 8 * lane - j];
            const int inclusive = warp_inclusive_sum(mine);
            const unsigned reaches = __ballot_sync(0xffffffffu, above + inclusive >= k);
            if (reaches && lane == __ffs(int(reaches)) - 1) {
                int count = above + inclusive - mine, bin = 255 - 8 * lane;
                while (count + hist[bin] < k) count += hist[bin--];
                threshold_shared = pass == 0 ? uint32_t(bin) : (prefix << 8) | uint32_t(bin);
                above_shared = count;
            }
        }
        __syncthreads();
        prefix = threshold_shared;
        above = above_shared;
        __syncthreads();
    }
    const uint32_t threshold = prefix;
    const int need_equal = k - above;

    // 2. Ordered compaction: every key > T, and the first need_equal keys == T in index order.
    int base_above = 0, base_equal = 0;
    for (int w0 = 0; w0 < visible; w0 += kTopkThreads) {
        const int w = w0 + threadIdx.x;
        const uint32_t key = w < visible ? order_key(scores[w]) : 0u;
        const int is_above = w < visible && key > threshold, is_equal = w < visible && key == threshold;
        int total = 0;
        const int rank = block_exclusive_scan(is_above | (is_equal << 16), total, scratch);
        const int rank_above = rank & 0xFFFF, rank_equal = rank >> 16;
        const unsigned long long sort_key = (uint64_t(0xFFFFu - key) << 32) | uint32_t(w);
        if (is_above) cand[base_above + rank_above] = sort_key;
        if (is_equal && base_equal + rank_equal < need_equal) cand[above + base_equal + rank_equal] = sort_key;
        base_above += total & 0xFFFF;
        base_equal += total >> 16;
    }
    // 3. Bitonic sort of the k candidates (padded to a power of two) by (score desc, index asc). A stage pairs i with
    //    i ^ stride; the stages of stride 32 and up run in shared memory (a barrier each), those below 32 on each
    //    thread's candidates in registers by warp shuffles (one barrier for the run): the same network, the same order.
    int n = 1;
    while (n < k) n <<= 1;
    for (int i = k + threadIdx.x; i < n; i += kTopkThreads) cand[i] = ~0ull;
    __syncthreads();
    for (int size = 2; size <= n; size <<= 1) {
        int stride = size / 2;
        for (; stride >= 32; stride >>= 1) {
            for (int i = threadIdx.x; i < n; i += kTopkThreads) {
                const int j = i ^ stride;
                if (j > i) {
                    const bool ascending = (i & size) == 0;
                    const unsigned long long a = cand[i], b = cand[j];
                    if ((a > b) == ascending) {
                        cand[i] = b;
                        cand[j] = a;
                    }
                }
            }
            __syncthreads();
        }
        // Every thread runs the same iterations (the shuffles need whole warps); a lane at i >= n (n < 32, or whole
        // warps past n) holds padding and its partner is past n too.
        for (int base = 0; base < n; base += kTopkThreads) {
            const int i = base + int(threadIdx.x);
            unsigned long long v = i < n ? cand[i] : ~0ull;
            for (int st = stride; st > 0; st >>= 1) {
                const unsigned long long other = __shfl_xor_sync(0xffffffffu, v, st);
                const bool ascending = (i & size) == 0, lower = (i & st) == 0;
                v = lower == ascending ? min(v, other) : max(v, other);
            }
            if (i < n) cand[i] = v;
        }
        __syncthreads();
    }
    for (int j = threadIdx.x; j < p.topk; j += kTopkThreads) out[j] = j < k ? int32_t(cand[j] & 0xFFFFFFFFu) : -1;
    if (p.slots.indices)
        write_attention_slots(p.slots, token, [&](int i) { return i < k ? int32_t(cand[i] & 0xFFFFFFFFu) : -1; });
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

void indexer_topk_launch(const IndexerTopkParams& p, cudaStream_t stream) {
    if (p.tokens == 0) return;
    const size_t bytes = size_t(indexer_topk_candidates(p.topk)) * sizeof(unsigned long long);
    if (bytes > (size_t(48) << 10))
        DSV4_CUDA_CHECK(
            cudaFuncSetAttribute(indexer_topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    indexer_topk_kernel<<<p.tokens, kTopkThreads, bytes, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail
}  // namespace dsv4::cuda
