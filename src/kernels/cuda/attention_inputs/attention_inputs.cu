// The fused attention-inputs kernel: see attention_inputs.h. One CTA of 8 warps per 8 q heads of a token or 8 kv
// rows. A q warp holds its head as head_rms_norm's warp does (lane l: elements l + 32 j), normalizes it and rotates
// the trailing pairs in registers: a pair's two elements sit in lanes 2a and 2a + 1 of the same j (the rope slice
// starts at an even element), so each lane takes its partner's value by one shuffle. A kv warp holds its row as
// pairs (lane l: elements 64 c + 2 l, + 1), so a lane rotates a whole RoPE pair and, in a nope chunk, owns two
// values of the 64-value scale block, whose amax is a warp max.
#include "kernels/cuda/attention_inputs/attention_inputs.h"

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/common/phase_clock.cuh"
#include "kernels/cuda/quant/fp8_act_codec.cuh"
#include "kernels/cuda/quant/quant.h"
#include "kernels/cuda/rms_norm/head_rms_norm.cuh"
#include "kernels/cuda/rms_norm/rms_norm.h"
#include "kernels/cuda/rope/rope_math.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr unsigned kFull = 0xFFFFFFFFu;
constexpr int kChunk = int(kKvQuantBlock);  // a kv warp's values per step: one scale block
static_assert(kChunk == 64, "a lane holds one pair of each 64-value chunk");

// One head of q (its elements l + 32 j in lane l's held[j], loaded by the caller): the per-head norm, then RoPE of
// its trailing rope_dim channels with the token's table cos_t, sin_t (rope_dim / 2 each). `sq` holds head_dim floats
// (this warp's).
template <int kPer>
__device__ void normalize_and_rotate_head(const AttentionInputsParams& p, __nv_bfloat16* q, const float (&held)[kPer],
                                          float* sq, const float* cos_t, const float* sin_t, int lane) {
    const float r = head_rms_norm_factor(held, sq, p.head_dim, p.eps, lane);
    phase_mark(p.phase_clock, 2);
    const int64_t rope_first = p.head_dim - p.rope_dim;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
        const int64_t i = lane + 32 * j;
        const __nv_bfloat16 normed = f32_to_bf16(__fmul_rn(held[j], r));  // what head_rms_norm stores
        const __nv_bfloat16 partner =
            __ushort_as_bfloat16(__shfl_xor_sync(kFull, __bfloat16_as_ushort(normed), 1));  // every lane shuffles
        if (i >= p.head_dim) continue;
        __nv_bfloat16 out = normed;
        if (i >= rope_first) {  // rope_rotate on the pair, as apply_rope reads it back from q
            const int m = int(i - rope_first) / 2;
            const bool second = (i - rope_first) % 2 != 0;
            __nv_bfloat162 pair;
            pair.x = second ? partner : normed;
            pair.y = second ? normed : partner;
            const __nv_bfloat162 rotated = rope_rotate(pair, cos_t[m], sin_t[m]);
            out = second ? rotated.y : rotated.x;
        }
        q[i] = out;
    }
    phase_mark(p.phase_clock, 3);
}

// Row t of kv: RoPE in place, then the packed entry (pack_kv_entries' format and codec) into entry t and, with a
// ring, into ring entry ring_slots[t]. The row has at most kMaxChunks chunks of 64 values (the kernel's registers
// are those of its larger branch, so the kv warps hold no more than the row needs).
template <int kMaxChunks>
__device__ void rotate_and_pack_kv(const AttentionInputsParams& p, int64_t t, int lane) {
    __nv_bfloat16* x = p.kv + t * p.head_dim;
    const KvEntryLayout l = kv_entry_layout(p.head_dim, p.rope_dim);
    const int chunks = int((p.head_dim + kChunk - 1) / kChunk), nope_chunks = int(l.nope / kChunk);
    // word[c]: lane's pair of chunk c as loaded; then a nope chunk's two e4m3 codes and its scale exponent, a rope
    // chunk's rotated pair.
    uint32_t word[kMaxChunks];
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) {
        const int64_t col = int64_t(c) * kChunk + 2 * lane;
        if (c < chunks && col < p.head_dim) word[c] = *reinterpret_cast<const uint32_t*>(x + col);
    }
    const int32_t position = p.positions[t];
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) {
        if (c >= chunks) break;
        const int64_t col = int64_t(c) * kChunk + 2 * lane;
        __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(&word[c]);
        if (c < nope_chunks) {
            float amax = 0.0f;  // pack_kv_entries' order of maxima
            amax = fmaxf(amax, fabsf(bf16_to_f32(v.x)));
            amax = fmaxf(amax, fabsf(bf16_to_f32(v.y)));
            const uint32_t e = fp8_scale_exponent(group_max<32>(amax));
            const float s = e8m0_to_f32(e);
            word[c] = fp8_code(bf16_to_f32(v.x), s) | uint32_t(fp8_code(bf16_to_f32(v.y), s)) << 8 | e << 16;
        } else if (col < p.head_dim) {
            float co, si;
            rope_cos_sin(position, p.inv_freq[(col - l.nope) / 2], false, co, si);
            v = rope_rotate(v, co, si);
            word[c] = *reinterpret_cast<const uint32_t*>(&v);
            *reinterpret_cast<uint32_t*>(x + col) = word[c];
        }
    }
    phase_mark(p.phase_clock, 4);
    auto store = [&](uint8_t* entry) {
#pragma unroll
        for (int c = 0; c < kMaxChunks; ++c) {
            if (c >= chunks) break;
            const int64_t col = int64_t(c) * kChunk + 2 * lane;
            if (c < nope_chunks) {
                *reinterpret_cast<uint16_t*>(entry + col) = uint16_t(word[c]);
                if (lane == 0) entry[l.scale_offset + c] = uint8_t(word[c] >> 16);
            } else if (col < p.head_dim) {
                *reinterpret_cast<uint32_t*>(entry + l.rope_offset + 2 * (col - l.nope)) = word[c];
            }
        }
        for (int64_t i = l.scale_offset + l.n_scales + lane; i < l.bytes; i += 32) entry[i] = 0;
    };
    store(p.entries + t * l.bytes);
    if (p.ring) {
        const int64_t slot = p.ring_slots[t];
        if (slot >= 0) store(p.ring + slot * l.bytes);
    }
    phase_mark(p.phase_clock, 5);
}

