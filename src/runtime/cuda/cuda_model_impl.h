// Internals of CudaModel shared by cuda_model.cpp (construction, memory plan, state pool, the forward loop and
// the head), cuda_layer.cpp (one block, the linear dispatch), cuda_attention.cpp and cuda_moe.cpp (its two
// sub-layers). Not a public header.
#pragma once

#include <cuda_bf16.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cuda/attention_slots/attention_slots.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/compressor/compressor.h"
#include "kernels/cuda/gemm_bf16/cublaslt.h"
#include "kernels/cuda/mhc/mhc.h"
#include "kernels/cuda/moe_routing/moe_routing.h"
#include "kernels/cuda/sampling/sampling.h"
#include "runtime/cuda/cuda_model.h"
#include "runtime/cuda/device_weights.h"
#include "runtime/cuda/stage_marks.h"
#include "runtime/slot_pools.h"

namespace dsv4 {

using bf16 = __nv_bfloat16;

inline constexpr size_t kArenaAlign = 256;  // alignment of every buffer carved from the state and workspace arenas

// Where the per-sequence state lives. Main entries (window ring, the chunk's own entries, compressed entries) are
// rows of one packed-entry pool, so sparse_attention addresses all of them with one int32 row index; indexer keys
// are rows of a second pool. Compressed entries and indexer keys are paged: a page covers page_positions positions
// of one sequence in every compressed layer (page_entries[l] = page_positions / ratio entries of layer l), pages are
// handed out as sequences grow and come back when they end, so sequences of any length share the pool. Layer l:
//   ring          rows ring_row + (l * S + s) * W ... + W  (per sequence slot s: W entries each)
//   compressed    page g: rows compressed_row[l] + g * page_entries[l] ... (entry e of a sequence: its page
//                 table[e / page_entries[l]], offset e % page_entries[l])
//   indexer keys  page g: rows index_row[l] + g * page_entries[l] ...
//   compressor    kv/score [S, slots, width] f32 at state_offset[l] (main) and index_state_offset[l] (indexer)
// The chunk's own window entries are rows chunk_row ... + max_chunk_tokens, shared by all layers and sequences.
struct PoolLayout {
    int64_t sequences = 0, context = 0, chunk = 0;
    int64_t entry_bytes = 0, index_entry_bytes = 0;
    int64_t page_positions = 0, pages = 0, max_pages = 0;  // max_pages: per sequence, ceil(context / page_positions)
    int64_t ring_row = 0, chunk_row = 0, rows = 0, index_rows = 0;
    std::vector<int64_t> compressed_row, index_row, page_entries;  // per layer; -1 / 0 where absent
    std::vector<int64_t> state_offset, index_state_offset;         // per layer, in floats; -1 where absent
    int64_t state_floats = 0;
    int64_t attention_slots(const ModelConfig& c, int64_t layer) const;  // W + compressed slots of the layer
    size_t bytes() const;
};

// A sequence's handle on its slot of the pool: gives the slot and its pages back when the SequenceState goes.
// Under data-parallel attention the sequence lives on rank `rank`, and `pool` is that rank's bookkeeping (every rank
// keeps every rank's, so each decides alike where a sequence goes and whether its pages fit; only the owner's GPU
// holds its state).
struct CudaSequence final : DeviceSequence {
    std::shared_ptr<SlotPool> pool;
    const CudaModel::Impl* owner = nullptr;
    int rank = 0;
    int slot = -1;
    ~CudaSequence() override;
};

// The pool's layout for a model and the executor's options (cuda_pool.cpp).
PoolLayout plan_pool(const ModelConfig& c, const CudaOptions& o);

// One sequence's rows in a forward piece: `tokens` ids at positions start, ...; the logits of rows
// [first_logit, tokens) are appended to *logits, or (with `draw`, one logit row: the item's last) drawn from.
struct PieceSequence {
    int rank = 0;  // the rank that computes its attention (data-parallel attention; else 0)
    int slot = 0;
    int64_t start = 0;
    const int32_t* ids = nullptr;
    int64_t tokens = 0;
    int64_t first_logit = 0;
    std::vector<float>* logits = nullptr;
    TokenDraw* draw = nullptr;
};

// Rows first ... first + count - 1 of the piece's logits (ws.logits), to be appended to *to.
struct LogitRows {
    std::vector<float>* to = nullptr;
    int64_t first = 0, count = 0;
};

// What the launches of a piece need to know on the host: sizes only. Everything per row or per sequence
// (ids, positions, slots, ring targets, which rows want logits) is in the workspace's metadata on the device, so
// a captured decode step replays with whatever metadata the next step uploads.
struct PieceShape {
    int64_t tokens = 0, seqs = 0;
    bool one_token_each = false;  // every sequence of the piece (this rank's) has one token: a decode step
    int64_t logit_rows = 0;  // rows of the head
    bool gather = false;     // the head's rows are ws.logit_rows, not 0 .. logit_rows - 1
    int64_t max_end = 0;     // bound on any sequence's start + tokens: sizes HCA slot lists and indexer columns
    int slot = -1;           // single-sequence pieces (observer downloads): the sequence's slot and start
    int64_t start = 0;
    // Data-parallel attention: the piece is every rank's rows, rank-major; `tokens` and `logit_rows` above are this
    // rank's. The experts run over all moe_tokens rows, of which this rank's are moe_first ...; its logits are rows
    // logit_first ... of the piece's all_logit_rows. One rank (or replicated attention): moe_tokens = tokens,
    // moe_first = logit_first = 0, all_logit_rows = logit_rows.
    int64_t moe_tokens = 0, moe_first = 0;
    int64_t logit_first = 0, all_logit_rows = 0;
    std::vector<int64_t> rank_tokens, rank_logit_rows;  // per rank (one entry without data-parallel attention)
};

// Activation buffers for one forward piece of up to `chunk` tokens; carved from one allocation.
// Rows already quantized for an FP8 GEMM, in act_quant's format: e4m3 codes [rows, cols] and one f32 scale per 128
// values [rows, ceil(cols / 128)].
struct Fp8Rows {
    uint8_t* q = nullptr;
    float* scales = nullptr;
};

struct Workspace {
    int32_t* meta = nullptr;  // the piece's metadata, one host-to-device copy: the arrays below in this order
    int32_t* ids = nullptr;            // [C] token ids
    int32_t* positions = nullptr;      // [C] absolute positions
    int32_t* token_state = nullptr;    // [C] the row's state slot
    int32_t* token_seq = nullptr;      // [C] the row's sequence in the piece
    int32_t* ring_target = nullptr;    // [C] ring entry (slot W + position % W) for the last W rows of a sequence, else -1
    int32_t* logit_rows = nullptr;     // [C] rows whose logits are wanted, in output order
    int32_t* moe_ids = nullptr;        // [C] the token ids of the rows the experts see (every rank's, rank-major)
    int32_t* seq_first_row = nullptr;  // [P] per sequence of the piece (P = min(C, S))
    int32_t* seq_tokens = nullptr;     // [P]
    int32_t* seq_start = nullptr;      // [P]
    int32_t* seq_state = nullptr;      // [P]
    int64_t meta_ints = 0;
    int32_t* page_table = nullptr;     // [S, max_pages] the pool's page table, uploaded with the metadata
    bf16 *streams = nullptr, *streams_next = nullptr;  // [T, n_hc, D]
    float* mix = nullptr;                              // [T, (2 + n_hc) n_hc]
    bf16 *x = nullptr, *y = nullptr;                   // [T, D]
    bf16* qr_kv = nullptr;  // [T, q_lora_rank + d] wq_a x | wkv x, before their norms (stacked projection)
    bf16 *qr = nullptr, *q = nullptr, *kv = nullptr, *kv_view = nullptr, *o = nullptr, *z = nullptr;
    uint8_t* act_q = nullptr;  // FP8 GEMM inputs
    float* act_scale = nullptr;
    // Rows that two or more FP8 GEMMs read, quantized once by the norm that writes them: the normalized block input
    // (attention: wq_a | wkv; FFN: the routed experts' w1 | w3 and the shared expert's s1 | s3) and qr (wq_b, the
    // indexer's wq_b).
    Fp8Rows x_fp8, qr_fp8;
    // The experts' input: ws.x and ws.x_fp8 themselves, or (data-parallel attention) their rows gathered from every
    // rank, rank-major, into buffers of their own.
    bf16* moe_x = nullptr;
    Fp8Rows moe_x_fp8;
    float* y_f32 = nullptr;     // dense linear f32 output
    float* f32_proj = nullptr;  // [T, width] the f32 projections of x side by side (F32Projections)
    bf16 *qi = nullptr, *head_weights = nullptr, *index_scores = nullptr;
    int32_t *selected = nullptr, *attn_indices = nullptr;
    float* attn_partials = nullptr;
    float* router_logits = nullptr;  // [T, E]
    int32_t *experts = nullptr, *counts = nullptr, *offsets = nullptr, *sorted = nullptr, *assignment_slot = nullptr,
            *row_index = nullptr;
    int32_t* shared_rows = nullptr;      // MoeRoutingParams::shared_rows (CudaOptions::shared_expert_on_one_rank)
    cuda::RouterScratch router_scratch;  // cuda::router_and_routing's
    float* routing_weights = nullptr;
    bf16 *gate = nullptr, *up = nullptr, *hidden = nullptr, *routed_out = nullptr, *shared_out = nullptr;
    bf16* shared_gate_up = nullptr;  // [T, 2 I] shared expert: gate | up per row (stacked), or [T, I] gate, [T, I] up
    bf16* shared_hidden = nullptr;   // [T, I] shared expert SwiGLU output
    float* logits = nullptr;  // [T, V]
    // Draws where the logits are (BatchItem::draw; the rank that returns logits only): one per sequence a piece can
    // hold, and sample_rows' scratch for as many.
    cuda::RowDraw* draws = nullptr;
    int32_t* drawn_ids = nullptr;
    void* draw_scratch = nullptr;
    void* gemm = nullptr;     // GEMM workspace
    size_t gemm_bytes = 0;
    // The side lane's scratch (Lane): act_quant rows, dense f32 output and GEMM workspace (of gemm_bytes) for the
    // attention's compressed side and the shared expert, so they run beside the main lane's kernels.
    Fp8Rows side_act;
    float* side_y_f32 = nullptr;
    void* side_gemm = nullptr;
    int64_t attn_partial_floats = 0;
    int64_t index_columns = 0;  // row stride of index_scores
};

// Where a run of launches goes: a stream and the scratch its kernels write besides their outputs. The main lane is
// the piece's stream; the side lane runs, forked from it and joined back: in attention, the f32 projections of x, the
// indexer and the main compressor beside the queries and the window KV (layers that compress); in the MoE, the
// shared expert beside the router, the routed experts and their exchange.
struct Lane {
    cudaStream_t stream = nullptr;
    Fp8Rows act;             // act_quant's output: [rows, cols] e4m3 and [rows, ceil(cols / 128)] f32 scales
    float* y_f32 = nullptr;  // dense linear f32 output
    void* gemm = nullptr;    // FP8 GEMM workspace
    size_t gemm_bytes = 0;
};

// A captured decode step. Captured with the stage profiler on, its event-record nodes stand for `marks`, which
// follow the piece's first `first_mark` marks (recorded outside the graph).
struct DecodeGraph {
    cudaGraphExec_t exec = nullptr;
    size_t first_mark = 0;
    std::vector<StageMark> marks;
    uint64_t last_replay = 0;  // the decode step (Impl::decode_steps) that last replayed it
};

// The f32 projections of x an attention sub-block computed (cuda::f32_projections: compressor and indexer), side by
// side in rows of ws.f32_proj.
struct F32Projections {
    std::vector<const cuda::DeviceMatrix*> weights;  // in cuda::f32_projections order
    std::vector<const float*> outputs;               // [T, weights[i]->rows] f32 each, row stride `width`
    int64_t width = 0;
    const float* of(const cuda::DeviceMatrix& w) const;  // the output of weight w
};

struct CudaModel::Impl {
    ModelConfig config;
    ModelWeights host;
    Numerics numerics;
    CudaOptions options;
    int num_sms = 0;
    std::unique_ptr<cuda::Stream> stream;
    std::unique_ptr<cuda::Stream> side_stream;          // the side lane's (Lane)
    std::unique_ptr<cuda::Event> side_fork, side_join;  // main -> side where it starts, side -> main at the end
    // The compressor lane: on CSA layers the two compressors and the indexer's head weights, forked from the side
    // lane after the f32 projections they read, beside the indexer's queries (Impl::attention).
    std::unique_ptr<cuda::Stream> compressor_stream;
    std::unique_ptr<cuda::Event> compressor_fork, index_keys_ready, compressor_join;
    std::unique_ptr<cuda::CublasLt> lt;
    cuda::DeviceBuffer<uint8_t> weight_arena, state_arena, workspace_arena;
    cuda::DeviceWeights w;
    cuda::DeviceBuffer<float> main_inv_freq, compress_inv_freq;
    PoolLayout pool;
    uint8_t* entries = nullptr;     // [pool.rows, entry_bytes]
    uint8_t* index_keys = nullptr;  // [pool.index_rows, index_entry_bytes]
    float* comp_state = nullptr;    // [pool.state_floats]
    Workspace ws;
    int32_t* meta_host = nullptr;  // pinned [ws.meta_ints + S]
    // Where the logits land on the host: pinned, reused from step to step, grown to what a piece needs up to
    // options.logit_staging_bytes (a piece wanting more goes through it in slices).
    cuda::PinnedBuffer<float> logits_host;
    // Copies a slice's rows out of logits_host into the sequences' vectors, a sequence per task: one thread reads
    // pinned memory at ~10 GB/s, and a batch of 256 at V4's vocabulary is 132 MB a step. Made on first use.
    std::unique_ptr<ThreadPool> logits_pool;
    bool draws = false;  // CudaModel::draws_tokens: this rank draws the items that ask (BatchItem::draw)
    // A piece's draws on their way to the device and their ids on the way back (the rank that draws only).
    cuda::PinnedBuffer<cuda::RowDraw> draws_host;
    cuda::PinnedBuffer<int32_t> drawn_host;
    std::unique_ptr<cuda::Event> meta_copied;
    bool meta_in_flight = false;  // meta_copied not yet known complete by a stream synchronization
    ActivationObserver observer;
    // The slots and pages of every rank that holds sequences (data-parallel attention; else this GPU's alone), the
    // same on every rank, and this GPU's: pools->pool(dp_rank). dp_rank / dp_ranks: this rank and the ranks that
    // split the attention (0 / 1: replicated).
    std::unique_ptr<RankSlotPools> pools;
    std::shared_ptr<SlotPool> slots;
    int dp_rank = 0, dp_ranks = 1;
    bool data_parallel() const { return dp_ranks > 1; }
    // By the rows of each rank (the batch size, one entry without data-parallel attention) and profiler on; on first
    // use.
    std::map<std::pair<std::vector<int64_t>, bool>, DecodeGraph> decode_graphs;
    uint64_t decode_steps = 0;  // decode pieces replayed so far: the clock of the graphs' least-recently-used order
    PieceShape piece;                                               // the piece being enqueued
    ExpertRange held;  // the routed experts of every layer on this GPU (options.expert_parallel)
    bool hash_rows_distinct = true;  // every tid2eid row names k distinct experts (bounds an expert's slots by T)
    StageMarks stages;               // the stage profiler: off unless CudaModel::set_stage_profiling

