// Sparse MQA attention with a sink over packed FP8 cache entries (spec §7.6, docs/gpu-design.md): for every query
// token and every head, o = sum_j P_j v_j / (sum_j exp(l_j - M) + exp(sink_h - M)), l_j = (q . k_j) * scale,
// K = V = the dequantized entry (e4m3 nope x UE8M0 scale, bf16 rope), M the max logit of the token's keys,
// P_j = exp(l_j - M) rounded to bf16 (the rounding point of cpu::sparse_attention_head, in one place in the .cu).
// All heads of a token share each key tile. A token's slots are split over CTAs one 64-key tile per split
// (flash-decoding) with a global max pass first; the splits' results meet either in one cluster per token and head
// group (one kernel, through distributed shared memory) or through a workspace (three kernels): the same bits. The
// split is a function of the slot index only, never of how many tokens share the launch, so a token's output is the
// same bits alone, in a prefill chunk or in a decode batch (tests: SparseAttentionGpu.TokenResultIndependentOfLaunch);
// trailing empty tiles add exact zeros. Output bf16, then the inverse RoPE where the params ask for it. Two paths,
// chosen explicitly by sparse_attention_path: the tensor-core kernels above for the head_dims they are built for (512:
// V4; 128, 96, 80: the repository's fixtures) with rope_dim % 4 == 0 and nope % 8 == 0 (> 0), and a generic CUDA-core
// kernel for every other shape (sparse_attention_generic.cu: one CTA per token and head, the CPU reference's operations
// in its order; slower). Tested in tests/gpu/sparse_attention_test.cpp against cpu::sparse_attention_head on the
// dequantized entries.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

// How a split token's passes meet (SparseAttentionParams::combine). kCluster: the splits of a token and head group
// are one thread-block cluster (at most kMaxClusterSplits) and the max pass, the main pass and the combine are one
// kernel, no workspace; it needs a device that co-schedules such a cluster (else a dsv4::Error). Its CTAs take 64
// heads, or 16 (head_dim 512 and 128: a token's heads over four clusters, for one token on 4x the SMs). kKernels:
// a max kernel, the main kernel and a combine kernel through the workspace. The same arithmetic in the same order,
// so the same bits. kAuto: the cluster (16 heads per CTA first, then 64) where its launch needs no more waves than
// the main kernel's (decode steps of a few tokens; more where the splits are few), the kernels otherwise (one CTA
// per SM: a cluster of 10 takes a GPC). kSequential: one CTA per token and head group walks the token's splits in
// order and sums them as the combine kernel does, no workspace (prefill pieces, where the kernels' workspace traffic
// was most of their time); kAuto takes it where its CTAs (one per SM) fill at least half of the SMs. Same bits.
enum class SparseAttentionCombine { kAuto, kCluster, kKernels, kSequential };
inline constexpr int32_t kMaxClusterSplits = 16;
inline constexpr int32_t kNarrowClusterHeads = 16;  // the cluster's narrow CTAs (head_dim 512, 128); else 64

struct SparseAttentionParams {
    const uint16_t* q;        // [tokens, heads, head_dim] bf16 (normalized, RoPE applied)
    const uint8_t* kv;        // [kv_entries, entry_bytes] packed main entries (kv_entry_layout.h)
    const int32_t* indices;   // [tokens, slots] int32 rows of kv; -1 = empty slot
    const float* sink;        // [heads] f32 attn_sink
    uint16_t* out;            // [tokens, heads, head_dim] bf16
    float* workspace;         // f32 split partial results (the kernels' combine); null when splits == 1
    int64_t workspace_floats = 0;  // its size: tokens run in groups of workspace_floats / per-token need
    int32_t tokens = 0;
    int32_t heads = 0;
    int32_t head_dim = 0;     // 512 (V4), a fixture dim 80, 96, 128, or any other (generic path)
    int32_t rope_dim = 0;     // trailing bf16 dims of the entry, <= head_dim (equal: no nope part)
    int32_t slots = 0;        // slots per token (W + top-k in the model)
    int32_t splits = 1;       // from plan_sparse_attention (tests may force others); the generic path ignores it
    float scale = 0.0f;       // head_dim^-0.5
    SparseAttentionCombine combine = SparseAttentionCombine::kAuto;
    int32_t cluster_heads = 0;  // kCluster: heads per CTA, 16 or 64 (0: 16 where built, else 64); kAuto ignores it
    // Optional (both or neither): the inverse RoPE of the output's trailing rope_dim dims at these positions, with
    // apply_rope's arithmetic (rope_math.cuh), so its bits: in the cluster's combine where that path runs, else by
    // apply_rope after the attention.
    const float* inverse_rope_inv_freq = nullptr;  // [rope_dim / 2]
    const int32_t* positions = nullptr;            // [tokens]
    // Optional instrument of the cluster path (common/phase_clock.cuh; null in the model): its kernel's phase marks,
    // kPhaseValues per CTA.
    int64_t* phase_clock = nullptr;
};

// Plan (pure, host): how many CTAs share one token's slots (one per 64-key tile), and the workspace one token
// needs; a launch needs at least one token's worth and runs its tokens in groups that fit.
struct SparseAttentionPlan {
    int32_t splits = 1;
    int64_t workspace_floats_per_token = 0;
};
SparseAttentionPlan plan_sparse_attention(int32_t heads, int32_t head_dim, int32_t slots);
int64_t sparse_attention_workspace_per_token(int32_t heads, int32_t head_dim, int32_t splits);

enum class SparseAttentionPath { kTensorCore, kGeneric };
SparseAttentionPath sparse_attention_path(int32_t head_dim, int32_t rope_dim);
inline constexpr int32_t kMaxGenericHeadDim = 16384;  // q and the accumulator in shared memory (128 KiB)

// Checks the contract on the host (dsv4::Error), then launches; no allocation, no synchronization.
void sparse_attention(const SparseAttentionParams& params, cudaStream_t stream);

namespace detail {
void sparse_attention_launch(const SparseAttentionParams& params, cudaStream_t stream);
void sparse_attention_generic_launch(const SparseAttentionParams& params, cudaStream_t stream);
// Clusters of `heads_per_cta` (16 or 64) the device holds at once for this launch; 0: it cannot co-schedule one, or
// no cluster kernel is built for that head_dim and head count (16 heads: head_dim 512 and 128).
int64_t sparse_attention_resident_clusters(const SparseAttentionParams& params, int32_t heads_per_cta);
// The combine's choice on the tensor-core path: the cluster's heads per CTA, or 0 for the three kernels.
int32_t sparse_attention_cluster_heads(const SparseAttentionParams& params);
// Whether the tensor-core path takes the sequential kernel (kSequential, or kAuto at enough tokens).
bool sparse_attention_takes_sequential(const SparseAttentionParams& params);
void sparse_attention_sequential_launch(const SparseAttentionParams& params, cudaStream_t stream);
void sparse_attention_cluster_launch(const SparseAttentionParams& params, int32_t heads_per_cta, cudaStream_t stream);
}

}  // namespace dsv4::cuda
