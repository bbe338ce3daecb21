// sample_rows (sampling.h): one CTA of 512 threads per draw. Steps as runtime/sampler.cpp computes them: the row's
// maximum and its first index (a NaN anywhere: id -1); greedy stops there. Then every weight (exp_nonpositive of
// runtime/sampling_weights.h with each operation rounded on its own, as the host, built without contraction, does),
// the candidates (min-p) compacted in id order, each block's sum in double by one thread in candidate order from 0,
// and the walk by thread 0: the block sums in order for the total, then the first block whose running sum passes
// u x total, then in it the first candidate where the sum before the block plus the block's running sum passes it.
// The passes over the row are coalesced with several loads in flight per thread: one row is one CTA, so at batch 1
// the draw's time is its memory latency.
#include <climits>
#include <cstdint>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/sampling/sampling.h"

namespace dsv4::cuda {
namespace {

// 512 threads: room for kAhead loads in flight per thread (a block's sum) within the registers.
constexpr int kThreads = 512, kWarps = kThreads / 32;
constexpr int kUnroll = 8;   // loads in flight per thread in the passes over the row
constexpr int kAhead = 32;   // loads in flight per thread while a block's sum is added up

// runtime/sampling_weights.h's exp_nonpositive, operation for operation.
__device__ __forceinline__ float exp_nonpositive_rn(float x) {
    const bool tiny = !(x >= -87.0f);
    const float xc = tiny ? -87.0f : x;
    constexpr float kMagic = 12582912.0f;
    const float n = __fsub_rn(__fadd_rn(__fmul_rn(xc, 1.44269504f), kMagic), kMagic);
    const float r = __fsub_rn(__fsub_rn(xc, __fmul_rn(n, 0.693145752f)), __fmul_rn(n, 1.42860677e-6f));
    constexpr float c720 = 1.0f / 720.0f, c120 = 1.0f / 120.0f, c24 = 1.0f / 24.0f, c6 = 1.0f / 6.0f;
    float p = c720;
    p = __fadd_rn(__fmul_rn(p, r), c120);
    p = __fadd_rn(__fmul_rn(p, r), c24);
    p = __fadd_rn(__fmul_rn(p, r), c6);
    p = __fadd_rn(__fmul_rn(p, r), 0.5f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f);
    const float scale = __uint_as_float(uint32_t(int32_t(n) + 127) << 23);
    return tiny ? 0.0f : __fmul_rn(p, scale);
}

// runtime/sampling_weights.cpp's weight.
__device__ __forceinline__ float weight_of(float logit, float max_logit, float temperature) {
    const float e = exp_nonpositive_rn(__fdiv_rn(__fsub_rn(logit, max_logit), temperature));
    return logit == max_logit ? 1.0f : e;
}

// The better of two (value, index) candidates for the row's maximum: the larger value, the lower index among equal
// ones (the host's first index of the maximum). A thread that saw nothing holds (-inf, INT_MAX), which loses to any
// element, -inf included.
__device__ __forceinline__ void keep_max(float& m, int& at, float other_m, int other_at) {
    if (other_m > m || (other_m == m && other_at < at)) m = other_m, at = other_at;
}

__global__ void __launch_bounds__(kThreads) sample_rows_kernel(SampleParams p) {
    __shared__ double block_sums[kMaxDrawVocab / kDrawBlock];
    __shared__ float warp_max[kWarps];
    __shared__ int warp_at[kWarps], warp_nan[kWarps], warp_offset[kWarps];
    __shared__ float row_max, staged[kDrawBlock];  // staged: the walked block's weights
    __shared__ int row_nan, row_argmax, candidates_n;
    __shared__ int64_t walk_block;
    __shared__ double walk_before, walk_target;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int64_t V = p.vocab, draw = blockIdx.x;
    const RowDraw d = p.draws[draw];
    float* logits = p.logits + int64_t(d.logits_row) * V;
    const float kNegInf = -__int_as_float(0x7f800000);

    // 1. The maximum, its first index and whether a NaN is in the row, in one coalesced pass with kUnroll loads in
    //    flight per thread (each thread meets its elements in ascending order, so a strict > keeps its first).
    float m = kNegInf;
    int at = INT_MAX, nan = 0;
    for (int64_t base = tid; base < V; base += int64_t(kThreads) * kUnroll) {
        float v[kUnroll];
#pragma unroll
        for (int q = 0; q < kUnroll; ++q) v[q] = base + q * kThreads < V ? logits[base + q * kThreads] : kNegInf;
#pragma unroll
        for (int q = 0; q < kUnroll; ++q) {
            const int64_t i = base + q * kThreads;
            if (i < V) {
                nan |= v[q] != v[q];
                keep_max(m, at, v[q], int(i));
            }
        }
    }
    for (int o = 16; o; o /= 2) {
        keep_max(m, at, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, at, o));
        nan |= __shfl_xor_sync(0xffffffffu, nan, o);
    }
    if (lane == 0) warp_max[warp] = m, warp_at[warp] = at, warp_nan[warp] = nan;
    __syncthreads();
    if (tid == 0) {
        for (int w = 1; w < kWarps; ++w) keep_max(m, at, warp_max[w], warp_at[w]), nan |= warp_nan[w];
        row_nan = nan, row_argmax = at;
        row_max = logits[at];  // the host's max_logit: the value at the first index of the maximum
    }
    __syncthreads();
    if (row_nan) {
        if (tid == 0) p.ids[draw] = -1;
        return;
    }
    if (d.greedy) {
        if (tid == 0) p.ids[draw] = row_argmax;
        return;
    }

