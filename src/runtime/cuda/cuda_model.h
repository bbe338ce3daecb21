// CudaModel: the whole DeepSeek-V4 forward on one GPU in `model` numerics (docs/numerics.md, docs/gpu-design.md),
// step for step the function CpuModel computes: same rounding points, same slot order in attention, same tie rules
// in the router and indexer top-k. Weights are uploaded once in their checkpoint formats; per-sequence state (the
// window ring of packed FP8 entries, compressed entries, indexer keys, compressor states) lives in a device pool of
// `max_sequences` slots of `max_context` positions. A piece holds the tokens of one or more sequences; a decode step
// of B sequences (one token each) is one piece, replayed from a CUDA graph captured for B, and synchronizes only for
// the logits copy (routing, top-k, positions and slots live in device buffers the graph reads). Prefill chunks longer than
// max_chunk_tokens run as several pieces, which is exact: the forward is chunk-invariant.
// Tested against CpuModel on every fixture: end to end in tests/gpu/cuda_model_test.cpp, block by block (teacher
// forcing, forward_block) in tests/gpu/cuda_layer_test.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/backend.h"
#include "model/expert_range.h"
#include "model/weights.h"
#include "runtime/stage_profile.h"

namespace dsv4 {

// The collectives of a run over several GPUs (NcclGroup, nccl_group.h), on `stream`; capturable in a CUDA graph
// where the decode graphs need them (NCCL is).
class RankCollectives {
  public:
    virtual ~RankCollectives() = default;
    // Sums a bf16 buffer over the ranks, in place.
    virtual void sum_bf16(void* data, int64_t count, cudaStream_t stream) = 0;
    // One buffer of a gather: rank r's rank_rows[r] rows of row_bytes each, read from its `local`, land in `all` at
    // row sum(rank_rows[0 .. r)) on every rank (rank-major). `local` may be that very place of `all` (in place).
    struct Rows {
        const void* local = nullptr;
        void* all = nullptr;
        int64_t row_bytes = 0;
    };
    // Gathers every buffer of `buffers` (one launch for all of them); every rank passes the same rank_rows.
    virtual void gather_rows(std::span<const Rows> buffers, std::span<const int64_t> rank_rows,
                             cudaStream_t stream) = 0;
};

// Where the attention half of each layer runs when the routed experts are split over ranks (docs/parallel.md):
//   kReplicated    every rank computes every token's attention (and holds every sequence's cache): no collective
//                  before the experts, the lowest latency at batch 1;
//   kDataParallel  a sequence lives on one rank (its owner, chosen at new_sequence: the rank with the fewest
//                  sequences), which alone computes its attention and holds its cache; the experts' input rows are
//                  gathered from the ranks before the router and every rank combines its own rows after the
//                  exchange, the logits gathered back. Each GPU's cache then holds only its sequences, and a batch's
//                  attention work is split n ways.
enum class AttentionLayout { kReplicated, kDataParallel };

// Expert parallelism (docs/parallel.md): rank r of n holds the routed experts expert_range(E, r, n) of every layer
// and everything else whole. Each rank routes every token, runs its experts' slots, zeroes the others' and sums the
// slot buffer over the ranks: every slot is non-zero on exactly one rank, so the sum is exact and the combine sees
// the bits one GPU computes. Where each token's attention runs: `attention`.
struct ExpertParallel {
    int rank = 0, ranks = 1;
    RankCollectives* comm = nullptr;  // required when ranks > 1; outlives the model
    AttentionLayout attention = AttentionLayout::kReplicated;
    // False on a rank whose logits nobody reads (a follower: its leader returns every item's): its forward calls
    // return no logits, and neither the device-to-host copy nor the host copies are made (at batch 256 that is
    // 132 MB a step per rank through the host's memory).
    bool host_logits = true;
};

// The most tokens a step may hold for CudaOptions::shared_expert_on_one_rank (the FP8 GEMMs' decode tiles).
inline constexpr int64_t kSharedExpertOnOneRankTokens = 16;

// The most tokens a forward piece holds: a piece's kernels launch a grid row per token (hc_post and others:
// gridDim.y), which CUDA caps at 65,535.
inline constexpr int64_t kMaxChunkTokens = 65535;

// Runtime knobs of the GPU executor (not model hyperparameters).
struct CudaOptions {
    int device = 0;
    int64_t max_sequences = 2;       // slots of the state pool (a chat turn may hold two sequences at once); per
                                     // GPU: under data-parallel attention the ranks hold n times as many
    int64_t max_context = 0;         // positions per sequence; 0: min(max_position_embeddings, 16384)
    int64_t pool_positions = 0;      // compressed-cache positions all sequences share (whole pages of 256 positions
                                     // for V4); 0: room for every sequence at max_context
    // Tokens per forward piece (sizes the workspace; bounds a decode batch), at most kMaxChunkTokens; 0: the largest
    // of 8192 .. 256 the free memory allows (runtime/auto_chunk.h; over ranks the smallest rank's choice).
    int64_t max_chunk_tokens = 256;
    bool decode_graphs = true;       // replay decode steps from CUDA graphs (one per batch size, captured on first use)
    // The most decode graphs held at once; capturing one more first destroys the least recently replayed. Under
    // data-parallel attention a graph is keyed by every rank's row count, so a long serving run meets many keys;
    // every rank sees the same keys in the same order and evicts alike.
    int64_t max_decode_graphs = 256;
    bool print_plan = true;          // the memory plan on stderr
    bool show_progress = false;      // the weight upload's progress line on stderr (drawn on a terminal only)
    // One launch for the projections that read one input, where their weights stack (device_weights.h); off: one
    // launch per weight, the same bits (tests compare the two).
    bool stacked_projections = true;
    // The main stream at the device's greatest scheduling priority and the side lane (the shared expert, the
    // compressor and indexer branch, the deferred Sinkhorns) at its least, so that where both have CTAs waiting for
    // an SM the main chain's go first (docs/perf.md, "The main lane first"). Off: equal priorities; the same bits.
    bool prioritize_main_lane = true;
    // Under expert parallelism with the attention replicated, a step of at most kSharedExpertOnOneRankTokens tokens
    // computes the shared expert on one rank only (the one holding the fewest of the step's routed slots, chosen by
    // the routing on the device), into rows the experts' exchange sums: the others skip its weights (docs/parallel.md).
    // Off: every rank computes it. The same bits either way.
    bool shared_expert_on_one_rank = true;
    // A decode step's router and routing in one launch (cuda::router_and_routing; docs/perf.md). Off: two launches,
    // the same bits.
    bool router_with_routing = true;
    // The routed experts' w2 computes its FP8 input from W1 x and W3 x (cuda::MoeGemmSwiglu) where its kernel can
    // (batch-1 decode steps on one GPU): one launch fewer a layer. Off: the SwiGLU's own launch; the same bits.
    bool swiglu_in_w2 = true;
    // The attention's mHC post-mix as the epilogue of its output projection wo_b (cuda::Fp8GemmParams::post_mix)
    // instead of hc_post's own launch after it: one launch fewer a layer. Off: hc_post's launch; the same bits.
    bool post_mix_in_wo_b = true;
    // A batch-1 step's routed-expert passes copy each weight stage by one 2D copy of the tensor-memory accelerator
    // (cuda::MoeGemmParams::tensor_copies; sm_90+), out of the checkpoint's row order: as fast as plain loads, where
    // their 16-byte copies were not (docs/perf.md, "The batch-1 routed-expert passes copy their stages by the
    // tensor-memory accelerator"). Off: their 16-byte copies; the same bits.
    bool expert_tensor_copies = true;
    // The wide routed-expert passes of prefill fold power-of-two block scales into the weights
    // (cuda::MoeGemmParams::fold_scales), where the tensor cores give the promoted passes' bits (scale_fold.h's
    // factors): 6.5 % of an 8k prefill's tokens/s (docs/perf.md, "The scale fold's premise on the tensor cores").
    // Off: every pass promotes; the same bits.
    bool expert_scale_fold = true;
    // The most pinned host memory the logits' copy to the host takes; a piece wanting more logits (every position of
    // a long prefill) goes through it in slices, the same values.
    size_t logit_staging_bytes = size_t(256) << 20;  // a decode step of 519 sequences at V4's vocabulary in one slice
    ExpertParallel expert_parallel;
    // dsv4 bench only: the routed experts are absent from the host weights (no bytes: BenchWeights::build with
    // ExpertBytes::kDevice) and this GPU generates the ones it holds with BenchWeights' rule for this seed
    // (kernels/cuda/random_fill), the same bytes as BenchWeights::build(..., ExpertBytes::kHost). MXFP4 experts only.
    std::optional<uint64_t> random_experts_seed;
};

class CudaModel final : public Backend {
  public:
    // Throws dsv4::Error with a sentence a user can act on: no device, a weight format without a GPU path,
    // reference numerics, or a memory plan that does not fit.
    CudaModel(const ModelConfig& config, ModelWeights weights, Numerics numerics, CudaOptions options = {});
    ~CudaModel() override;
    CudaModel(const CudaModel&) = delete;
    CudaModel& operator=(const CudaModel&) = delete;