    // Runs one forward piece (the sequences' rows in order, at most `chunk` tokens and one entry per sequence):
    // a decode piece (one token per sequence, every logit wanted) replays the captured graph of its size, any
    // other piece is enqueued directly. Appends each sequence's logits, or draws its next id (PieceSequence::draw).
    void run_piece(std::span<const PieceSequence> seqs);
    // The end of run_piece for the rows not drawn from: the copies to the host, their vectors in order.
    void copy_logits(std::span<const LogitRows> copies);
    // Everything a piece does on the stream, for `piece`: embedding, blocks, head. No host synchronization, no
    // allocation: it is what a decode graph captures.
    void enqueue_piece();
    void capture_decode_graph(std::vector<int64_t> rank_tokens);
    // Destroys the least recently replayed graphs until at most `keep` are held.
    void evict_decode_graphs(size_t keep);
    // mHC head, final norm and the f32 head of the piece's first `rows` logit rows into `logits` [rows, V].
    void head(int64_t rows, float* logits);
    // Teacher forcing: block `layer` alone on a piece whose input streams ([tokens, n_hc, D] bf16 values) come
    // from the host; the output streams are appended to `streams_out`.
    void run_block_piece(int layer, const CudaSequence& seq, int64_t start, const int32_t* ids, const float* streams_in,
                         int64_t tokens, std::vector<float>& streams_out);
    // A fresh sequence owned by `rank` (data-parallel attention; else 0): a slot in that rank's pool, and on this GPU
    // fresh compressor states when it is this rank's. Throws dsv4::Error when that pool has no free slot.
    SequenceState new_sequence_on(int rank);
    // Checks a forward's input (state of this model, ids in the vocabulary, positions in the pool); returns the
    // sequence's handle.
    const CudaSequence& check_input(const SequenceState& state, int64_t start, std::span<const int32_t> ids);
    // The piece's metadata (this rank's rows; the experts' token ids of every rank's) and the page table to the
    // device (one copy) and `piece` set from it. `seqs`: every rank's sequences, rank-major.
    void upload_piece(std::span<const PieceSequence> seqs);
    // The shape of a piece of every rank's sequences `seqs` (rank-major): this rank's rows and everyone's counts.
    PieceShape shape_of(std::span<const PieceSequence> seqs) const;
    // The same from every rank's rows and logit rows: the experts' rows and logits of the piece and where this
    // rank's begin (shape_of, and a decode graph's capture).
    PieceShape shape_of_counts(std::vector<int64_t> rank_tokens, std::vector<int64_t> rank_logit_rows) const;
    // This rank's sequences of a rank-major piece.
    std::span<const PieceSequence> local_part(std::span<const PieceSequence> seqs) const;

