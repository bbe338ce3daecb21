// CudaModel construction (memory plan, weight upload, state pool, workspace), sequences, and the forward loop:
// embedding -> blocks (cuda_layer.cpp) -> mHC head -> norm -> f32 head, as CpuModel::forward.
#include "runtime/cuda/cuda_model_impl.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/number_formats.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/compressor/kv_entry_layout.h"
#include "kernels/cuda/convert/convert.h"
#include "kernels/cuda/embed/embed.h"
#include "kernels/cuda/gemm_fp8/gemm_fp8.h"
#include "kernels/cuda/grouped_linear/grouped_linear.h"
#include "kernels/cuda/mhc/mhc.h"
#include "kernels/cuda/rms_norm/rms_norm.h"
#include "kernels/cuda/smoke/device_info.h"
#include "kernels/cuda/sparse_attention/sparse_attention.h"

namespace dsv4 {
namespace {

constexpr size_t kAlign = 256;

// Carves typed buffers out of one allocation; with a null base it only measures.
struct Bump {
    uint8_t* base = nullptr;
    size_t offset = 0;
    template <typename T>
    T* take(int64_t count) {
        offset = (offset + kAlign - 1) / kAlign * kAlign;
        T* p = base ? reinterpret_cast<T*>(base + offset) : nullptr;
        offset += size_t(std::max<int64_t>(count, 1)) * sizeof(T);
        return p;
    }
};

double mib(size_t bytes) {
    return double(bytes) / (1 << 20);
}

// Sequence slot handle: gives the slot back when the SequenceState goes.
struct CudaSequence final : DeviceSequence {
    std::shared_ptr<SlotPool> pool;
    const CudaModel::Impl* owner = nullptr;
    int slot = -1;
    ~CudaSequence() override {
        if (slot < 0) return;  // new_sequence failed before a slot was taken
        std::lock_guard lock(pool->mutex);
        auto& held = pool->pages[size_t(slot)];
        pool->free_pages.insert(pool->free_pages.end(), held.begin(), held.end());
        held.clear();
        std::fill_n(pool->table.begin() + slot * pool->max_pages, pool->max_pages, -1);
        pool->used[size_t(slot)] = false;
    }
};

// Positions per cache page: a multiple of every compress ratio (so a page holds whole entries of every layer), at
// least 256 so a page table stays short.
int64_t page_positions(const ModelConfig& c) {
    int64_t lcm = 1;
    for (int64_t r : c.compress_ratios)
        if (r > 0) lcm = std::lcm(lcm, r);
    return (std::max<int64_t>(256, lcm) + lcm - 1) / lcm * lcm;
}

PoolLayout plan_pool(const ModelConfig& c, const CudaOptions& o) {
    PoolLayout p;
    p.sequences = o.max_sequences;
    p.context = o.max_context;
    p.chunk = o.max_chunk_tokens;
    p.entry_bytes = cuda::main_entry_layout(c.head_dim, c.rope_head_dim).bytes();
    p.index_entry_bytes = c.index_head_dim > 0 ? cuda::IndexEntryLayout{c.index_head_dim}.bytes() : 0;
    p.page_positions = page_positions(c);
    p.max_pages = (p.context + p.page_positions - 1) / p.page_positions;
    // Default: every sequence can reach max_context at once (a sequence holds whole pages).
    const int64_t pool_positions =
        o.pool_positions > 0 ? o.pool_positions : o.max_sequences * p.max_pages * p.page_positions;
    p.pages = (pool_positions + p.page_positions - 1) / p.page_positions;
    const int64_t L = c.num_layers, S = p.sequences, W = c.sliding_window;
    p.ring_row = 0;
    p.chunk_row = L * S * W;
    int64_t row = p.chunk_row + p.chunk, index_row = 0, floats = 0;
    for (int64_t l = 0; l < L; ++l) {
        const int64_t ratio = c.compress_ratios[size_t(l)];
        const int64_t per_page = ratio > 0 ? p.page_positions / ratio : 0;
        p.page_entries.push_back(per_page);
        p.compressed_row.push_back(ratio > 0 ? row : -1);
        row += p.pages * per_page;
        p.index_row.push_back(ratio == 4 ? index_row : -1);
        index_row += ratio == 4 ? p.pages * per_page : 0;
        auto state = [&](int64_t head_dim) {
            const int64_t width = (ratio == 4 ? 2 : 1) * head_dim, slots = (ratio == 4 ? 2 : 1) * ratio;
            const int64_t at = floats;
            floats += 2 * S * slots * width;  // kv then score
            return at;
        };
        p.state_offset.push_back(ratio > 0 ? state(c.head_dim) : -1);
        p.index_state_offset.push_back(ratio == 4 ? state(c.index_head_dim) : -1);
    }
    p.rows = row;
    p.index_rows = index_row;
    p.state_floats = floats;
    DSV4_CHECK(p.rows < (int64_t(1) << 31) && p.index_rows < (int64_t(1) << 31),
               "the GPU state pool of {} positions has more entries than int32 rows can address", pool_positions);
    return p;
}

}  // namespace

int64_t PoolLayout::attention_slots(const ModelConfig& c, int64_t layer) const {
    const int64_t ratio = c.compress_ratios[size_t(layer)];
    if (ratio == 0) return c.sliding_window;
    return c.sliding_window + (ratio == 4 ? c.index_topk : context / ratio);
}

size_t PoolLayout::bytes() const {
    return size_t(rows * entry_bytes) + size_t(index_rows * index_entry_bytes) + size_t(state_floats) * 4 + 3 * kAlign;
}

namespace {

// The workspace for pieces of T tokens: carve() is run once to measure and once on the allocation.
void carve(Bump& b, Workspace& ws, const ModelConfig& c, const PoolLayout& pool, const ModelWeights& w, int num_sms) {
    const int64_t T = pool.chunk, D = c.hidden_size, n_hc = c.hc_mult, H = c.num_heads, d = c.head_dim;
    const int64_t k = c.num_experts_per_tok, I = c.moe_intermediate_size, E = c.n_routed_experts;
    const int64_t nI = c.index_n_heads, dI = c.index_head_dim, V = c.vocab_size;
    const int64_t qo = c.o_groups * c.o_lora_rank;
    const int64_t max_k = std::max({D, c.q_lora_rank, qo, I, H * d});
    const int64_t max_n = std::max({c.q_lora_rank, H * d, d, nI * dI, nI, qo, D, I});
    const int64_t P = std::min(T, pool.sequences);
    ws.meta_ints = 6 * T + 4 * P + pool.sequences * pool.max_pages;
    ws.meta = b.take<int32_t>(ws.meta_ints);
    if (ws.meta) {
        int32_t* const m = ws.meta;
        ws.ids = m, ws.positions = m + T, ws.token_state = m + 2 * T, ws.token_seq = m + 3 * T;
        ws.ring_target = m + 4 * T, ws.logit_rows = m + 5 * T;
        ws.seq_first_row = m + 6 * T, ws.seq_tokens = m + 6 * T + P, ws.seq_start = m + 6 * T + 2 * P;
        ws.seq_state = m + 6 * T + 3 * P;
        ws.page_table = m + 6 * T + 4 * P;
    }
    ws.streams = b.take<bf16>(T * n_hc * D);
    ws.streams_next = b.take<bf16>(T * n_hc * D);
    ws.mix = b.take<float>(T * cuda::hc_pre_mix_size(n_hc));
    ws.x = b.take<bf16>(T * D);
    ws.y = b.take<bf16>(T * D);
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
    ws.y_f32 = b.take<float>(T * max_n);
    const int64_t comp_width = std::max(2 * d, 2 * dI);
    ws.comp_kv = b.take<float>(T * comp_width);
    ws.comp_score = b.take<float>(T * comp_width);
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
    ws.routed_out = b.take<bf16>(T * k * D);
    ws.shared_out = b.take<bf16>(T * D);
    ws.logits = b.take<float>(T * V);

    // GEMM workspace: the largest any FP8 product or grouped projection of a piece of 1 .. T rows asks for, and
    // cuBLASLt's for fp8_gemm's block-scaled path.
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
        if (l.attn.wo_a.format == WeightFormat::kFp8Block) {
            const int64_t g = c.o_groups, in = l.attn.wo_a.cols, out = l.attn.wo_a.rows / g;
            for (int64_t r : {int64_t(1), int64_t(2), int64_t(4), int64_t(8), int64_t(16), T})
                gemm = std::max(gemm, cuda::grouped_linear_workspace_bytes(
                                          cuda::grouped_linear_config(r, g, in, out, num_sms), r, g, out));
        }
    }
    ws.gemm_bytes = gemm;
    ws.gemm = b.take<uint8_t>(int64_t(gemm));
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
    DSV4_CHECK(options.max_sequences > 0 && options.max_chunk_tokens > 0 && options.max_context >= 0 &&
                   options.pool_positions >= 0,
               "CudaOptions: max_sequences {}, max_chunk_tokens {}, max_context {}, pool_positions {} must be positive",
               options.max_sequences, options.max_chunk_tokens, options.max_context, options.pool_positions);
    if (options.max_context == 0) options.max_context = std::min<int64_t>(config.max_position_embeddings, 16384);
    DSV4_CHECK(config.index_n_heads == 0 || config.compress_ratios.empty() ||
                   std::none_of(config.compress_ratios.begin(), config.compress_ratios.end(),
                                [](int64_t r) { return r == 4; }) ||
                   config.index_topk > 0,
               "CSA layers need index_topk > 0");
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
    m.numerics = numerics;
    m.options = options;
    DSV4_CUDA_CHECK(cudaSetDevice(options.device));
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&m.num_sms, cudaDevAttrMultiProcessorCount, options.device));

    // 1. The memory plan, before anything is allocated.
    const size_t weight_bytes = cuda::measure_weights(config, m.host);
    m.pool = plan_pool(config, options);
    const size_t state_bytes = m.pool.bytes();
    Bump measure;
    carve(measure, m.ws, config, m.pool, m.host, m.num_sms);
    const size_t workspace_bytes = measure.offset;
    const size_t need = weight_bytes + state_bytes + workspace_bytes;
    size_t free_bytes = 0, total_bytes = 0;
    DSV4_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (options.print_plan)
        std::fprintf(stderr,
                     "dsv4: GPU memory plan on %s: weights %.1f MiB, state %.1f MiB (%lld sequences of up to %lld "
                     "positions sharing %lld cache pages of %lld positions), workspace %.1f MiB (pieces of %lld "
                     "tokens); total %.1f MiB of %.1f MiB free\n",
                     cuda::describe_device(options.device).c_str(), mib(weight_bytes), mib(state_bytes),
                     (long long)options.max_sequences, (long long)options.max_context, (long long)m.pool.pages,
                     (long long)m.pool.page_positions, mib(workspace_bytes), (long long)options.max_chunk_tokens,
                     mib(need), mib(free_bytes));
    const size_t reserve = size_t(256) << 20;  // CUDA context, cuBLASLt and allocator slack
    DSV4_CHECK(
        need + reserve <= free_bytes,
        "the model does not fit on GPU {}: weights {:.1f} MiB + state {:.1f} MiB + workspace {:.1f} MiB (+ {:.0f} "
        "MiB reserve) > {:.1f} MiB free; use a smaller model, fewer sequences or a shorter context",
        options.device, mib(weight_bytes), mib(state_bytes), mib(workspace_bytes), mib(reserve), mib(free_bytes));

    // 2. Allocate and upload.
    m.stream = std::make_unique<cuda::Stream>();
    m.meta_copied = std::make_unique<cuda::Event>();
    m.lt = std::make_unique<cuda::CublasLt>();
    m.weight_arena = cuda::DeviceBuffer<uint8_t>(weight_bytes);
    m.w = cuda::upload_weights(config, m.host, m.weight_arena, m.stream->get());
    m.state_arena = cuda::DeviceBuffer<uint8_t>(state_bytes);
    Bump state{m.state_arena.get()};
    m.entries = state.take<uint8_t>(m.pool.rows * m.pool.entry_bytes);
    m.index_keys = state.take<uint8_t>(m.pool.index_rows * m.pool.index_entry_bytes);
    m.comp_state = state.take<float>(m.pool.state_floats);
    m.workspace_arena = cuda::DeviceBuffer<uint8_t>(workspace_bytes);
    Bump bump{m.workspace_arena.get()};
    carve(bump, m.ws, config, m.pool, m.host, m.num_sms);
    DSV4_CHECK(bump.offset == workspace_bytes, "workspace carve changed size");
    DSV4_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&m.meta_host), sizeof(int32_t) * size_t(m.ws.meta_ints),
                                  cudaHostAllocDefault));
    const auto main_rope = cpu::make_rope_table(config.rope_head_dim, config.main_rope);
    const auto compress_rope = cpu::make_rope_table(config.rope_head_dim, config.compress_rope);
    m.main_inv_freq = cuda::DeviceBuffer<float>(main_rope.inv_freq.size());
    m.main_inv_freq.upload(main_rope.inv_freq.data(), main_rope.inv_freq.size(), m.stream->get());
    m.compress_inv_freq = cuda::DeviceBuffer<float>(compress_rope.inv_freq.size());
    m.compress_inv_freq.upload(compress_rope.inv_freq.data(), compress_rope.inv_freq.size(), m.stream->get());
    m.stream->synchronize();
    m.slots = std::make_shared<SlotPool>();
    m.slots->used.assign(size_t(m.pool.sequences), false);
    m.slots->pages.resize(size_t(m.pool.sequences));
    m.slots->max_pages = m.pool.max_pages;
    m.slots->table.assign(size_t(m.pool.sequences * m.pool.max_pages), -1);
    for (int64_t g = m.pool.pages - 1; g >= 0; --g) m.slots->free_pages.push_back(int32_t(g));
}