    // 2. The weights, in place of the logits, and the candidates (min-p) in id order. Warp w owns a segment of whole
    //    32-id steps; a lane computes the ids step + lane, so the loads and stores are coalesced and the ids a warp
    //    keeps at each step are in order (ballot). The segments' counts give each warp where its candidates go.
    const float max_logit = row_max;
    const bool filter = d.min_p > 0.0f;
    const int64_t segment = ((V + kWarps - 1) / kWarps + 31) / 32 * 32;
    const int64_t s0 = min(V, warp * segment), s1 = min(V, s0 + segment);
    int count = 0;
    for (int64_t step = s0; step < s1; step += 32 * kUnroll) {
        float v[kUnroll];
#pragma unroll
        for (int q = 0; q < kUnroll; ++q) {
            const int64_t i = step + q * 32 + lane;
            v[q] = i < s1 ? logits[i] : 0.0f;
        }
#pragma unroll
        for (int q = 0; q < kUnroll; ++q) {
            const int64_t i = step + q * 32 + lane;
            const float wi = weight_of(v[q], max_logit, d.temperature);
            if (i < s1) logits[i] = wi;
            count += __popc(__ballot_sync(0xffffffffu, i < s1 && wi >= d.min_p));
        }
    }
    if (lane == 0) warp_offset[warp] = count;
    __syncthreads();
    if (tid == 0) {
        int total = 0;
        for (int w = 0; w < kWarps; ++w) {
            const int c = warp_offset[w];
            warp_offset[w] = total;
            total += c;
        }
        candidates_n = total;
    }
    __syncthreads();
    const float* w = logits;
    int32_t* cand = p.candidates + draw * V;
    if (filter) {
        // The same ids by the same lanes as above: each lane reads back only weights it wrote.
        int next = warp_offset[warp];
        for (int64_t step = s0; step < s1; step += 32 * kUnroll) {
            float v[kUnroll];
#pragma unroll
            for (int q = 0; q < kUnroll; ++q) {
                const int64_t i = step + q * 32 + lane;
                v[q] = i < s1 ? w[i] : 0.0f;
            }
#pragma unroll
            for (int q = 0; q < kUnroll; ++q) {
                const int64_t i = step + q * 32 + lane;
                const bool keep = i < s1 && v[q] >= d.min_p;
                const unsigned kept = __ballot_sync(0xffffffffu, keep);
                if (keep) cand[next + __popc(kept & ((1u << lane) - 1))] = int32_t(i);
                next += __popc(kept);
            }
        }
        __syncthreads();  // the candidates, written by every warp, read by others below
    }
    const int64_t n = filter ? candidates_n : V;
    auto id_at = [&](int64_t j) { return filter ? cand[j] : int32_t(j); };

    // 3. Each block's sum, in candidate order from 0: one thread per block. The additions are a chain (their order
    //    is the definition); the loads are not, so they are issued kAhead at a time before the additions.
    const int64_t blocks = (n + kDrawBlock - 1) / kDrawBlock;
    for (int64_t b = tid; b < blocks; b += kThreads) {
        const int64_t j0 = b * kDrawBlock, j1 = min(n, j0 + kDrawBlock);
        double s = 0.0;
        for (int64_t j = j0; j < j1; j += kAhead) {
            float v[kAhead];
#pragma unroll
            for (int q = 0; q < kAhead; ++q) v[q] = j + q < j1 ? w[id_at(j + q)] : 0.0f;
#pragma unroll
            for (int q = 0; q < kAhead; ++q)
                if (j + q < j1) s += double(v[q]);
        }
        block_sums[b] = s;
    }
    __syncthreads();

    // 4, 5. The walk: thread 0 finds the block whose running sum passes u x total; the block's weights are staged in
    //       shared memory by every thread; thread 0 walks them.
    if (tid == 0) {
        double total = 0.0;
        for (int64_t b = 0; b < blocks; ++b) total += block_sums[b];
        const double target = d.u * total;
        double before = 0.0;
        int64_t chosen = -1;
        for (int64_t b = 0; b < blocks && chosen < 0; ++b) {
            if (before + block_sums[b] > target)
                chosen = b;
            else
                before += block_sums[b];
        }
        walk_block = chosen, walk_before = before, walk_target = target;
    }
    __syncthreads();
    if (walk_block < 0) {  // no block passes it (rounding): the last candidate
        if (tid == 0) p.ids[draw] = id_at(n - 1);
        return;
    }
    const int64_t j0 = walk_block * kDrawBlock, j1 = min(n, j0 + kDrawBlock);
    for (int64_t j = j0 + tid; j < j1; j += kThreads) staged[j - j0] = w[id_at(j)];
    __syncthreads();
    if (tid == 0) {
        const double before = walk_before, target = walk_target;
        int64_t pick = j1 - 1;
        double run = 0.0;
        for (int64_t j = j0; j < j1; ++j)
            if (before + (run += double(staged[j - j0])) > target) {
                pick = j;
                break;
            }
        p.ids[draw] = id_at(pick);
    }
}

}  // namespace

namespace detail {
void launch_sample_rows(const SampleParams& p, cudaStream_t stream) {
    sample_rows_kernel<<<unsigned(p.draws_count), kThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}
}  // namespace detail

}  // namespace dsv4::cuda