    // Pool row of compressed entry e (or indexer key, `index`) of the sequence in `slot` at `layer` (host side).
    int64_t entry_row(int64_t layer, int slot, int64_t e, bool index) const;
    void block(int64_t layer);
    void attention(int64_t layer);
    // Set by block() for attention(): its output projection also computes the sub-layer's mHC post-mix
    // (CudaOptions::post_mix_in_wo_b), leaving ws.streams_next as hc_post would.
    bool attention_post_mix = false;
    // hc_post of ws.y into ws.streams_next, ready to run: the deferred Sinkhorn launched, and joined where it ran on
    // the side lane.
    cuda::HcPostParams ready_post_mix();
    // moe_forward up to the routed + shared sum: that sum (moe_combine) is left in pending_combine for the MoE's
    // hc_post to compute in its own kernel (hc_post_of_moe), or, with an observer (which reads ws.y), run into ws.y.
    void moe(int64_t layer);
    std::optional<cuda::MoeCombineParams> pending_combine;
    // attention_forward's steps (cuda_attention.cpp), in its order. The first: qr = q_norm(wq_a x) into ws.qr and
    // kv = kv_norm(wkv x) into ws.kv, the two projections in one GEMM where their weights stack.
    void query_and_kv_latents(const cuda::DeviceAttention& a);
    // The second in one launch: q's per-head norm and RoPE, kv's RoPE, kv packed as the chunk's own entries and
    // (ring_row >= 0: the layer's ring of state slot 0) into each sequence's ring.
    void attention_inputs(int64_t layer, int64_t ring_row);
    // The f32 projections of x into ws.f32_proj: one dense_linear where their weights stack, else one per weight.
    F32Projections f32_projections_of_x(const Lane& lane, const cuda::DeviceAttention& a);
    // run_compressor of the compressor `cw` on its f32 projections of x (wkv x, wgate x) on stream `on`: the device
    // state machine (its state at `state_offset` floats into comp_state) writes the closed entries into `cache`.
    void compress(int64_t layer, const cuda::DeviceCompressor& cw, const F32Projections& proj,
                  cuda::CompressorKind kind, uint8_t* cache, int64_t state_offset, cudaStream_t on);
    // The indexer's head weights of the piece into ws.head_weights, from weights_proj x.
    void index_head_weights(const cuda::DeviceAttention& a, const F32Projections& proj, cudaStream_t on);
    // The indexer's queries of the piece into ws.qi: wq_b qr, rotated (Hadamard + FP4 round trip) with their RoPE.
    void indexer_queries(const Lane& lane, int64_t layer);
    // The indexer's scores over the `visible` key columns of the layer's `keys` and its top-k into ws.selected; with
    // `key_list`, the top-k also writes the sparse attention's key list.
    void indexer_select(cudaStream_t on, int64_t layer, const uint8_t* keys, int64_t visible,
                        const cuda::AttentionSlotsParams* key_list);
    // The key list of every query token (cuda::attention_slots): `slots` per token, the window's ring at ring_row.
    cuda::AttentionSlotsParams attention_slots_params(int64_t layer, int64_t slots, int64_t ring_row) const;
    // Sparse attention of ws.q over the key list's `slots` entries per token, then the inverse RoPE, into ws.o.
    void sparse_attention(const cuda::DeviceAttention& a, int64_t layer, int64_t slots);
    // Observer downloads of a single-sequence piece's indexer and compressor (each synchronizes): the `closed` keys
    // and entries it closed, decoded; the top-k margins and selection.
    void observe_index_keys(int64_t layer, int64_t closed);
    void observe_index_selection(int64_t layer, int64_t visible);
    void observe_compressed_entries(int64_t layer, int64_t closed);
    // moe_forward's shared expert on ws.x into `out` [T, D], on `lane`: gate and up in one GEMM where s1 and s3
    // stack, SwiGLU, down. `rows_live` (optional device scalar): rows from it on are not computed and come out +0
    // (FP8 weights only).
    void shared_expert(const Lane& lane, const cuda::DeviceMoe& m, bf16* out, const int32_t* rows_live = nullptr);
    // CudaOptions::shared_expert_on_one_rank applies to this piece and layer's weights.
    bool shared_expert_on_one_rank(const cuda::DeviceMoe& m) const;