    const ModelConfig& config() const override;
    Numerics numerics() const override;
    SequenceState new_sequence() const override;
    // A new slot with the same window ring, compressor states and cache pages (device-to-device copies on the
    // model's stream, ordered before any later forward).
    SequenceState copy_sequence(const SequenceState& state) const override;
    PoolUsage pool_usage() const override;
    // Under data-parallel attention: the rank that owns the sequence, and the sequences each rank holds.
    int placement(const SequenceState& state) const override;
    std::vector<int64_t> sequences_per_placement() const override;
    std::vector<float> forward(SequenceState& state, std::span<const int32_t> ids, bool all_logits) override;
    // The items' tokens packed into shared pieces; a step of one token per sequence is one piece replayed from the
    // decode graph of its batch size. Not thread-safe: one caller at a time (one stream, one workspace).
    std::vector<std::vector<float>> forward_batch(std::span<const BatchItem> items) override;
    void forward_batch_into(std::span<const BatchItem> items, std::vector<std::vector<float>>& logits) override;
    // On the GPU (kernels/cuda/sampling), after the piece's logits: a decode step that draws every item copies no
    // logits. The rank that returns logits only (not a follower, ExpertParallel::host_logits).
    bool draws_tokens() const override;
    std::vector<float> forward_block(SequenceState& state, int64_t layer, int64_t start_position,
                                     std::span<const int32_t> ids, const float* streams_in) override;
    void set_observer(ActivationObserver observer) override;
    // Stage profiling (runtime/stage_profile.h, dsv4 bench --stages): while on, every forward piece records a CUDA
    // event at each stage boundary on the model's stream; a decode step replays a graph of its own, captured with
    // the events as event-record nodes, so its stages are timed as the step runs. Off (the default), nothing is
    // recorded and the plain graphs replay.
    void set_stage_profiling(bool on);
    // The intervals of the last forward piece, in forward order (waits for its end); empty when it ran with the
    // profiler off.
    std::vector<StageTime> stage_times() const;
    // Decode graphs captured and held now (at most CudaOptions::max_decode_graphs).
    size_t decode_graphs_held() const;
    // The tokens of a forward piece: CudaOptions::max_chunk_tokens, or what the memory plan chose for 0.
    int64_t piece_tokens() const;

    struct Impl;

  private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4
