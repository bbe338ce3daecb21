// The stages of a forward piece and their aggregation into a per-step table (dsv4 bench --stages, docs/perf.md
// "Stage table"). The GPU executor records one CUDA event at each stage boundary (runtime/cuda/stage_marks.h); the
// intervals between consecutive events, named by the stage they open, are summed here by stage. Host-only, tested
// in tests/runtime/stage_profile_test.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4 {

// The stages in forward order. Block stages (attn_hc_pre ... ffn_hc_post) repeat per layer; a layer marks only the
// stages it has (indexer on CSA layers, compressor on CSA and HCA layers).
//   upload          the piece's metadata to the device, then the wait for the launch of the step (graph or kernels)
//   embed           embedding rows into the mHC streams
//   attn_hc_pre     mHC pre-mix + attn_norm
//   q_proj          wq_a | wkv (one GEMM), q_norm and kv_norm, wq_b, then in one launch the head norm, RoPE of q
//                   and kv and the window KV packed as the chunk's own entries (and, in a decode step, the ring's)
//   indexer         CSA layers: the wait for the side lane's f32 projections of x (compressors, weights_proj),
//                   indexer queries, its compressor (keys), scores, top-k and the main compressor, which run beside
//                   q_proj's wq_b .. packing on a second stream (what they add after q_proj)
//   compressor      HCA layers: the same wait for the f32 projections of x and the main compressor
//   sparse_attn     slot lists, sparse attention, inverse RoPE
//   o_proj          grouped wo_a, wo_b
//   ring_update     the window ring's new entries (pieces other than decode steps, which write them in q_proj)
//   attn_hc_post    mHC post-mix of the attention output
//   ffn_hc_pre      mHC pre-mix + ffn_norm
//   expert_gather   the experts' input rows gathered from every rank (data-parallel attention only)
//   router          gate, routing, row index (the shared expert runs beside this and the next two stages, on a
//                   second stream)
//   routed_experts  w1, w3, SwiGLU, w2 over the selected experts (this GPU's, under expert parallelism)
//   expert_exchange the routed slots summed over the ranks (expert parallelism only)
//   shared_expert   the wait for the shared expert (s1, s3, SwiGLU, s2): what it adds after the routed experts
//   moe_combine     routed + shared sum (only with an observer attached; otherwise ffn_hc_post's kernel computes it)
//   ffn_hc_post     the routed + shared sum and the mHC post-mix of it, in one kernel
//   head            mHC head mix, final norm, lm_head
//   logits_gather   every rank's logits gathered (data-parallel attention only)
//   logits_copy     the logits to the host
inline constexpr std::array<std::string_view, 21> kStages = {
    "upload",      "embed",          "attn_hc_pre",     "q_proj",        "indexer",     "compressor",
    "sparse_attn", "o_proj",         "ring_update",     "attn_hc_post",  "ffn_hc_pre",  "expert_gather",
    "router",      "routed_experts", "expert_exchange", "shared_expert", "moe_combine", "ffn_hc_post",
    "head",        "logits_gather",  "logits_copy"};

// One interval of a recorded piece: from the event opening `stage` to the next event.
struct StageTime {
    std::string stage;
    int64_t layer = -1;  // the block, or -1 for a stage of the step (upload, embed, head, logits_copy)
    double ms = 0;
};

struct StageRow {
    std::string stage;
    double ms = 0;       // per step (mean over the steps), summed over the layers the stage ran in
    int64_t layers = 0;  // distinct layers it ran in; 0 for a stage of the step
    double share = 0;    // ms / StageTable::ms
    double ms_per_layer() const { return layers > 0 ? ms / double(layers) : ms; }
};

struct StageTable {
    std::vector<StageRow> rows;  // kStages order, then any other stage in the order first seen
    double ms = 0;               // per step: the sum of the rows, i.e. the mean span from the first to the last event
    int64_t steps = 0;
};

// The table of `steps` recorded pieces (each one StageTime per interval). Throws dsv4::Error for no steps, an empty
// step, or a negative or non-finite interval.
StageTable stage_table(std::span<const std::vector<StageTime>> steps);

// What a table is held against (dsv4 bench --stages): the bytes each stage must read (a stage not named: none
// counted), the bandwidth that makes them a floor time, and the step as timed without and with the profiler.
struct StageYardstick {
    std::map<std::string, double> floor_bytes;
    double gbs = 0;          // GB/s (1e9 B/s)
    double step_ms = 0;      // the step without the profiler
    double profiled_ms = 0;  // the same step with it
};

// The stages must add up to the step without the profiler within this fraction (the rest is host time outside the
// first and last event, or the profiler's own cost).
inline constexpr double kStageSumTolerance = 0.05;

// The table as text: a header, one line per row (ms per step; ms per layer and layers for block stages; share; MB,
// floor ms and x floor where bytes are counted), a total line, and the check of the sum against the step.
std::string format_stage_table(const StageTable& table, const StageYardstick& against);

}  // namespace dsv4