CudaModel::~CudaModel() {
    if (!impl_) return;
    for (auto& [batch, exec] : impl_->decode_graphs) cudaGraphExecDestroy(exec);
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

SequenceState CudaModel::new_sequence() const {
    Impl& m = *impl_;
    auto seq = std::make_unique<CudaSequence>();
    seq->pool = m.slots;
    seq->owner = &m;
    {
        std::lock_guard lock(m.slots->mutex);
        auto free = std::find(m.slots->used.begin(), m.slots->used.end(), false);
        DSV4_CHECK(free != m.slots->used.end(),
                   "all {} sequence slots of the GPU state pool are in use: release a sequence first",
                   m.slots->used.size());
        *free = true;
        seq->slot = int(free - m.slots->used.begin());
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
    SequenceState state;
    state.device = std::move(seq);
    return state;
}

std::vector<float> CudaModel::forward(SequenceState& state, std::span<const int32_t> ids, bool all_logits) {
    const BatchItem item{&state, ids, all_logits};
    return std::move(forward_batch(std::span(&item, 1))[0]);
}

std::vector<std::vector<float>> CudaModel::forward_batch(std::span<const BatchItem> items) {
    Impl& m = *impl_;
    const int64_t V = m.config.vocab_size;
    // Check everything before anything runs: a bad item fails the call with no sequence advanced.
    std::vector<int> slot(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
        DSV4_CHECK(items[i].state, "forward_batch: item {} has no sequence state", i);
        slot[i] = m.check_input(*items[i].state, items[i].state->position, items[i].ids);
        for (size_t j = 0; j < i; ++j)
            DSV4_CHECK(items[j].state != items[i].state, "forward_batch: items {} and {} are the same sequence", j, i);
    }
    std::vector<std::pair<int, int64_t>> needs;
    for (size_t i = 0; i < items.size(); ++i)
        needs.emplace_back(slot[i], items[i].state->position + int64_t(items[i].ids.size()));
    m.reserve_pages(needs);
    std::vector<std::vector<float>> logits(items.size());
    for (size_t i = 0; i < items.size(); ++i)
        logits[i].reserve(size_t((items[i].all_logits ? items[i].ids.size() : 1) * V));

    // Pack the items' tokens into pieces of at most `chunk` rows, in item order; an item that does not fit the rest
    // of a piece continues in the next one (exact: the forward is chunk-invariant). With an observer, one sequence
    // per piece, so the activations it receives are one sequence's.
    std::vector<int64_t> done(items.size(), 0);
    std::vector<PieceSequence> piece;
    int64_t rows = 0;
    auto flush = [&] {
        if (!piece.empty()) m.run_piece(piece);
        piece.clear();
        rows = 0;
    };
    for (size_t i = 0; i < items.size(); ++i) {
        const BatchItem& item = items[i];
        const int64_t n = int64_t(item.ids.size());
        while (done[i] < n) {
            if (rows == m.pool.chunk || (m.observer && !piece.empty())) flush();
            const int64_t take = std::min(n - done[i], m.pool.chunk - rows);
            const bool last = done[i] + take == n;
            PieceSequence ps;
            ps.slot = slot[i];
            ps.start = item.state->position + done[i];
            ps.ids = item.ids.data() + done[i];
            ps.tokens = take;
            ps.first_logit = item.all_logits ? 0 : (last ? take - 1 : take);
            ps.logits = &logits[i];
            piece.push_back(ps);
            rows += take;
            done[i] += take;
        }
    }
    flush();
    for (const BatchItem& item : items) item.state->position += int64_t(item.ids.size());
    return logits;
}

std::vector<float> CudaModel::forward_block(SequenceState& state, int64_t layer, int64_t start_position,
                                            std::span<const int32_t> ids, const float* streams_in) {
    Impl& m = *impl_;
    DSV4_CHECK(layer >= 0 && layer < m.config.num_layers && start_position >= 0,
               "layer {} / position {} out of range", layer, start_position);
    const int slot = m.check_input(state, start_position, ids);
    const int64_t tokens = int64_t(ids.size()), row = m.config.hc_mult * m.config.hidden_size;
    const std::pair<int, int64_t> need{slot, start_position + tokens};
    m.reserve_pages(std::span(&need, 1));
    std::vector<float> streams;
    streams.reserve(size_t(tokens * row));
    for (int64_t done = 0; done < tokens;) {
        const int64_t n = std::min(tokens - done, m.pool.chunk);
        m.run_block_piece(int(layer), slot, start_position + done, ids.data() + done, streams_in + done * row, n,
                          streams);
        done += n;
    }
    return streams;
}

int CudaModel::Impl::check_input(const SequenceState& state, int64_t start, std::span<const int32_t> ids) {
    const int64_t tokens = int64_t(ids.size()), V = config.vocab_size;
    DSV4_CHECK(tokens > 0, "no input tokens");
    const auto* seq = dynamic_cast<const CudaSequence*>(state.device.get());
    DSV4_CHECK(seq && seq->owner == this && state.layers.empty(), "sequence state does not belong to this model");
    for (int32_t id : ids) DSV4_CHECK(id >= 0 && id < V, "token id {} is outside the vocabulary [0, {})", id, V);
    DSV4_CHECK(start + tokens <= pool.context,
               "the sequence would reach {} positions, more than the {} the GPU state pool holds per sequence",
               start + tokens, pool.context);
    DSV4_CUDA_CHECK(cudaSetDevice(options.device));
    return seq->slot;
}

void CudaModel::Impl::reserve_pages(std::span<const std::pair<int, int64_t>> needs) {
    std::lock_guard lock(slots->mutex);
    int64_t wanted = 0;
    for (const auto& [slot, end] : needs) {
        const int64_t pages = (end + pool.page_positions - 1) / pool.page_positions;
        wanted += std::max<int64_t>(0, pages - int64_t(slots->pages[size_t(slot)].size()));
    }
    DSV4_CHECK(wanted <= int64_t(slots->free_pages.size()),
               "the GPU cache pool is full: this step needs {} more pages of {} positions, {} of {} are free; finish "
               "or release sequences, or give the pool more positions",
               wanted, pool.page_positions, slots->free_pages.size(), pool.pages);
    for (const auto& [slot, end] : needs) {
        auto& held = slots->pages[size_t(slot)];
        while (int64_t(held.size()) * pool.page_positions < end) {
            slots->table[size_t(slot * pool.max_pages) + held.size()] = slots->free_pages.back();
            held.push_back(slots->free_pages.back());
            slots->free_pages.pop_back();
        }
    }
}

int64_t CudaModel::Impl::entry_row(int64_t layer, int slot, int64_t e, bool index) const {
    const int64_t per_page = pool.page_entries[size_t(layer)];
    const int64_t page = slots->table[size_t(slot * pool.max_pages + e / per_page)];
    return (index ? pool.index_row : pool.compressed_row)[size_t(layer)] + page * per_page + e % per_page;
}

void CudaModel::Impl::upload_piece(std::span<const PieceSequence> seqs) {
    const int64_t W = config.sliding_window, C = pool.chunk;
    // The pinned buffer is rewritten only once the previous piece's copy is done: known after any piece that ended
    // with the logits copy (so a decode step never waits here), else waited for.
    if (meta_in_flight) DSV4_CUDA_CHECK(cudaEventSynchronize(meta_copied->get()));
    int32_t* h = meta_host;
    const int64_t offset[] = {0, C, 2 * C, 3 * C, 4 * C, 5 * C};
    const int64_t P = std::min(C, pool.sequences);
    DSV4_CHECK(int64_t(seqs.size()) <= P, "a piece of {} sequences exceeds the {} the workspace holds", seqs.size(), P);
    PieceShape shape;
    int64_t row = 0;
    bool identity = true;
    for (size_t q = 0; q < seqs.size(); ++q) {
        const PieceSequence& ps = seqs[q];
        const int64_t ring_from = ps.tokens - std::min(ps.tokens, W);
        for (int64_t t = 0; t < ps.tokens; ++t, ++row) {
            const int64_t position = ps.start + t;
            h[offset[0] + row] = ps.ids[t];
            h[offset[1] + row] = int32_t(position);
            h[offset[2] + row] = ps.slot;
            h[offset[3] + row] = int32_t(q);
            h[offset[4] + row] = t >= ring_from ? int32_t(ps.slot * W + position % W) : -1;
            if (t >= ps.first_logit) {
                identity = identity && shape.logit_rows == row;
                h[offset[5] + shape.logit_rows++] = int32_t(row);
            }
        }
        h[6 * C + q] = int32_t(row - ps.tokens);
        h[6 * C + P + q] = int32_t(ps.tokens);
        h[6 * C + 2 * P + q] = int32_t(ps.start);
        h[6 * C + 3 * P + q] = ps.slot;
        shape.max_end = std::max(shape.max_end, ps.start + ps.tokens);
    }
    DSV4_CHECK(row <= C, "a piece of {} rows exceeds the chunk of {}", row, C);
    shape.tokens = row;
    shape.seqs = int64_t(seqs.size());
    shape.gather = !identity;
    if (seqs.size() == 1) shape.slot = seqs[0].slot, shape.start = seqs[0].start;
    {
        std::lock_guard lock(slots->mutex);
        std::copy(slots->table.begin(), slots->table.end(), h + 6 * C + 4 * P);
    }
    DSV4_CUDA_CHECK(cudaMemcpyAsync(ws.meta, h, sizeof(int32_t) * size_t(ws.meta_ints), cudaMemcpyHostToDevice,
                                    stream->get()));
    meta_copied->record(stream->get());
    meta_in_flight = true;
    piece = shape;
}

void CudaModel::Impl::run_block_piece(int layer, int slot, int64_t start, const int32_t* ids,
                                      const float* streams_in, int64_t tokens, std::vector<float>& streams_out) {
    const size_t n = size_t(tokens * config.hc_mult * config.hidden_size);
    cudaStream_t s = stream->get();
    const PieceSequence ps{slot, start, ids, tokens, tokens, nullptr};
    upload_piece(std::span(&ps, 1));
    std::vector<uint16_t> raw(n);
    for (size_t i = 0; i < n; ++i) {
        raw[i] = f32_to_bf16(streams_in[i]);
        DSV4_CHECK(bf16_to_f32(raw[i]) == streams_in[i] || std::isnan(streams_in[i]),
                   "input stream value {} is not a bf16 value", streams_in[i]);
    }
    DSV4_CUDA_CHECK(cudaMemcpyAsync(ws.streams, raw.data(), n * 2, cudaMemcpyHostToDevice, s));
    block(layer);
    DSV4_CUDA_CHECK(cudaMemcpyAsync(raw.data(), ws.streams, n * 2, cudaMemcpyDeviceToHost, s));
    DSV4_CUDA_CHECK(cudaStreamSynchronize(s));
    meta_in_flight = false;
    for (uint16_t b : raw) streams_out.push_back(bf16_to_f32(b));
}

void CudaModel::Impl::run_piece(std::span<const PieceSequence> seqs) {
    const int64_t V = config.vocab_size;
    cudaStream_t s = stream->get();
    upload_piece(seqs);
    const bool decode = std::all_of(seqs.begin(), seqs.end(),
                                    [](const PieceSequence& ps) { return ps.tokens == 1 && ps.first_logit == 0; });
    if (decode && options.decode_graphs && !observer) {
        // The graph of this batch size was captured with bounds from the pool (max_end = context), so it serves
        // every step of any sequences; its launches read positions, slots and ring targets from ws.meta.
        const int64_t batch = piece.tokens;
        if (!decode_graphs.count(batch)) capture_decode_graph(batch);
        DSV4_CUDA_CHECK(cudaGraphLaunch(decode_graphs.at(batch), s));
    } else {
        enqueue_piece();
    }
    if (piece.logit_rows == 0) return;
    std::vector<float> host(size_t(piece.logit_rows * V));
    DSV4_CUDA_CHECK(cudaMemcpyAsync(host.data(), ws.logits, sizeof(float) * host.size(), cudaMemcpyDeviceToHost, s));
    DSV4_CUDA_CHECK(cudaStreamSynchronize(s));
    meta_in_flight = false;
    const float* from = host.data();
    for (const PieceSequence& ps : seqs) {
        const size_t n = size_t((ps.tokens - ps.first_logit) * V);
        ps.logits->insert(ps.logits->end(), from, from + n);
        from += n;
    }
}

void CudaModel::Impl::capture_decode_graph(int64_t batch) {
    cudaStream_t s = stream->get();
    const PieceShape uploaded = piece;
    piece = PieceShape{};
    piece.tokens = piece.seqs = piece.logit_rows = batch;
    piece.max_end = pool.context;
    // Global capture mode: any call that could synchronize with the host or allocate (cudaMalloc, a synchronous
    // copy, a stream or event wait from the host) fails the capture instead of being recorded.
    DSV4_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    try {
        enqueue_piece();
    } catch (...) {
        cudaGraph_t broken = nullptr;
        cudaStreamEndCapture(s, &broken);
        if (broken) cudaGraphDestroy(broken);
        piece = uploaded;
        throw;
    }
    cudaGraph_t graph = nullptr;
    DSV4_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    DSV4_CUDA_CHECK(instantiated);
    decode_graphs[batch] = exec;
    piece = uploaded;
}

void CudaModel::Impl::enqueue_piece() {
    const ModelConfig& c = config;
    const int64_t D = c.hidden_size, n_hc = c.hc_mult, V = c.vocab_size, T = piece.tokens;
    cudaStream_t s = stream->get();

    cuda::EmbedParams ep;
    ep.ids = ws.ids;
    ep.table = w.embed;
    ep.streams = ws.streams;
    ep.tokens = T;
    ep.vocab = V;
    ep.dim = D;
    ep.n_hc = n_hc;
    cuda::embed(ep, s);

    for (int64_t layer = 0; layer < c.num_layers; ++layer) block(layer);

    // mHC head, final norm, f32 head for the rows whose logits are wanted.
    const int64_t rows = piece.logit_rows;
    if (rows == 0) return;
    const bf16* streams = ws.streams;
    if (piece.gather) {
        cuda::gather_rows_bf16({ws.streams, ws.logit_rows, ws.streams_next, rows, n_hc * D}, s);
        streams = ws.streams_next;
    }
    cuda::HcMixParams hp;
    hp.streams = streams;
    hp.fn = w.hc_head.fn;
    hp.base = w.hc_head.base;
    hp.scale = w.hc_head.scale;
    hp.x_out = ws.x;
    hp.mix = ws.mix;
    hp.tokens = rows;
    hp.n_hc = n_hc;
    hp.dim = D;
    hp.sinkhorn_iters = c.hc_sinkhorn_iters;
    hp.hc_eps = float(c.hc_eps);
    hp.norm_eps = float(c.rms_norm_eps);
    cuda::hc_head(hp, s);
    cuda::RmsNormParams np;
    np.x = ws.x;
    np.weight = w.norm;
    np.y = ws.x;
    np.rows = rows;
    np.dim = D;
    np.x_stride = np.y_stride = D;
    np.eps = float(c.rms_norm_eps);
    cuda::rms_norm(np, s);
    linear_f32(w.head, ws.x, rows, ws.logits);
}

}  // namespace dsv4