// grid: tokens x groups CTAs of q heads, then ceil(tokens / kWarps) CTAs of kv rows. q CTA (t, g) takes heads
// g kWarps + w of token t in warp w, so its warps share one cos/sin table, built while their loads are in flight.
// Dynamic shared memory: the table, then per warp head_dim squares. At most 64 registers for heads up to 512
// (kPer <= 16, no spill): four CTAs per SM, as head_rms_norm runs, where the 94 the compiler would take allow two.
template <int kPer>
__global__ void __launch_bounds__(kThreads, kPer <= 16 ? 4 : 1)
    attention_inputs_kernel(AttentionInputsParams p, unsigned q_ctas) {
    extern __shared__ float smem[];
    phase_mark(p.phase_clock, 0);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (blockIdx.x < q_ctas) {
        const unsigned groups = unsigned((p.heads + kWarps - 1) / kWarps);
        const int64_t t = blockIdx.x / groups, h = int64_t(blockIdx.x % groups) * kWarps + warp;
        __nv_bfloat16* q = p.q + (t * p.heads + h) * p.head_dim;
        float held[kPer];
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
            const int64_t i = lane + 32 * j;
            held[j] = h < p.heads && i < p.head_dim ? bf16_to_f32(q[i]) : 0.0f;
        }
        const int half = int(p.rope_dim / 2);
        float *cos_t = smem, *sin_t = smem + half;
        const int32_t position = p.positions[t];
        for (int m = threadIdx.x; m < half; m += kThreads)
            rope_cos_sin(position, p.inv_freq[m], false, cos_t[m], sin_t[m]);
        __syncthreads();
        phase_mark(p.phase_clock, 1);
        if (h < p.heads)  // whole warps
            normalize_and_rotate_head<kPer>(p, q, held, smem + p.rope_dim + warp * p.head_dim, cos_t, sin_t, lane);
        return;
    }
    const int64_t t = int64_t(blockIdx.x - q_ctas) * kWarps + warp;
    if (t < p.tokens) rotate_and_pack_kv<kPer / 2>(p, t, lane);  // head_dim <= 32 kPer: at most kPer / 2 chunks
}

}  // namespace

namespace detail {
void launch_attention_inputs(const AttentionInputsParams& p, cudaStream_t stream) {
    const unsigned q_ctas = unsigned(p.tokens * ceil_div(p.heads, int64_t(kWarps)));
    const unsigned kv_ctas = unsigned(ceil_div(p.tokens, int64_t(kWarps)));
    const size_t smem = size_t(p.rope_dim + kWarps * p.head_dim) * sizeof(float);  // <= 33 KiB
    const int64_t per = ceil_div(p.head_dim, int64_t(32));                         // q elements per lane
    auto launch = [&](auto kernel) { kernel<<<q_ctas + kv_ctas, kThreads, smem, stream>>>(p, q_ctas); };
    if (per <= 4)
        launch(attention_inputs_kernel<4>);
    else if (per <= 8)
        launch(attention_inputs_kernel<8>);
    else if (per <= 16)
        launch(attention_inputs_kernel<16>);
    else
        launch(attention_inputs_kernel<32>);
    DSV4_CUDA_CHECK(cudaGetLastError());
}
}  // namespace detail

}  // namespace dsv4::cuda
