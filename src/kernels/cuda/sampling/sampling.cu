// sample_rows (sampling.h): one CTA of 1024 threads per row. Steps as runtime/sampler.cpp computes them: the row's
// maximum and its first index (a NaN anywhere: id -1); greedy stops there. Then every weight (exp_nonpositive of
// runtime/sampling_weights.h with each operation rounded on its own, as the host, built without contraction, does),
// the candidates (min-p) compacted in id order, each block's sum in double by one thread in candidate order from 0,
// and the walk by thread 0: the block sums in order for the total, then the first block whose running sum passes
// u x total, then in it the first candidate where the sum before the block plus the block's running sum passes it.
#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/sampling/sampling.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 1024;

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

__global__ void __launch_bounds__(kThreads) sample_rows_kernel(SampleParams p) {
    using Scan = cub::BlockScan<int, kThreads>;
    __shared__ typename Scan::TempStorage scan_storage;
    __shared__ double block_sums[kMaxDrawVocab / kDrawBlock];
    __shared__ float warp_max[kThreads / 32];
    __shared__ int warp_flag[kThreads / 32];
    __shared__ float row_max;
    __shared__ int row_nan, row_argmax;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int64_t V = p.vocab, row = blockIdx.x;
    const float* logits = p.logits + row * V;
    const RowDraw d = p.draws[row];

    // 1. The maximum (the host's `x > m ? x : m`; which of two equal values wins does not matter: only == and the
    //    first index of the maximum are used) and whether a NaN is in the row.
    float m = -__int_as_float(0x7f800000);
    int nan = 0;
    for (int64_t i = tid; i < V; i += kThreads) {
        const float x = logits[i];
        m = x > m ? x : m;
        nan |= x != x;
    }
    for (int o = 16; o; o /= 2) {
        const float other = __shfl_xor_sync(0xffffffffu, m, o);
        m = other > m ? other : m;
        nan |= __shfl_xor_sync(0xffffffffu, nan, o);
    }
    if (lane == 0) warp_max[warp] = m, warp_flag[warp] = nan;
    __syncthreads();
    if (tid == 0) {
        float best = warp_max[0];
        int any_nan = warp_flag[0];
        for (int w = 1; w < kThreads / 32; ++w) best = warp_max[w] > best ? warp_max[w] : best, any_nan |= warp_flag[w];
        row_max = best, row_nan = any_nan;
    }
    __syncthreads();
    if (row_nan) {
        if (tid == 0) p.ids[row] = -1;
        return;
    }
    // The first index holding the maximum.
    int first = int(V);
    for (int64_t i = tid; i < V; i += kThreads)
        if (logits[i] == row_max) {
            first = int(i);
            break;
        }
    for (int o = 16; o; o /= 2) first = min(first, __shfl_xor_sync(0xffffffffu, first, o));
    if (lane == 0) warp_flag[warp] = first;
    __syncthreads();
    if (tid == 0) {
        int best = warp_flag[0];
        for (int w = 1; w < kThreads / 32; ++w) best = min(best, warp_flag[w]);
        row_argmax = best;
    }
    __syncthreads();
    if (d.greedy) {
        if (tid == 0) p.ids[row] = row_argmax;
        return;
    }

    // 2. Weights, and the candidates in id order (each thread a contiguous range, so the order is the threads').
    const float max_logit = logits[row_argmax];
    const bool filter = d.min_p > 0.0f;
    float* w = p.weights + row * V;
    int32_t* cand = p.candidates + row * V;
    const int64_t chunk = (V + kThreads - 1) / kThreads, begin = min(V, tid * chunk), end = min(V, begin + chunk);
    int count = 0;
    for (int64_t i = begin; i < end; ++i) {
        const float wi = weight_of(logits[i], max_logit, d.temperature);
        w[i] = wi;
        count += !filter || wi >= d.min_p;
    }
    int offset = 0, n = 0;
    Scan(scan_storage).ExclusiveSum(count, offset, n);
    if (filter)
        for (int64_t i = begin; i < end; ++i)
            if (w[i] >= d.min_p) cand[offset++] = int32_t(i);
    __syncthreads();  // the weights and candidates, written by every thread, read by others below
    auto id_at = [&](int64_t j) { return filter ? cand[j] : int32_t(j); };

    // 3. Each block's sum, in candidate order from 0.
    const int64_t blocks = (n + kDrawBlock - 1) / kDrawBlock;
    for (int64_t b = tid; b < blocks; b += kThreads) {
        double s = 0.0;
        const int64_t j1 = min(int64_t(n), (b + 1) * kDrawBlock);
        for (int64_t j = b * kDrawBlock; j < j1; ++j) s += double(w[id_at(j)]);
        block_sums[b] = s;
    }
    __syncthreads();

    // 4, 5. The walk.
    if (tid == 0) {
        double total = 0.0;
        for (int64_t b = 0; b < blocks; ++b) total += block_sums[b];
        const double target = d.u * total;
        double before = 0.0;
        int32_t id = id_at(n - 1);
        for (int64_t b = 0; b < blocks; ++b) {
            if (before + block_sums[b] > target) {
                const int64_t j1 = min(int64_t(n), (b + 1) * kDrawBlock);
                id = id_at(j1 - 1);
                double run = 0.0;
                for (int64_t j = b * kDrawBlock; j < j1; ++j)
                    if (before + (run += double(w[id_at(j)])) > target) {
                        id = id_at(j);
                        break;
                    }
                break;
            }
            before += block_sums[b];
        }
        p.ids[row] = id;
    }
}

}  // namespace

namespace detail {
void launch_sample_rows(const SampleParams& p, cudaStream_t stream) {
    sample_rows_kernel<<<unsigned(p.rows), kThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}
}  // namespace detail

}  // namespace dsv4::cuda
