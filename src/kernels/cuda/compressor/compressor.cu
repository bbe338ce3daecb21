// Compressor kernels (see compressor.h). Two launches per chunk:
//   compressor_emit_kernel:  one CTA per chunk row; rows that close a window pool it (per channel, slots in the
//                            CPU order), then bf16 -> RMSNorm -> bf16 -> RoPE -> bf16 -> FP8 or Hadamard + FP4 ->
//                            packed entry. It reads the state as it was before the chunk.
//   compressor_state_kernel: advances each sequence's state past the chunk (what the CPU's token-by-token
//                            compressor_step leaves behind), one thread per (slot phase, column).
// The arithmetic mirrors the CPU reference operation by operation (explicit _rn intrinsics: no FMA contraction,
// pooled sums in slot order, RMSNorm sum of squares in double, the pooling's exp from core/ieee_exp.h as on the
// CPU). Remaining difference from the CPU: libm ulps of cos/sin (computed here in double, then rounded).
#include <cuda_bf16.h>

#include <cfloat>
#include <cstdint>

#include "core/ieee_exp.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/compressor/compressor.h"
#include "kernels/cuda/compressor/entry_codec.cuh"
#include "kernels/cuda/compressor/kv_entry_layout.h"

namespace dsv4::cuda {
namespace {

constexpr int kEmitThreads = 256;
constexpr int kStateThreads = 256;
static_assert(kEmitThreads % 32 == 0 && kEmitThreads >= 64, "whole warps; rope pairs up to 64 per pass");

struct Geometry {
    int width, slots, m;
    bool overlap;
};

__device__ __forceinline__ Geometry geometry(const CompressorParams& p) {
    const bool overlap = p.ratio == 4;
    return Geometry{(overlap ? 2 : 1) * p.head_dim, (overlap ? 2 : 1) * p.ratio, p.ratio, overlap};
}

// The (score + ape, kv) of position q at column `col`: from the chunk row if q was fed in this chunk, else from
// state slot `state_slot` (which already holds score + ape).
__device__ __forceinline__ void fetch(const CompressorParams& p, const Geometry& g, int state, int first_row,
                                      int start, int q, int state_slot, int col, float& z, float& v) {
    if (q >= start) {
        const int64_t at = int64_t(first_row + (q - start)) * p.row_stride + col;
        z = __fadd_rn(p.score[at], p.ape[int64_t(q % g.m) * g.width + col]);
        v = p.kv[at];
    } else {
        const int64_t at = (int64_t(state) * g.slots + state_slot) * g.width + col;
        z = p.state_score[at];
        v = p.state_kv[at];
    }
}

// Block-wide sum of one double per thread (the RMSNorm sum of squares); every thread gets the result.
__device__ double block_sum(double x, double* scratch) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < kEmitThreads / 32; ++w) total += scratch[w];
    __syncthreads();
    return total;
}

__device__ __forceinline__ float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