    Lane main_lane() const;
    Lane side_lane() const;
    // The side lane starts after everything enqueued on the main stream so far; the main stream then waits for
    // everything enqueued on the side lane so far (both captured as graph edges in a decode graph).
    void fork_side();
    void join_side();
    // `waiter` runs what is enqueued on it from now on after everything enqueued on `producer` so far (through
    // `event`; a graph edge when captured).
    static void wait_for(cudaStream_t waiter, cudaStream_t producer, cuda::Event& event);
    // The Sinkhorn normalization hc_pre deferred (only hc_post reads comb): set by block(), launched on the side lane
    // by sinkhorn_on_side() where that lane has room (attention: after its own side work is joined, where the side
    // lane would otherwise be the longer branch; MoE: at once, beside the router and the routed experts).
    std::optional<cuda::HcMixParams> pending_sinkhorn;
    void sinkhorn_on_side();

    // Precision::linear: FP8 weights get FP8-quantized inputs (`quantized` where a norm already made them, else
    // act_quant of x); y bf16 [m, rows]. Without a lane: on the main lane.
    void linear(const cuda::DeviceMatrix& w, const bf16* x, int64_t m, bf16* y, const Fp8Rows& quantized = {});
    // `rows_live`: as cuda::Fp8GemmParams::rows_live (FP8 weights only).
    // `post`: also the mHC post-mix of y (cuda::hc_post's result, in the GEMM's epilogue for FP8 weights).
    void linear(const Lane& lane, const cuda::DeviceMatrix& w, const bf16* x, int64_t m, bf16* y,
                const Fp8Rows& quantized, const int32_t* rows_live = nullptr, const cuda::HcPostParams* post = nullptr);
    // Precision::linear_f32 on a dense weight: y f32 [m, rows] (row stride ldy, a multiple of 8; 0: rows). A bf16
    // weight whose shape allows (f32_on_tensor_cores: every V4 one, the head, the router, the compressor and indexer
    // projections) runs on the tensor cores (cuda::bf16_linear) unless `chains`; the rest on dense_linear's CUDA-core
    // chains in the CPU's order.
    void linear_f32(const cuda::DeviceMatrix& w, const bf16* x, int64_t m, float* y, int64_t ldy = 0,
                    bool chains = false);
    void linear_f32(const Lane& lane, const cuda::DeviceMatrix& w, const bf16* x, int64_t m, float* y, int64_t ldy,
                    bool chains);
    static bool f32_on_tensor_cores(const cuda::DeviceMatrix& w);
    // Precision::grouped_linear (wo_a).
    void grouped_linear(const cuda::DeviceMatrix& w, const bf16* x, int64_t m, int64_t groups, bf16* y);
    void act_quant(const Lane& lane, const bf16* x, int64_t rows, int64_t cols);
    // x [rows, cols] as an FP8 GEMM reads it: `quantized` where a norm already made it, else act_quant's output.
    Fp8Rows fp8_rows(const bf16* x, int64_t rows, int64_t cols, const Fp8Rows& quantized);
    Fp8Rows fp8_rows(const Lane& lane, const bf16* x, int64_t rows, int64_t cols, const Fp8Rows& quantized);

    // Observer: downloads a device buffer (synchronizing) and passes it on as f32.
    void observe_bf16(std::string_view name, int64_t layer, const bf16* data, int64_t rows, int64_t cols);
    void observe_host(std::string_view name, int64_t layer, const std::vector<float>& data, int64_t rows, int64_t cols);
    const float* inv_freq(int64_t layer) const;
    // mHC mixing of `tokens` rows of `streams` with the mixer `hw`, into ws.x and ws.mix (hc_pre and hc_head).
    cuda::HcMixParams hc_mix_params(const cuda::DeviceHc& hw, const bf16* streams, int64_t tokens);
};

}  // namespace dsv4
