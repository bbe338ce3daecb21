// sample_rows (sampling.h) in five kernels, each row cut into `segments` segments of whole 512-id tiles, one CTA
// per (segment, row) in the passes over the row, so a small batch's rows spread over the GPU (at one draw the
// time is latency). The steps as runtime/sampler.cpp computes them:
//  1. scan:    each segment's maximum, its first index and whether it holds a NaN (coalesced, loads in flight).
//  2. weights: every CTA reduces its row's segments (a NaN: id -1; greedy: the first index of the maximum, done);
//              otherwise its segment's weights (exp_nonpositive of runtime/sampling_weights.h with each operation
//              rounded on its own, as the host, built without contraction, does) in place of the logits, and under
//              min-p each warp's count of candidates.
//  3. compact: under min-p, the candidates' ids in id order (each warp's place from the counts before it).
//  4. sums:    each block's sum in double by one thread in candidate order from 0, the blocks spread over small
//              CTAs (a sum is a chain of 1,024 dependent additions fed by loads: many SMs feed more of them at once).
//  5. walk:    one CTA per row: thread 0 walks the block sums for the total and the first block whose running sum
//              passes u x total, and in it (staged in shared memory) the first candidate where the sum before the
//              block plus the block's running sum passes it.
#include <climits>
#include <cstdint>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/sampling/sampling.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 512, kWarps = kThreads / 32;
constexpr int kUnroll = 8;  // loads in flight per thread in the passes over the row
constexpr int kAhead = 32;  // loads in flight per thread while a block's sum is added up
constexpr int kWalkThreads = 256;
constexpr int kSumThreads = 8;  // blocks summed per CTA of step 4
constexpr int kMaxBlocks = int(kMaxDrawVocab / kDrawBlock);
constexpr int64_t kTile = kThreads;  // segments are whole tiles: each warp's part is whole 32-id steps
static_assert(kDrawBlock / kWalkThreads * kWalkThreads == kDrawBlock, "the walked block is staged in whole rounds");

// A segment's results: its maximum (the value at `at`), the first index holding it (INT_MAX: the segment is
// empty), whether it holds a NaN, and (min-p) each warp's count of candidates.
struct DrawSegment {
    float max;
    int32_t at, nan;
    int32_t warp_count[kWarps];
};

struct Layout {
    int32_t* candidates;    // [draws, vocab]
    DrawSegment* segments;  // [draws, kMaxDrawSegments]
    double* block_sums;     // [draws, kMaxBlocks]
};
__host__ __device__ inline size_t candidates_bytes(int64_t draws, int64_t vocab) {
    return (size_t(draws * vocab) * sizeof(int32_t) + 255) / 256 * 256;
}
__host__ __device__ inline size_t segments_bytes(int64_t draws) {
    return (size_t(draws) * kMaxDrawSegments * sizeof(DrawSegment) + 255) / 256 * 256;
}
__device__ inline Layout layout_of(const SampleParams& p) {
    uint8_t* base = static_cast<uint8_t*>(p.scratch);
    const size_t c = candidates_bytes(p.draws_count, p.vocab), g = segments_bytes(p.draws_count);
    return {reinterpret_cast<int32_t*>(base), reinterpret_cast<DrawSegment*>(base + c),
            reinterpret_cast<double*>(base + c + g)};
}

// Segment s of a row: ids [begin, end), whole tiles.
struct Segment {
    int64_t begin, end;
};
__device__ inline Segment segment_of(int64_t vocab, int segments, int s) {
    const int64_t tiles = (vocab + kTile - 1) / kTile, per = (tiles + segments - 1) / segments;
    return {min(vocab, s * per * kTile), min(vocab, (s + 1) * per * kTile)};
}

