// The lightning indexer's top-k kernel (see indexer.h): one CTA per token, two paths by the token's visible keys.
//   Up to kCountingMax (contexts to 16K at ratio 4, every decode step of the benches): the whole order by two stable
//     counting passes over the 16-bit order keys of the bf16 scores, low byte then high byte, each by descending
//     digit; the visible keys, taken in index order, come out by (score desc, index asc), and the first k are the
//     top-k. About ten CTA barriers.
//   Beyond: a radix select (two 8-bit histogram passes find the k-th largest key T, a warp scanning the 256 bins), an
//     ordered compaction (keys > T, then the lowest-index keys == T), a bitonic sort of the k winners by (score desc,
//     index asc). About thirty barriers, whatever the count. A decode step over ~256K entries would want the
//     histogram split over CTAs (not done yet).
// Either path then optionally writes the attention's key list from its selection.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/attention_slots/attention_slots_row.cuh"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/warp_scan.cuh"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/indexer/visible_entries.cuh"

namespace dsv4::cuda {
namespace {

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

// ---- the counting path

constexpr int kTopkWarps = kTopkThreads / 32;
constexpr int kCountingMax = 4096;  // visible keys of the counting path: 8 a thread
constexpr int kCountingPerThread = kCountingMax / kTopkThreads;
constexpr int kDigits = 256;
// Its shared memory (in the kernel's dynamic shared memory, beside the other path's candidates): each pass's counts
// [warp][digit] (u16: at most kCountingMax), and the first pass's output (key << 16 | index), whose first k halfwords
// the second pass's scatter overwrites with the chosen indices once every thread has read its items.
constexpr size_t kCountingCountsBytes = size_t(2) * kTopkWarps * kDigits * sizeof(uint16_t);
constexpr size_t kCountingBytes = kCountingCountsBytes + size_t(kCountingMax) * sizeof(uint32_t);

// One stable counting pass by digit ascending. A warp holds the input positions [warp P, (warp + 1) P) (P = per_warp,
// a multiple of 32), lane l position warp P + 32 r + l in round r, so rounds, then lanes, follow the input order;
// `item[r]` is that position's item where it is below n. `counts` ([warp][digit], zero) ends as each warp's first
// rank within each digit; `base` ([digit]) gets the digit's first rank. Calls store(rank, item) for every item.
template <class Digit, class Store>
__device__ __forceinline__ void counting_pass(const uint32_t (&item)[kCountingPerThread], int n, int per_warp,
                                              uint16_t* counts, int* base, int* warp_sums, Digit digit, Store store) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const unsigned lanes_below = (1u << lane) - 1u;
    int rank[kCountingPerThread];  // among the warp's items of the same digit, in input order
    uint16_t* warp_counts = counts + warp * kDigits;
#pragma unroll
    for (int r = 0; r < kCountingPerThread; ++r) {
        if (32 * r >= per_warp) break;  // the same for the whole warp
        const bool real = warp * per_warp + 32 * r + lane < n;
        const int d = real ? digit(item[r]) : kDigits + lane;  // past n: a group of its own, never counted
        const unsigned peers = __match_any_sync(0xffffffffu, d);
        const int before = real ? warp_counts[d] : 0;
        rank[r] = before + __popc(peers & lanes_below);
        __syncwarp();
        if (real && (peers >> lane) == 1u) warp_counts[d] = uint16_t(before + __popc(peers));  // the group's last
        __syncwarp();
    }
    __syncthreads();
    // Digit d (one thread each): the warps' exclusive prefix of its count, then the digits' exclusive prefix of their
    // totals.
    int total = 0, inclusive = 0;
    if (threadIdx.x < kDigits) {
        uint16_t c[kTopkWarps];
#pragma unroll
        for (int w = 0; w < kTopkWarps; ++w) c[w] = counts[w * kDigits + threadIdx.x];
#pragma unroll
        for (int w = 0; w < kTopkWarps; ++w) {
            counts[w * kDigits + threadIdx.x] = uint16_t(total);
            total += c[w];
        }
        inclusive = warp_inclusive_sum(total);
        if (lane == 31) warp_sums[warp] = inclusive;
    }
    __syncthreads();
    if (threadIdx.x < kDigits) {
        int prior = 0;
        for (int w = 0; w < warp; ++w) prior += warp_sums[w];
        base[threadIdx.x] = prior + inclusive - total;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kCountingPerThread; ++r) {
        if (32 * r >= per_warp) break;
        if (warp * per_warp + 32 * r + lane < n) {
            const int d = digit(item[r]);
            store(base[d] + warp_counts[d] + rank[r], item[r]);
        }
    }
    __syncthreads();
}

// The top-k of a token's n <= kCountingMax visible scores (k = min(topk, n) > 0) into out, and its key list.
__device__ void counting_top_k(const IndexerTopkParams& p, int token, const uint16_t* scores, int n, int k,
                               int32_t* out, uint8_t* smem, int* base, int* warp_sums) {
    uint16_t* counts = reinterpret_cast<uint16_t*>(smem);  // [2][warps][digits]
    uint32_t* by_low = reinterpret_cast<uint32_t*>(smem + kCountingCountsBytes);
    uint16_t* chosen = reinterpret_cast<uint16_t*>(by_low);  // after the second pass read by_low: [k]
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int per_warp = (n + kTopkThreads - 1) / kTopkThreads * 32;
    uint32_t item[kCountingPerThread];
#pragma unroll
    for (int r = 0; r < kCountingPerThread; ++r) {
        const int w = warp * per_warp + 32 * r + lane;
        item[r] = 32 * r < per_warp && w < n ? order_key(scores[w]) << 16 | uint32_t(w) : 0u;
    }
    for (int i = threadIdx.x; i < int(kCountingCountsBytes / 16); i += kTopkThreads)
        reinterpret_cast<uint4*>(counts)[i] = make_uint4(0u, 0u, 0u, 0u);
    for (int j = k + threadIdx.x; j < p.topk; j += kTopkThreads) out[j] = -1;
    __syncthreads();
    // Descending keys: digit 255 - byte. Low bytes first, stable over the index order; then high bytes, stable over
    // that: ties of the whole key keep the index order (lower index first), as the CPU's order.
    counting_pass(
        item, n, per_warp, counts, base, warp_sums, [](uint32_t it) { return int(255u - (it >> 16 & 0xFFu)); },
        [&](int rank, uint32_t it) { by_low[rank] = it; });
#pragma unroll
    for (int r = 0; r < kCountingPerThread; ++r) {
        const int w = warp * per_warp + 32 * r + lane;
        item[r] = 32 * r < per_warp && w < n ? by_low[w] : 0u;
    }
    counting_pass(
        item, n, per_warp, counts + kTopkWarps * kDigits, base, warp_sums,
        [](uint32_t it) { return int(255u - (it >> 24)); },
        [&](int rank, uint32_t it) {
            if (rank < k) {
                chosen[rank] = uint16_t(it & 0xFFFFu);
                out[rank] = int32_t(it & 0xFFFFu);
            }
        });
    if (p.slots.indices) write_attention_slots(p.slots, token, [&](int i) { return i < k ? int32_t(chosen[i]) : -1; });
}

// ---- the kernel

__global__ void __launch_bounds__(kTopkThreads) indexer_topk_kernel(const IndexerTopkParams p) {
    __shared__ int hist[256];
    __shared__ int scratch[kTopkThreads / 32];
    // [indexer_topk_candidates(topk)] on the radix path; the counting path's kCountingBytes
    extern __shared__ unsigned long long cand[];
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
    if (visible <= kCountingMax) {
        counting_top_k(p, token, scores, visible, k, out, reinterpret_cast<uint8_t*>(cand), hist, scratch);
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

void indexer_topk_launch(const IndexerTopkParams& p, cudaStream_t stream) {
    if (p.tokens == 0) return;
    const size_t bytes = std::max(size_t(indexer_topk_candidates(p.topk)) * sizeof(unsigned long long), kCountingBytes);
    if (bytes > (size_t(48) << 10))
        DSV4_CUDA_CHECK(
            cudaFuncSetAttribute(indexer_topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    indexer_topk_kernel<<<p.tokens, kTopkThreads, bytes, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail
}  // namespace dsv4::cuda
