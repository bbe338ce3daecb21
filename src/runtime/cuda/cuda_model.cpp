// CudaModel construction: the memory plan (weights, state pool, workspace) printed before anything is allocated,
// the weight upload (and dsv4 bench's routed experts generated in place), the workspace carve; new sequences. The
// pool is cuda_pool.cpp, the forward cuda_forward.cpp, one block cuda_layer.cpp (its sub-layers
// cuda_attention.cpp and cuda_moe.cpp).
#include "runtime/cuda/cuda_model_impl.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "core/number_formats.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/compressor/kv_entry_layout.h"
#include "kernels/cuda/convert/convert.h"
#include "kernels/cuda/embed/embed.h"
#include "kernels/cuda/gemm_fp8/gemm_fp8.h"
#include "kernels/cuda/mhc/mhc.h"
#include "kernels/cuda/random_fill/random_fill.h"
#include "kernels/cuda/rms_norm/rms_norm.h"
#include "kernels/cuda/smoke/device_info.h"
#include "kernels/cuda/sparse_attention/sparse_attention.h"
#include "model/bench_weights.h"
#include "runtime/auto_chunk.h"
#include "runtime/cuda/rank_agreement.h"

namespace dsv4 {
namespace {

// Carves typed buffers out of one allocation; with a null base it only measures.
struct Bump {
    uint8_t* base = nullptr;
    size_t offset = 0;
    template <typename T>
    T* take(int64_t count) {
        offset = (offset + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
        T* p = base ? reinterpret_cast<T*>(base + offset) : nullptr;
        offset += size_t(std::max<int64_t>(count, 1)) * sizeof(T);
        return p;
    }
};

double mib(size_t bytes) {
    return double(bytes) / (1 << 20);
}

// The workspace for pieces of T tokens: carve() is run once to measure and once on the allocation. With
// `gathered_moe_input` (data-parallel attention) the experts' input rows get buffers of their own; the draws' scratch
// holds the most sequences a piece can draw for: up to `draw_sequences` (every rank's on the rank that returns
// logits; 0 on the others). `expert_parallel`: the slot buffer also holds the shared expert's rows of short steps.
void carve(Bump& b, Workspace& ws, const ModelConfig& c, const PoolLayout& pool, const ModelWeights& w, int num_sms,
           bool gathered_moe_input, int64_t draw_sequences, bool expert_parallel) {
    const int64_t T = pool.chunk, D = c.hidden_size, n_hc = c.hc_mult, H = c.num_heads, d = c.head_dim;
    const int64_t k = c.num_experts_per_tok, I = c.moe_intermediate_size, E = c.n_routed_experts;
    const int64_t nI = c.index_n_heads, dI = c.index_head_dim, V = c.vocab_size;
    const int64_t qo = c.o_groups * c.o_lora_rank;
    int64_t shared_I = 0;  // the shared expert's intermediate size
    for (const BlockWeights& l : w.layers) shared_I = std::max(shared_I, l.ffn.shared.w1.rows);
    const int64_t max_k = std::max({D, c.q_lora_rank, qo, I, H * d, shared_I});
    // Rows of any weight (or stack of weights, device_weights.h) whose dense product goes through ws.y_f32.
    const int64_t max_n = std::max({c.q_lora_rank + d, H * d, nI * dI, qo, D, I, 2 * shared_I});
    const int64_t P = std::min(T, pool.sequences);
    ws.meta_ints = 7 * T + 4 * P + pool.sequences * pool.max_pages;
    ws.meta = b.take<int32_t>(ws.meta_ints);
    if (ws.meta) {
        int32_t* const m = ws.meta;
        ws.ids = m, ws.positions = m + T, ws.token_state = m + 2 * T, ws.token_seq = m + 3 * T;
        ws.ring_target = m + 4 * T, ws.logit_rows = m + 5 * T, ws.moe_ids = m + 6 * T;
        ws.seq_first_row = m + 7 * T, ws.seq_tokens = m + 7 * T + P, ws.seq_start = m + 7 * T + 2 * P;
        ws.seq_state = m + 7 * T + 3 * P;
        ws.page_table = m + 7 * T + 4 * P;
    }
    ws.streams = b.take<bf16>(T * n_hc * D);
    ws.streams_next = b.take<bf16>(T * n_hc * D);
    ws.mix = b.take<float>(T * cuda::hc_pre_mix_size(n_hc));
    ws.x = b.take<bf16>(T * D);
    ws.y = b.take<bf16>(T * D);
    ws.qr_kv = b.take<bf16>(T * (c.q_lora_rank + d));
    ws.qr = b.take<bf16>(T * c.q_lora_rank);
    ws.q = b.take<bf16>(T * H * d);
    ws.kv = b.take<bf16>(T * d);
    ws.kv_view = b.take<bf16>(T * d);
    ws.o = b.take<bf16>(T * H * d);
    ws.z = b.take<bf16>(T * qo);
    const int64_t act_values = std::max(T * max_k, T * k * I);
    const int64_t act_blocks = std::max(T * ((max_k + 127) / 128), T * k * ((I + 127) / 128));
    ws.act_q = b.take<uint8_t>(act_values);
    ws.act_scale = b.take<float>(act_blocks);
    ws.x_fp8 = {b.take<uint8_t>(T * D), b.take<float>(T * ((D + 127) / 128))};
    ws.qr_fp8 = {b.take<uint8_t>(T * c.q_lora_rank), b.take<float>(T * ((c.q_lora_rank + 127) / 128))};
    if (gathered_moe_input) {
        ws.moe_x = b.take<bf16>(T * D);
        ws.moe_x_fp8 = {b.take<uint8_t>(T * D), b.take<float>(T * ((D + 127) / 128))};
    } else {
        ws.moe_x = ws.x;
        ws.moe_x_fp8 = ws.x_fp8;
    }
    ws.y_f32 = b.take<float>(T * max_n);
    int64_t f32_width = 0;
    for (const BlockWeights& l : w.layers) {
        int64_t width = 0;
        for (const QuantizedMatrix* m : cuda::f32_projections(l.attn)) width += m->rows;
        f32_width = std::max(f32_width, width);
    }
    ws.f32_proj = b.take<float>(T * f32_width);
    ws.index_columns = std::max<int64_t>(pool.context / 4, 1);
    ws.qi = b.take<bf16>(T * std::max<int64_t>(nI * dI, 1));
    ws.head_weights = b.take<bf16>(T * std::max<int64_t>(nI, 1));
    ws.index_scores = b.take<bf16>(T * ws.index_columns);
    ws.selected = b.take<int32_t>(T * std::max<int64_t>(c.index_topk, 1));
    // Sparse attention partials: one split per 64-key tile; tokens run in groups that fit (same bits in any group),
    // sized for up to 64 tokens at once (a decode batch) within 256 MiB, at least one token.
    int64_t max_slots = 0, per_token = 0;
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const int64_t slots = pool.attention_slots(c, l);
        max_slots = std::max(max_slots, slots);
        per_token = std::max(
            per_token, cuda::plan_sparse_attention(int32_t(H), int32_t(d), int32_t(slots)).workspace_floats_per_token);
    }
    const int64_t group = std::clamp<int64_t>((int64_t(256) << 20) / 4 / std::max<int64_t>(per_token, 1), 1,
                                              std::min<int64_t>(T, 64));
    ws.attn_indices = b.take<int32_t>(T * max_slots);
    ws.attn_partial_floats = per_token * group;
    ws.attn_partials = b.take<float>(ws.attn_partial_floats);
    ws.router_logits = b.take<float>(T * E);
    ws.experts = b.take<int32_t>(T * k);
    ws.routing_weights = b.take<float>(T * k);
    ws.counts = b.take<int32_t>(E);
    ws.offsets = b.take<int32_t>(E + 1);
    ws.sorted = b.take<int32_t>(T * k);
    ws.assignment_slot = b.take<int32_t>(T * k);
    ws.row_index = b.take<int32_t>(T * k);
    ws.gate = b.take<bf16>(T * k * I);
    ws.up = b.take<bf16>(T * k * I);
    ws.hidden = b.take<bf16>(T * k * I);
    // Under expert parallelism the exchange also sums the shared expert's rows of a short step, after the slots.
    const int64_t shared_in_exchange = expert_parallel ? std::min(T, kSharedExpertOnOneRankTokens) : int64_t(0);
    ws.routed_out = b.take<bf16>((T * k + shared_in_exchange) * D);
    ws.shared_rows = b.take<int32_t>(1);
    {  // decode steps' router_and_routing: its counters are zeroed once below, and each launch leaves them zero
        const int64_t tokens = std::min<int64_t>(T, 32);
        ws.router_scratch.ints = cuda::router_scratch_ints(tokens, E, D, num_sms);
        ws.router_scratch.floats = cuda::router_scratch_floats(tokens, E, D, num_sms);
        ws.router_scratch.arrivals = b.take<int32_t>(ws.router_scratch.ints);
        ws.router_scratch.staged = b.take<float>(ws.router_scratch.floats);
    }
    ws.shared_out = b.take<bf16>(T * D);
    ws.shared_gate_up = b.take<bf16>(T * 2 * shared_I);
    ws.shared_hidden = b.take<bf16>(T * shared_I);
    ws.logits = b.take<float>(T * V);
    if (draw_sequences > 0) {
        const int64_t draws = std::min(T, draw_sequences);
        ws.draws = b.take<cuda::RowDraw>(draws);
        ws.drawn_ids = b.take<int32_t>(draws);
        ws.draw_scratch = b.take<uint8_t>(int64_t(cuda::sample_rows_scratch_bytes(draws, V)));
    }