// Warp `warp`'s part of segment `s`: whole 32-id steps, a lane taking the ids step + lane (steps 2 and 3 alike, so
// a lane reads back in step 3 only the weights it wrote in step 2).
__device__ inline Segment warp_part(int64_t vocab, int segments, int s, int warp) {
    const Segment g = segment_of(vocab, segments, s);
    const int64_t part = (g.end - g.begin + kWarps * 32 - 1) / (kWarps * 32) * 32;
    const int64_t begin = min(g.end, g.begin + warp * part);
    return {begin, min(g.end, begin + part)};
}

// A lane's values of the kUnroll 32-id steps from `step` (0 at or past `end`), all loaded before any is used.
__device__ __forceinline__ void load_steps(const float* row, int64_t step, int64_t end, int lane, float (&v)[kUnroll]) {
#pragma unroll
    for (int q = 0; q < kUnroll; ++q) {
        const int64_t i = step + q * 32 + lane;
        v[q] = i < end ? row[i] : 0.0f;
    }
}

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
// ones (the host's first index of the maximum). Nothing seen is (-inf, INT_MAX), which loses to any element.
__device__ __forceinline__ void keep_max(float& m, int& at, float other_m, int other_at) {
    if (other_m > m || (other_m == m && other_at < at)) m = other_m, at = other_at;
}

__device__ __forceinline__ float* row_of(const SampleParams& p, const RowDraw& d) {
    return p.logits + int64_t(d.logits_row) * p.vocab;
}

// The row's maximum, first index and NaN flag from its segments' (every thread gets them).
struct RowMax {
    float max;
    int at, nan;
};
__device__ RowMax reduce_segments(const DrawSegment* seg, int segments) {
    __shared__ RowMax row;
    if (threadIdx.x < 32) {
        float m = -__int_as_float(0x7f800000);
        int at = INT_MAX, nan = 0;
        for (int s = threadIdx.x; s < segments; s += 32) keep_max(m, at, seg[s].max, seg[s].at), nan |= seg[s].nan;
        for (int o = 16; o; o /= 2) {
            keep_max(m, at, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, at, o));
            nan |= __shfl_xor_sync(0xffffffffu, nan, o);
        }
        if (threadIdx.x == 0) row = {m, at, nan};
    }
    __syncthreads();
    return row;
}

// 1. Each segment's maximum, its first index and whether it holds a NaN: a thread meets its ids in ascending order,
//    so a strict > keeps its first.
__global__ void __launch_bounds__(kThreads) draw_scan_kernel(SampleParams p) {
    __shared__ float warp_max[kWarps];
    __shared__ int warp_at[kWarps], warp_nan[kWarps];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, s = blockIdx.x;
    const RowDraw d = p.draws[blockIdx.y];
    const float* logits = row_of(p, d);
    const Segment g = segment_of(p.vocab, p.segments, s);
    const float neg_inf = -__int_as_float(0x7f800000);
    float m = neg_inf;
    int at = INT_MAX, nan = 0;
    for (int64_t base = g.begin + tid; base < g.end; base += int64_t(kThreads) * kUnroll) {
        float v[kUnroll];
#pragma unroll
        for (int q = 0; q < kUnroll; ++q) v[q] = base + q * kThreads < g.end ? logits[base + q * kThreads] : neg_inf;
#pragma unroll
        for (int q = 0; q < kUnroll; ++q)
            if (base + q * kThreads < g.end) nan |= v[q] != v[q], keep_max(m, at, v[q], int(base + q * kThreads));
    }
    for (int o = 16; o; o /= 2) {
        keep_max(m, at, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, at, o));
        nan |= __shfl_xor_sync(0xffffffffu, nan, o);
    }
    if (lane == 0) warp_max[warp] = m, warp_at[warp] = at, warp_nan[warp] = nan;
    __syncthreads();
    if (tid == 0) {
        for (int w = 1; w < kWarps; ++w) keep_max(m, at, warp_max[w], warp_at[w]), nan |= warp_nan[w];
        DrawSegment& out = layout_of(p).segments[blockIdx.y * kMaxDrawSegments + s];
        out.max = m, out.at = at, out.nan = nan;
    }
}