__global__ void __launch_bounds__(kEmitThreads) compressor_emit_kernel(const CompressorParams p) {
    extern __shared__ float x[];  // [head_dim]: the entry being finished
    __shared__ double scratch[kEmitThreads / 32];

    const int row = blockIdx.x;
    const int seq = p.token_seq[row];
    const int first_row = p.seq_first_row[seq], start = p.seq_start_position[seq], state = p.seq_state[seq];
    const int position = start + (row - first_row);
    const Geometry g = geometry(p);
    if (position % g.m != g.m - 1) return;  // this row closes no window
    const int d = p.head_dim, w = position / g.m, cw = start / g.m;

    // 1. Pool (compressor_step): per channel, softmax over the slots of the gate scores, weighted sum of kv.
    //    Slot order as the CPU: overlap -> previous window (first half columns), then this window (second half).
    for (int ch = threadIdx.x; ch < d; ch += kEmitThreads) {
        auto slot = [&](int sl, float& z, float& v) {
            if (g.overlap && sl < g.m) {
                const int q = (w - 1) * g.m + sl;
                // Before the chunk: window w-1 is either the state's current window (it closes in this chunk)
                // or its previous complete window (slots [0, m), -inf initialized for w == 0).
                const int state_slot = (w - 1 >= cw) ? g.m + sl : sl;
                fetch(p, g, state, first_row, start, q, state_slot, ch, z, v);
            } else {
                const int j = g.overlap ? sl - g.m : sl;
                fetch(p, g, state, first_row, start, w * g.m + j, (g.overlap ? g.m : 0) + j, g.overlap ? d + ch : ch,
                      z, v);
            }
        };
        float max_score = -INFINITY, z, v;
        for (int sl = 0; sl < g.slots; ++sl) {
            slot(sl, z, v);
            max_score = max_score < z ? z : max_score;
        }
        float denom = 0.0f, acc = 0.0f;
        for (int sl = 0; sl < g.slots; ++sl) {
            slot(sl, z, v);
            const float e = isinf(z) ? 0.0f : ieee_expf(__fsub_rn(z, max_score));
            denom = __fadd_rn(denom, e);
            acc = __fadd_rn(acc, __fmul_rn(e, v));
        }
        x[ch] = entry::round_bf16(__fdiv_rn(acc, denom));  // pooled f32 -> bf16 (activation)
    }
    __syncthreads();

    // 2. RMSNorm(weight) in f32 with the sum of squares in double (cpu::rms_norm), then bf16.
    double sq = 0.0;
    for (int ch = threadIdx.x; ch < d; ch += kEmitThreads) sq += double(x[ch]) * double(x[ch]);
    const float mean_sq = __double2float_rn(block_sum(sq, scratch) / double(d));
    const float rsqrt = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, p.eps)));
    for (int ch = threadIdx.x; ch < d; ch += kEmitThreads)
        x[ch] = entry::round_bf16(__fmul_rn(p.norm_weight[ch], __fmul_rn(x[ch], rsqrt)));
    __syncthreads();

    // 3. RoPE on the trailing rope_dim values at the window start (cpu::apply_rope), then bf16.
    const float rope_position = float(position + 1 - g.m);
    for (int i = threadIdx.x; i < p.rope_dim / 2; i += kEmitThreads) {
        float* pair = x + d - p.rope_dim + 2 * i;
        const float angle = __fmul_rn(rope_position, p.rope_inv_freq[i]);
        double sd, cd;
        sincos(double(angle), &sd, &cd);
        const float c = float(cd), s = float(sd), a = pair[0], b = pair[1];
        pair[0] = entry::round_bf16(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
        pair[1] = entry::round_bf16(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
    }
    __syncthreads();

    const int64_t entry_index = w;
    const int64_t pool_row =
        int64_t(p.page_table[int64_t(state) * p.max_pages + entry_index / p.page_size]) * p.page_size +
        entry_index % p.page_size;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    if (p.kind == CompressorKind::kMain) {
        // 4a. FP8 round trip of the nope values in blocks of 64 (a trailing partial block is its own block),
        //     stored as e4m3 codes + UE8M0 exponents; the rope values as bf16.
        const MainEntryLayout layout = main_entry_layout(d, p.rope_dim);
        uint8_t* out = p.cache + pool_row * layout.bytes();
        for (int b = warp; b < layout.scales(); b += kEmitThreads / 32) {
            const int lo = b * int(kKvScaleBlock), hi = min(lo + int(kKvScaleBlock), int(layout.nope));
            float amax = 0.0f;
            for (int i = lo + lane; i < hi; i += 32) amax = fmaxf(amax, fabsf(x[i]));
            amax = fmaxf(warp_max(amax), 1e-4f);
            const uint32_t e = entry::ue8m0_ceil_exponent(__fmul_rn(amax, 1.0f / 448.0f));
            const float s = entry::e8m0_to_f32(e);
            for (int i = lo + lane; i < hi; i += 32) out[i] = entry::f32_to_e4m3(__fdiv_rn(x[i], s));
            if (lane == 0) out[layout.scale_offset() + b] = uint8_t(e);
        }
        if (threadIdx.x == 0 && layout.rope_offset() > layout.nope) out[layout.nope] = 0;  // pad after an odd nope
        // One 16-bit store per value: writing the two bytes of the bf16 separately stored wrong low bytes on the
        // H200 with nvcc 13.0 (st.global.u8 of the cvt.rn.bf16.f32 register; seen in the compressor test).
        uint16_t* rope_out = reinterpret_cast<uint16_t*>(out + layout.rope_offset());  // 2-byte aligned (layout)
        for (int i = threadIdx.x; i < layout.rope; i += kEmitThreads)
            rope_out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[layout.nope + i]));
        for (int i = int(layout.scale_offset() + layout.scales()) + threadIdx.x; i < layout.bytes(); i += kEmitThreads)
            out[i] = 0;
        return;
    }

    // 4b. Indexer keys: Hadamard (in-place butterflies in the CPU's order, then x dim^-0.5) -> bf16 -> FP4 round
    //     trip in blocks of 32, stored as e2m1 pairs + E8M0 exponents.
    for (int h = 1; h < d; h *= 2) {
        for (int k = threadIdx.x; k < d / 2; k += kEmitThreads) {
            const int i = (k / h) * 2 * h + k % h;
            const float a = x[i], b = x[i + h];
            x[i] = __fadd_rn(a, b);
            x[i + h] = __fsub_rn(a, b);
        }
        __syncthreads();
    }
    const float scale = float(1.0 / sqrt(double(d)));
    for (int i = threadIdx.x; i < d; i += kEmitThreads) x[i] = entry::round_bf16(__fmul_rn(x[i], scale));
    __syncthreads();
    const IndexEntryLayout layout{d};
    uint8_t* out = p.cache + pool_row * layout.bytes();
    constexpr float kFloor = 6.0f * 0x1p-126f;
    for (int b = warp; b < layout.scales(); b += kEmitThreads / 32) {
        const int lo = b * int(kIndexScaleBlock), hi = min(lo + int(kIndexScaleBlock), d);
        float amax = 0.0f;
        for (int i = lo + lane; i < hi; i += 32) amax = fmaxf(amax, fabsf(x[i]));
        amax = fmaxf(warp_max(amax), kFloor);
        const uint32_t e = entry::ue8m0_ceil_exponent(__fmul_rn(amax, 1.0f / 6.0f));
        const float s = entry::e8m0_to_f32(e);
        for (int i = lo + 2 * lane; i < hi; i += 64) {
            const uint32_t n0 = entry::f32_to_e2m1(__fdiv_rn(x[i], s));
            const uint32_t n1 = i + 1 < hi ? entry::f32_to_e2m1(__fdiv_rn(x[i + 1], s)) : 0u;
            out[i / 2] = uint8_t(n0 | (n1 << 4));
        }
        if (lane == 0) out[layout.scale_offset() + b] = uint8_t(e);
    }
    for (int i = int(layout.scale_offset() + layout.scales()) + threadIdx.x; i < layout.bytes(); i += kEmitThreads)
        out[i] = 0;
}