    // GEMM workspace: the largest any FP8 product of a piece of 1 .. T rows asks for, and cuBLASLt's for fp8_gemm's
    // block-scaled path (the grouped projection needs none).
    size_t gemm = cuda::kCublasLtWorkspaceBytes;
    auto fp8 = [&](const QuantizedMatrix& m, int64_t rows) {
        if (m.format != WeightFormat::kFp8Block) return;
        for (int64_t r : {int64_t(1), int64_t(2), int64_t(4), int64_t(8), int64_t(16), rows})
            gemm = std::max(gemm, cuda::fp8_gemm_workspace_bytes(
                                      cuda::fp8_gemm_config(r, m.rows, m.cols, num_sms, cuda::Fp8GemmPath::kSkinny), r,
                                      m.rows, m.cols));
    };
    for (const BlockWeights& l : w.layers) {
        for (const QuantizedMatrix* m : {&l.attn.wq_a, &l.attn.wq_b, &l.attn.wkv, &l.attn.wo_b, &l.ffn.shared.w1,
                                         &l.ffn.shared.w2, &l.ffn.shared.w3})
            fp8(*m, T);
        if (l.attn.indexer) fp8(l.attn.indexer->wq_b, T);
    }
    ws.gemm_bytes = gemm;
    ws.gemm = b.take<uint8_t>(int64_t(gemm));
    const int64_t side_k = std::max(shared_I, c.q_lora_rank);  // s2's input; the indexer's wq_b input
    ws.side_act = {b.take<uint8_t>(T * side_k), b.take<float>(T * ((side_k + 127) / 128))};
    ws.side_y_f32 = b.take<float>(T * std::max({2 * shared_I, D, nI * dI}));
    ws.side_gemm = b.take<uint8_t>(int64_t(gemm));
}

// CudaOptions::random_experts_seed: the held routed experts of every layer generated in their reserved space with
// BenchWeights' rule (projection p of expert e: key expert_key(seed, layer, e, p), every scale one byte), so they
// are the bytes BenchWeights::build gives them on the host. Waits for the stream.
void generate_experts(const cuda::DeviceWeights& w, const ModelConfig& c, ExpertRange held, uint64_t seed,
                      cudaStream_t stream) {
    ThreadPool one(1);
    BenchWeights bench(seed, one);
    const std::vector<uint8_t>& table = bench.fp4_table();
    cuda::DeviceBuffer<uint8_t> d_table(table.size());
    d_table.upload(table.data(), table.size(), stream);
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const cuda::DeviceMoe& m = w.layers[size_t(l)].ffn;
        const cuda::DeviceExperts* projections[] = {&m.w1, &m.w2, &m.w3};  // expert_key's projections 0, 1, 2
        for (int p = 0; p < 3; ++p) {
            const cuda::DeviceExperts& x = *projections[p];
            DSV4_CHECK(x.format == WeightFormat::kFp4Mx && x.experts == held.count && x.cols % 32 == 0,
                       "layer {}: random routed experts are MXFP4, {} per GPU (got {} of format {}, {} columns)", l,
                       held.count, x.experts, weight_format_name(x.format), x.cols);
            // The arena is the model's own; DeviceWeights views it read-only for the forward.
            auto* data = static_cast<uint8_t*>(const_cast<void*>(x.data));
            auto* scale = const_cast<uint8_t*>(x.scale);
            const int64_t bytes = x.rows * x.cols / 2, scales = x.rows * x.cols / 32;  // per expert
            for (int64_t j = 0; j < x.experts; ++j) {
                const uint64_t key = BenchWeights::expert_key(seed, l, held.first + j, p);
                cuda::random_table_fill({d_table.get(), key, data + j * bytes, bytes}, stream);
                DSV4_CUDA_CHECK(cudaMemsetAsync(scale + j * scales, BenchWeights::expert_scale_byte(x.cols),
                                                size_t(scales), stream));
            }
        }
    }
    DSV4_CUDA_CHECK(cudaStreamSynchronize(stream));  // before the table goes
}

}  // namespace

