// The lightning indexer's top-k kernel (see indexer.h): one CTA per token: a radix select on the 16-bit order key of
// the bf16 scores (two 8-bit histogram passes find the k-th largest key T, a warp scanning the 256 bins), an ordered
// compaction (keys > T, then the lowest-index keys == T), a bitonic sort of the k winners by (score desc, index asc),
// then optionally the attention's key list from them. One CTA per token is enough for prefill; a decode step over
// ~256K entries would want the histogram split over CTAs (not done yet).
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/attention_slots/attention_slots_row.cuh"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/warp_scan.cuh"
#include "kernels/cuda/indexer/indexer.h"

namespace dsv4::cuda {
namespace {

__device__ __forceinline__ int visible_entries(int position, int ratio, int max_visible) {
    return min((position + 1) / ratio, max_visible);
}

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