// One thread per (sequence, phase j, column): the state compressor_step leaves after the chunk's last token.
__global__ void __launch_bounds__(kStateThreads) compressor_state_kernel(const CompressorParams p) {
    const Geometry g = geometry(p);
    const int seq = blockIdx.y;
    const int idx = blockIdx.x * kStateThreads + threadIdx.x;
    if (idx >= g.m * g.width || p.seq_tokens[seq] == 0) return;
    const int j = idx / g.width, col = idx % g.width;
    const int first_row = p.seq_first_row[seq], start = p.seq_start_position[seq], state = p.seq_state[seq];
    const int end = start + p.seq_tokens[seq];
    const int cur = (g.overlap ? g.m : 0) + j;
    const int64_t cur_at = (int64_t(state) * g.slots + cur) * g.width + col;

    float prev_z = 0.0f, prev_v = 0.0f;
    const int last_closed = end / g.m - 1;  // the last window completely fed by position end - 1
    const bool write_prev = g.overlap && last_closed >= start / g.m;
    if (write_prev) fetch(p, g, state, first_row, start, last_closed * g.m + j, cur, col, prev_z, prev_v);

    const int q_last = (end - 1) - (((end - 1 - j) % g.m) + g.m) % g.m;  // last position with phase j
    if (q_last >= start) {
        float z, v;
        fetch(p, g, state, first_row, start, q_last, cur, col, z, v);
        p.state_score[cur_at] = z;
        p.state_kv[cur_at] = v;
    }
    if (write_prev) {
        const int64_t prev_at = (int64_t(state) * g.slots + j) * g.width + col;
        p.state_score[prev_at] = prev_z;
        p.state_kv[prev_at] = prev_v;
    }
}

}  // namespace

namespace detail {

void compressor_launch(const CompressorParams& p, cudaStream_t stream) {
    if (p.tokens == 0) return;
    const size_t entry_bytes = size_t(p.head_dim) * sizeof(float);
    if (entry_bytes > (size_t(48) << 10))
        DSV4_CUDA_CHECK(cudaFuncSetAttribute(compressor_emit_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             int(entry_bytes)));
    compressor_emit_kernel<<<p.tokens, kEmitThreads, entry_bytes, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
    const int width = (p.ratio == 4 ? 2 : 1) * p.head_dim;
    const dim3 grid((p.ratio * width + kStateThreads - 1) / kStateThreads, p.seqs);
    compressor_state_kernel<<<grid, kStateThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail
}  // namespace dsv4::cuda