CudaModel::CudaModel(const ModelConfig& config, ModelWeights weights, Numerics numerics, CudaOptions options)
    : impl_(std::make_unique<Impl>()) {
    Impl& m = *impl_;
    const int devices = cuda::device_count();
    DSV4_CHECK(devices > options.device, "--backend cuda: no CUDA device {} is available ({} found); use --backend cpu",
               options.device, devices);
    DSV4_CHECK(numerics == Numerics::kModel,
               "the CUDA backend computes `model` numerics only (FP8 KV cache, FP8/FP4 tensor cores): use --numerics "
               "model, or --backend cpu for reference numerics");
    check_numerics_support(config, numerics);
    DSV4_CHECK(options.max_sequences > 0 && options.max_chunk_tokens >= 0 && options.max_context >= 0 &&
                   options.pool_positions >= 0,
               "CudaOptions: max_sequences {} must be positive, and max_chunk_tokens {}, max_context {}, pool_positions "
               "{} positive or 0 (chosen by dsv4)",
               options.max_sequences, options.max_chunk_tokens, options.max_context, options.pool_positions);
    DSV4_CHECK(options.max_decode_graphs >= 1, "CudaOptions: max_decode_graphs {} must be at least 1",
               options.max_decode_graphs);
    DSV4_CHECK(options.max_chunk_tokens <= kMaxChunkTokens,
               "CudaOptions: max_chunk_tokens {} is more than a piece can hold (65,535 tokens: its kernels launch a "
               "grid row per token); pass --max-chunk-tokens 65535 or less (longer prompts run as several pieces)",
               options.max_chunk_tokens);
    if (options.max_context == 0) options.max_context = std::min<int64_t>(config.max_position_embeddings, 16384);
    m.config = config;
    m.host = std::move(weights);
    for (const BlockWeights& l : m.host.layers) {
        const std::vector<int32_t>& t = l.ffn.tid2eid;
        const size_t k = size_t(config.num_experts_per_tok);
        for (size_t row = 0; k > 0 && row + k <= t.size() && m.hash_rows_distinct; row += k)
            for (size_t i = row; i < row + k; ++i)
                if (std::find(t.begin() + int64_t(row), t.begin() + int64_t(i), t[i]) != t.begin() + int64_t(i))
                    m.hash_rows_distinct = false;
    }
    const ExpertParallel& ep = options.expert_parallel;
    DSV4_CHECK(ep.ranks >= 1 && ep.rank >= 0 && ep.rank < ep.ranks && ep.ranks <= config.n_routed_experts,
               "expert parallelism: rank {} of {} ranks; the model has {} routed experts per layer", ep.rank, ep.ranks,
               config.n_routed_experts);
    DSV4_CHECK(ep.ranks == 1 || ep.comm, "expert parallelism over {} ranks needs its collectives (NCCL)", ep.ranks);
    m.held = expert_range(config.n_routed_experts, ep.rank, ep.ranks);
    const bool data_parallel = ep.ranks > 1 && ep.attention == AttentionLayout::kDataParallel;
    if (data_parallel) m.dp_rank = ep.rank, m.dp_ranks = ep.ranks;
    m.numerics = numerics;
    m.options = options;
    DSV4_CUDA_CHECK(cudaSetDevice(options.device));
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&m.num_sms, cudaDevAttrMultiProcessorCount, options.device));

    // 1. The memory plan, before anything is allocated.
    // Draws only on the rank whose logits are read, for a vocabulary whose block sums fit a CTA (every model so far).
    m.draws = ep.host_logits && config.vocab_size <= cuda::kMaxDrawVocab;
    const int64_t draw_sequences = m.draws ? options.max_sequences * m.dp_ranks : 0;
    const cuda::ExpertShare share{m.held.first, m.held.count, options.random_experts_seed.has_value()};
    const size_t weight_bytes = cuda::measure_weights(config, m.host, share);
    const size_t reserve = size_t(256) << 20;  // CUDA context, cuBLASLt and allocator slack
    size_t free_bytes = 0, total_bytes = 0;
    DSV4_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (options.max_chunk_tokens == 0) {  // the largest piece the memory allows (runtime/auto_chunk.h)
        options.max_chunk_tokens = auto_chunk_tokens(
            [&](int64_t tokens) {
                CudaOptions o = options;
                o.max_chunk_tokens = tokens;
                const PoolLayout pool = plan_pool(config, o);
                Workspace ws;
                Bump b;
                carve(b, ws, config, pool, m.host, m.num_sms, data_parallel, draw_sequences, ep.ranks > 1);
                return weight_bytes + pool.bytes() + b.offset + reserve;
            },
            free_bytes);
        // Ranks split a prompt into the same pieces (their expert exchanges pair up): the smallest rank's choice.
        if (ep.ranks > 1)
            options.max_chunk_tokens = smallest_over_ranks(*ep.comm, ep.rank, ep.ranks, options.max_chunk_tokens);
        m.options.max_chunk_tokens = options.max_chunk_tokens;
    }
    m.pool = plan_pool(config, options);
    const size_t state_bytes = m.pool.bytes();
    Bump measure;
    carve(measure, m.ws, config, m.pool, m.host, m.num_sms, data_parallel, draw_sequences, ep.ranks > 1);
    const size_t workspace_bytes = measure.offset;
    const size_t need = weight_bytes + state_bytes + workspace_bytes;
    const std::string held_note =
        ep.ranks == 1 ? std::string()
                      : fmt::format(" (rank {} of {}: routed experts {}..{} of {}; attention {})", ep.rank, ep.ranks,
                                    m.held.first, m.held.first + m.held.count - 1, config.n_routed_experts,
                                    data_parallel ? "data-parallel: the sequences this GPU owns" : "replicated");
    if (options.print_plan)
        std::fprintf(stderr,
                     "dsv4: GPU memory plan on %s%s: weights %.1f MiB, state %.1f MiB (%lld sequences of up to %lld "
                     "positions sharing %lld cache pages of %lld positions), workspace %.1f MiB (pieces of %lld "
                     "tokens); total %.1f MiB of %.1f MiB free\n",
                     cuda::describe_device(options.device).c_str(), held_note.c_str(), mib(weight_bytes),
                     mib(state_bytes), (long long)options.max_sequences, (long long)options.max_context,
                     (long long)m.pool.pages, (long long)m.pool.page_positions, mib(workspace_bytes),
                     (long long)options.max_chunk_tokens, mib(need), mib(free_bytes));
    DSV4_CHECK(
        need + reserve <= free_bytes,
        "the model does not fit on GPU {}: weights {:.1f} MiB + state {:.1f} MiB + workspace {:.1f} MiB (+ {:.0f} "
        "MiB reserve) > {:.1f} MiB free; use a smaller model, fewer sequences, a shorter context or shorter pieces "
        "(now {} tokens)",
        options.device, mib(weight_bytes), mib(state_bytes), mib(workspace_bytes), mib(reserve), mib(free_bytes),
        options.max_chunk_tokens);

    // 2. Allocate and upload.
    {  // the lanes' priorities (CudaOptions::prioritize_main_lane); decode graphs keep them per node
        int least = 0, greatest = 0;
        DSV4_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
        const bool ordered = m.options.prioritize_main_lane;
        m.stream = std::make_unique<cuda::Stream>(ordered ? greatest : 0);
        m.side_stream = std::make_unique<cuda::Stream>(ordered ? least : 0);
        m.compressor_stream = std::make_unique<cuda::Stream>(ordered ? least : 0);
    }
    m.side_fork = std::make_unique<cuda::Event>();
    m.side_join = std::make_unique<cuda::Event>();
    m.compressor_fork = std::make_unique<cuda::Event>();
    m.index_keys_ready = std::make_unique<cuda::Event>();
    m.compressor_join = std::make_unique<cuda::Event>();
    m.meta_copied = std::make_unique<cuda::Event>();
    m.lt = std::make_unique<cuda::CublasLt>();
    m.weight_arena = cuda::DeviceBuffer<uint8_t>(weight_bytes);
    {
        ProgressLine progress(options.show_progress);
        m.w = cuda::upload_weights(config, m.host, m.weight_arena, m.stream->get(), share, &progress);
        progress.finish(fmt::format("dsv4: weights on {}: {} in {:.1f} s", cuda::describe_device(options.device),
                                    format_bytes(weight_bytes), progress.elapsed_s()));
    }
    if (options.random_experts_seed)
        generate_experts(m.w, config, m.held, *options.random_experts_seed, m.stream->get());
    m.state_arena = cuda::DeviceBuffer<uint8_t>(state_bytes);
    Bump state{m.state_arena.get()};
    m.entries = state.take<uint8_t>(m.pool.rows * m.pool.entry_bytes);
    m.index_keys = state.take<uint8_t>(m.pool.index_rows * m.pool.index_entry_bytes);
    m.comp_state = state.take<float>(m.pool.state_floats);
    m.workspace_arena = cuda::DeviceBuffer<uint8_t>(workspace_bytes);
    Bump bump{m.workspace_arena.get()};
    carve(bump, m.ws, config, m.pool, m.host, m.num_sms, data_parallel, draw_sequences, ep.ranks > 1);
    DSV4_CHECK(bump.offset == workspace_bytes, "workspace carve changed size");
    DSV4_CUDA_CHECK(cudaMemsetAsync(m.ws.router_scratch.arrivals, 0, sizeof(int32_t) * size_t(m.ws.router_scratch.ints),
                                    m.stream->get()));
    DSV4_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&m.meta_host), sizeof(int32_t) * size_t(m.ws.meta_ints),
                                  cudaHostAllocDefault));
    if (draw_sequences > 0) {
        const size_t draws = size_t(std::min(m.pool.chunk, draw_sequences));
        m.draws_host = cuda::PinnedBuffer<cuda::RowDraw>(draws);
        m.drawn_host = cuda::PinnedBuffer<int32_t>(draws);
    }
    const auto main_rope = cpu::make_rope_table(config.rope_head_dim, config.main_rope);
    const auto compress_rope = cpu::make_rope_table(config.rope_head_dim, config.compress_rope);
    m.main_inv_freq = cuda::DeviceBuffer<float>(main_rope.inv_freq.size());
    m.main_inv_freq.upload(main_rope.inv_freq.data(), main_rope.inv_freq.size(), m.stream->get());
    m.compress_inv_freq = cuda::DeviceBuffer<float>(compress_rope.inv_freq.size());
    m.compress_inv_freq.upload(compress_rope.inv_freq.data(), compress_rope.inv_freq.size(), m.stream->get());
    m.stream->synchronize();
    // Every rank's pool is laid out alike (the ranks share the options).
    m.pools = std::make_unique<RankSlotPools>(m.dp_ranks, m.pool.sequences, m.pool.pages, m.pool.page_positions,
                                              m.pool.max_pages);
    m.slots = m.pools->pool(m.dp_rank);
}