// 2. The row's maximum from its segments; the greedy and NaN rows end here (segment 0's CTA writes the id). Else
//    the segment's weights in place of its logits and (min-p) each warp's count of candidates, by warp parts
//    (warp_part: coalesced, and the compaction keeps id order).
__global__ void __launch_bounds__(kThreads) draw_weights_kernel(SampleParams p) {
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, s = blockIdx.x;
    const RowDraw d = p.draws[blockIdx.y];
    DrawSegment* seg = layout_of(p).segments + blockIdx.y * kMaxDrawSegments;
    const RowMax row = reduce_segments(seg, p.segments);
    if (row.nan || d.greedy) {
        if (s == 0 && tid == 0) p.ids[blockIdx.y] = row.nan ? -1 : row.at;
        return;
    }
    float* logits = row_of(p, d);
    const auto [w0, w1] = warp_part(p.vocab, p.segments, s, warp);
    int count = 0;
    for (int64_t step = w0; step < w1; step += 32 * kUnroll) {
        float v[kUnroll];
        load_steps(logits, step, w1, lane, v);
#pragma unroll
        for (int q = 0; q < kUnroll; ++q) {
            const int64_t i = step + q * 32 + lane;
            const float wi = weight_of(v[q], row.max, d.temperature);
            if (i < w1) logits[i] = wi;
            count += __popc(__ballot_sync(0xffffffffu, i < w1 && wi >= d.min_p));
        }
    }
    if (lane == 0) seg[s].warp_count[warp] = count;
}

// The candidates before warp `warp` of segment `s`, and (all) in the row: from the warps' counts.
__device__ int candidates_before(const DrawSegment* seg, int segments, int s, int warp) {
    int before = 0;
    for (int t = 0; t < s; ++t)
        for (int w = 0; w < kWarps; ++w) before += seg[t].warp_count[w];
    for (int w = 0; w < warp; ++w) before += seg[s].warp_count[w];
    return before;
}

// 3. Under min-p, the candidates' ids in id order, each warp from its place after the candidates before it.
__global__ void __launch_bounds__(kThreads) draw_compact_kernel(SampleParams p) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, s = blockIdx.x;
    const RowDraw d = p.draws[blockIdx.y];
    if (d.greedy || !(d.min_p > 0.0f)) return;
    const Layout l = layout_of(p);
    const DrawSegment* seg = l.segments + blockIdx.y * kMaxDrawSegments;
    if (reduce_segments(seg, p.segments).nan) return;
    const float* w = row_of(p, d);
    int32_t* cand = l.candidates + blockIdx.y * p.vocab;
    const auto [w0, w1] = warp_part(p.vocab, p.segments, s, warp);
    int next = candidates_before(seg, p.segments, s, warp);
    for (int64_t step = w0; step < w1; step += 32 * kUnroll) {
        float v[kUnroll];
        load_steps(w, step, w1, lane, v);
#pragma unroll
        for (int q = 0; q < kUnroll; ++q) {
            const int64_t i = step + q * 32 + lane;
            const bool keep = i < w1 && v[q] >= d.min_p;
            const unsigned kept = __ballot_sync(0xffffffffu, keep);
            if (keep) cand[next + __popc(kept & ((1u << lane) - 1))] = int32_t(i);
            next += __popc(kept);
        }
    }
}

// The row's candidates (min-p: counted in step 2) and, for steps 4 and 5, whether the row goes on (not greedy, no NaN).
struct Candidates {
    bool drawn;
    int64_t n;
};
__device__ Candidates candidates_of(const SampleParams& p, const RowDraw& d, const DrawSegment* seg) {
    if (d.greedy || reduce_segments(seg, p.segments).nan) return {false, 0};
    return {true, d.min_p > 0.0f ? candidates_before(seg, p.segments, p.segments, 0) : p.vocab};
}

