// The attention's inputs from the query and KV projections, in one launch: what head_rms_norm, apply_ropes and
// pack_kv_entries do to them between wq_b and the sparse attention (cuda_attention.cpp, steps 1 and 2):
//   q  [tokens, heads, head_dim]  the per-head RMS norm, then RoPE on each head's trailing rope_dim channels;
//   kv [tokens, head_dim]         RoPE on its trailing rope_dim channels, then packed (FP8 nope, bf16 rope, UE8M0
//                                 scales) into entry t of `entries` and, when `ring` is set, also into ring entry
//                                 ring_slots[t] (< 0: none).
// Each value is computed by the operations of the separate kernels (the shared device code of head_rms_norm_factor,
// rope_cos_sin / rope_rotate and the FP8 codec), so the same bits; tests/gpu/attention_inputs_test.cpp compares
// them bitwise. The ring copy is the executor's to time: it may be written here only when no row of the launch still
// reads the ring entry it replaces (a decode step: one token per sequence).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

struct AttentionInputsParams {
    __nv_bfloat16* q = nullptr;          // [tokens, heads, head_dim], in place
    __nv_bfloat16* kv = nullptr;         // [tokens, head_dim], in place (RoPE)
    const float* inv_freq = nullptr;     // [rope_dim / 2] (cpu::make_rope_table(...).inv_freq)
    const int32_t* positions = nullptr;  // [tokens] absolute positions
    uint8_t* entries = nullptr;          // [tokens, entry bytes]: row t -> entry t
    uint8_t* ring = nullptr;             // optional: [*, entry bytes], row t -> entry ring_slots[t]
    const int32_t* ring_slots = nullptr;
    int64_t tokens = 0, heads = 0, head_dim = 0, rope_dim = 0;
    float eps = 0.0f;  // the head norm's
    // Optional instrument of the fused kernel (common/phase_clock.cuh; null in the model): in the q CTAs marks 1 (the
    // token's cos/sin table built), 2 (warp 0's head norm factor: its loads, squares and lane 0's serial sum) and 3
    // (its head stored); in the kv CTAs 4 (the rows rotated and coded) and 5 (the entries stored).
    int64_t* phase_clock = nullptr;
};
void attention_inputs(const AttentionInputsParams& p, cudaStream_t stream);

// kFused: one kernel (warps per q head and per kv row), for pieces of up to kMaxFusedHeads q heads (decode batches
// of V4 up to 256 sequences) and shapes with head_dim <= 1024, even head and rope dims, rope_dim <= 256 and a nope
// part of whole 64-value scale blocks (every V4 and fixture shape). kSeparate: the four launches it replaces, for
// longer pieces and any other shape (the same bits either way). Why the bound (dsv4_bench_decode_kernels inputs,
// one H100): the fused kernel takes 7.4 us for 1 token where the launches take 14.0 (11.6 against 20.0 at 64), and
// at 256 tokens they are even (39.4 against 37.6 us, 41.5 with the ring): each CTA of 8 heads builds its token's
// cos/sin table (a double sincos per pair, which the RoPE kernel shares over 32 heads) and waits for it. Giving
// warps several heads to share the table in long pieces was slower still (186 against 124 us at 1,024 tokens).
inline constexpr int64_t kMaxFusedHeads = 256 * 64;
enum class AttentionInputsPath { kFused, kSeparate };
AttentionInputsPath attention_inputs_path(const AttentionInputsParams& p);

namespace detail {
void launch_attention_inputs(const AttentionInputsParams& p, cudaStream_t stream);  // kFused, tokens > 0
}  // namespace detail

}  // namespace dsv4::cuda