CudaModel::~CudaModel() {
    if (!impl_) return;
    for (auto& [key, graph] : impl_->decode_graphs) cudaGraphExecDestroy(graph.exec);  // before the events they record
    if (impl_->meta_host) cudaFreeHost(impl_->meta_host);
}

const ModelConfig& CudaModel::config() const {
    return impl_->config;
}
Numerics CudaModel::numerics() const {
    return impl_->numerics;
}
void CudaModel::set_observer(ActivationObserver observer) {
    impl_->observer = std::move(observer);
}
void CudaModel::set_stage_profiling(bool on) {
    Impl& m = *impl_;
    DSV4_CUDA_CHECK(cudaSetDevice(m.options.device));
    // Every stage at most once per layer and once for the step, and the closing mark.
    m.stages.enable(on, m.stream->get(), kStages.size() * size_t(m.config.num_layers + 1) + 1);
}
size_t CudaModel::decode_graphs_held() const {
    return impl_->decode_graphs.size();
}

int64_t CudaModel::piece_tokens() const {
    return impl_->options.max_chunk_tokens;
}

std::vector<StageTime> CudaModel::stage_times() const {
    DSV4_CUDA_CHECK(cudaSetDevice(impl_->options.device));
    return impl_->stages.times();
}

SequenceState CudaModel::new_sequence() const {
    Impl& m = *impl_;
    // Data-parallel attention: the rank with the fewest sequences (the lowest of equals) owns the new one; every
    // rank decides alike (slot_pools.h).
    const int rank = m.pools->least_loaded();
    return m.new_sequence_on(rank);
}