// 4. Each block's sum in candidate order from 0, one thread per block. The additions are a chain (their order is
//    the definition); the loads are not, so they are issued kAhead at a time before the additions.
__global__ void __launch_bounds__(32) draw_sums_kernel(SampleParams p) {
    const RowDraw d = p.draws[blockIdx.y];
    const Layout l = layout_of(p);
    const Candidates c = candidates_of(p, d, l.segments + blockIdx.y * kMaxDrawSegments);
    const int64_t b = int64_t(blockIdx.x) * kSumThreads + threadIdx.x, j0 = b * kDrawBlock;
    if (!c.drawn || threadIdx.x >= kSumThreads || j0 >= c.n) return;
    const float* w = row_of(p, d);
    const int32_t* cand = l.candidates + blockIdx.y * p.vocab;
    const bool filter = d.min_p > 0.0f;
    const int64_t j1 = min(c.n, j0 + kDrawBlock);
    double sum = 0.0;
    for (int64_t j = j0; j < j1; j += kAhead) {
        float v[kAhead];
#pragma unroll
        for (int q = 0; q < kAhead; ++q) v[q] = j + q < j1 ? w[filter ? cand[j + q] : j + q] : 0.0f;
#pragma unroll
        for (int q = 0; q < kAhead; ++q)
            if (j + q < j1) sum += double(v[q]);
    }
    l.block_sums[blockIdx.y * kMaxBlocks + b] = sum;
}

// 5. The walk, one CTA per row.
__global__ void __launch_bounds__(kWalkThreads) draw_walk_kernel(SampleParams p) {
    __shared__ float staged[kDrawBlock];  // the walked block's weights
    __shared__ int64_t walk_block;
    __shared__ double walk_before, walk_target;
    const int tid = threadIdx.x;
    const RowDraw d = p.draws[blockIdx.x];
    const Layout l = layout_of(p);
    const Candidates c = candidates_of(p, d, l.segments + blockIdx.x * kMaxDrawSegments);
    if (!c.drawn) return;
    const float* w = row_of(p, d);
    const int32_t* cand = l.candidates + blockIdx.x * p.vocab;
    const bool filter = d.min_p > 0.0f;
    const int64_t n = c.n;
    auto id_at = [&](int64_t j) { return filter ? cand[j] : int32_t(j); };
    const double* block_sums = l.block_sums + blockIdx.x * kMaxBlocks;
    const int64_t blocks = (n + kDrawBlock - 1) / kDrawBlock;
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
        if (tid == 0) p.ids[blockIdx.x] = id_at(n - 1);
        return;
    }
    const int64_t j0 = walk_block * kDrawBlock, j1 = min(n, j0 + kDrawBlock);
    for (int64_t j = j0 + tid; j < j1; j += kWalkThreads) staged[j - j0] = w[id_at(j)];
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
        p.ids[blockIdx.x] = id_at(pick);
    }
}

}  // namespace

namespace detail {
size_t draw_scratch_bytes(int64_t draws_count, int64_t vocab) {
    return candidates_bytes(draws_count, vocab) + segments_bytes(draws_count) +
           size_t(draws_count) * kMaxBlocks * sizeof(double);
}

void launch_sample_rows(const SampleParams& p, cudaStream_t stream) {
    const dim3 passes(unsigned(p.segments), unsigned(p.draws_count));
    draw_scan_kernel<<<passes, kThreads, 0, stream>>>(p);
    draw_weights_kernel<<<passes, kThreads, 0, stream>>>(p);
    draw_compact_kernel<<<passes, kThreads, 0, stream>>>(p);
    const int64_t blocks = (p.vocab + kDrawBlock - 1) / kDrawBlock;
    draw_sums_kernel<<<dim3(unsigned((blocks + kSumThreads - 1) / kSumThreads), unsigned(p.draws_count)), 32, 0,
                       stream>>>(p);
    draw_walk_kernel<<<unsigned(p.draws_count), kWalkThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}
}  // namespace detail

}  // namespace dsv4::cuda