SequenceState CudaModel::Impl::new_sequence_on(int rank) {
    Impl& m = *this;
    auto seq = std::make_unique<CudaSequence>();
    seq->pool = m.pools->pool(rank);
    seq->owner = &m;
    seq->rank = rank;
    seq->slot = seq->pool->take_slot();
    if (seq->slot < 0) {
        // new_sequence asks the least loaded rank, so every rank is full; a copy asks its source's rank.
        const bool all_full = m.pools->pool(m.pools->least_loaded())->slots_in_use() == m.pool.sequences;
        const std::string where =
            !m.data_parallel() ? std::string()
            : all_full         ? fmt::format(" on every one of the {} GPUs", m.dp_ranks)
                               : fmt::format(" on GPU rank {}, which holds the copy's source", rank);
        throw Error(fmt::format("all {} sequence slots of the GPU state pool are in use{}: release a sequence first",
                                m.pool.sequences, where));
    }
    SequenceState state;
    if (rank != m.dp_rank) {  // another GPU holds its state
        state.device = std::move(seq);
        return state;
    }
    // Fresh compressor states (kv 0, score -inf, as CompressorState::init); entries are never read before written.
    const int64_t S = m.pool.sequences;
    for (int64_t l = 0; l < m.config.num_layers; ++l) {
        const int64_t ratio = m.config.compress_ratios[size_t(l)];
        auto reset = [&](int64_t offset, int64_t head_dim) {
            const int64_t width = (ratio == 4 ? 2 : 1) * head_dim, slots = (ratio == 4 ? 2 : 1) * ratio;
            const int64_t n = slots * width;
            float* kv = m.comp_state + offset;
            cuda::fill_f32(kv + seq->slot * n, n, 0.0f, m.stream->get());
            cuda::fill_f32(kv + S * n + seq->slot * n, n, -std::numeric_limits<float>::infinity(), m.stream->get());
        };
        if (m.pool.state_offset[size_t(l)] >= 0) reset(m.pool.state_offset[size_t(l)], m.config.head_dim);
        if (m.pool.index_state_offset[size_t(l)] >= 0)
            reset(m.pool.index_state_offset[size_t(l)], m.config.index_head_dim);
    }
    state.device = std::move(seq);
    return state;
}

}  // namespace dsv4
