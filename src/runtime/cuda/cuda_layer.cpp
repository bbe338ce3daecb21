// One block of the GPU forward: the steps of CpuModel::block_forward and attention_forward (src/model/), same
// rounding points, same order (moe_forward: cuda_moe.cpp); plus the linear dispatch of Precision (FP8 -> quantized
// input and FP8 GEMM, dense -> the chunk-invariant f32 dense_linear) and the observer downloads.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/number_formats.h"
#include "kernels/cuda/attention_inputs/attention_inputs.h"
#include "kernels/cuda/attention_slots/attention_slots.h"
#include "kernels/cuda/bf16_linear/bf16_linear.h"
#include "kernels/cuda/compressor/compressor.h"
#include "kernels/cuda/convert/convert.h"
#include "kernels/cuda/dense_linear/dense_linear.h"
#include "kernels/cuda/gemm_fp8/gemm_fp8.h"
#include "kernels/cuda/grouped_linear/grouped_linear.h"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/mhc/mhc.h"
#include "kernels/cuda/quant/quant.h"
#include "kernels/cuda/rms_norm/rms_norm.h"
#include "kernels/cuda/sparse_attention/sparse_attention.h"
#include "runtime/cuda/cuda_model_impl.h"
#include "runtime/cuda/top_k_margin.h"

namespace dsv4 {

cuda::HcMixParams CudaModel::Impl::hc_mix_params(const cuda::DeviceHc& hw, const bf16* streams, int64_t tokens) {
    cuda::HcMixParams p;
    p.streams = streams;
    p.fn = hw.fn;
    p.base = hw.base;
    p.scale = hw.scale;
    p.x_out = ws.x;
    p.mix = ws.mix;
    p.tokens = tokens;
    p.n_hc = config.hc_mult;
    p.dim = config.hidden_size;
    p.sinkhorn_iters = config.hc_sinkhorn_iters;
    p.hc_eps = float(config.hc_eps);
    p.norm_eps = float(config.rms_norm_eps);
    return p;
}

const float* CudaModel::Impl::inv_freq(int64_t layer) const {
    return config.compress_ratios[size_t(layer)] ? compress_inv_freq.get() : main_inv_freq.get();
}

void CudaModel::Impl::observe_host(std::string_view name, int64_t layer, const std::vector<float>& data, int64_t rows,
                                   int64_t cols) {
    observer(name, layer, data.data(), rows, cols);
}

void CudaModel::Impl::observe_bf16(std::string_view name, int64_t layer, const bf16* data, int64_t rows, int64_t cols) {
    if (!observer) return;
    std::vector<uint16_t> raw(static_cast<size_t>(rows * cols));
    DSV4_CUDA_CHECK(cudaMemcpyAsync(raw.data(), data, raw.size() * 2, cudaMemcpyDeviceToHost, stream->get()));
    stream->synchronize();
    std::vector<float> values(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) values[i] = bf16_to_f32(raw[i]);
    observe_host(name, layer, values, rows, cols);
}

Lane CudaModel::Impl::main_lane() const {
    return {stream->get(), {ws.act_q, ws.act_scale}, ws.y_f32, ws.gemm, ws.gemm_bytes};
}

Lane CudaModel::Impl::side_lane() const {
    return {side_stream->get(), ws.side_act, ws.side_y_f32, ws.side_gemm, ws.gemm_bytes};
}

void CudaModel::Impl::wait_for(cudaStream_t waiter, cudaStream_t producer, cuda::Event& event) {
    event.record(producer);
    DSV4_CUDA_CHECK(cudaStreamWaitEvent(waiter, event.get()));
}

void CudaModel::Impl::fork_side() { wait_for(side_stream->get(), stream->get(), *side_fork); }

void CudaModel::Impl::join_side() { wait_for(stream->get(), side_stream->get(), *side_join); }

void CudaModel::Impl::sinkhorn_on_side() {
    if (!pending_sinkhorn) return;
    fork_side();
    cuda::hc_sinkhorn(*pending_sinkhorn, side_lane().stream);
    pending_sinkhorn.reset();
}

void CudaModel::Impl::act_quant(const Lane& lane, const bf16* x, int64_t rows, int64_t cols) {
    cuda::ActQuantParams p;
    p.x = x;
    p.q = lane.act.q;
    p.scales = lane.act.scales;
    p.rows = rows;
    p.cols = cols;
    p.x_stride = cols;
    cuda::act_quant_fp8(p, lane.stream);
}

bool CudaModel::Impl::f32_on_tensor_cores(const cuda::DeviceMatrix& w) {
    return w.format == WeightFormat::kBF16 && w.rows % 8 == 0 && w.cols % 16 == 0;
}

Fp8Rows CudaModel::Impl::fp8_rows(const bf16* x, int64_t rows, int64_t cols, const Fp8Rows& quantized) {
    return fp8_rows(main_lane(), x, rows, cols, quantized);
}

Fp8Rows CudaModel::Impl::fp8_rows(const Lane& lane, const bf16* x, int64_t rows, int64_t cols,
                                  const Fp8Rows& quantized) {
    if (quantized.q) return quantized;
    act_quant(lane, x, rows, cols);
    return lane.act;
}

void CudaModel::Impl::linear_f32(const cuda::DeviceMatrix& w, const bf16* x, int64_t m, float* y, int64_t ldy,
                                 bool chains) {
    linear_f32(main_lane(), w, x, m, y, ldy, chains);
}

void CudaModel::Impl::linear_f32(const Lane& lane, const cuda::DeviceMatrix& w, const bf16* x, int64_t m, float* y,
                                 int64_t ldy, bool chains) {
    DSV4_CHECK(w.format == WeightFormat::kF32 || w.format == WeightFormat::kBF16,
               "linear_f32 needs a dense weight ({} given)", weight_format_name(w.format));
    ldy = ldy ? ldy : w.rows;
    // A bf16 weight: every product of two bf16 values is exact in f32, so the tensor cores' f32 block sums give the
    // reference's f32 dot product up to summation order (docs/numerics.md, "Dense f32 linears on the GPU").
    if (!chains && f32_on_tensor_cores(w)) {
        cuda::Bf16LinearParams p;
        p.x = x;
        p.w = static_cast<const bf16*>(w.data);
        p.y = y;
        p.m = m;
        p.n = w.rows;
        p.k = w.cols;
        p.ldx = w.cols;
        p.ldy = ldy;
        cuda::bf16_linear(p, lane.stream);  // throws if a stride or an alignment does not fit
        return;
    }
    cuda::DenseLinearParams p;
    p.type = w.format == WeightFormat::kF32 ? cuda::DenseType::kF32 : cuda::DenseType::kBF16;
    p.x = x;
    p.w = w.data;
    p.y = y;
    p.m = m;
    p.n = w.rows;
    p.k = w.cols;
    p.ldx = p.ldw = w.cols;
    p.ldy = ldy;
    cuda::dense_linear(p, lane.stream);
}

void CudaModel::Impl::linear(const cuda::DeviceMatrix& w, const bf16* x, int64_t m, bf16* y, const Fp8Rows& quantized) {
    linear(main_lane(), w, x, m, y, quantized);
}

// Every FP8 linear, whatever its row count, runs gemm_fp8's tensor-core path: fixed 128-column K blocks promoted to
// f32 in ascending order, so each output row has the same bits whatever M is and whichever rows share the launch
// (chunk and batch invariance; GemmFp8.MmaRowsBitwiseIndependentOfBatchAndTile). cuBLASLt's block-scaled path is
// faster for large M but picks its summation by shape: a row's bits would change with the batch. A K the tensor-core
// path does not take (K % 16 != 0, small models only) runs the generic path, batch-invariant too
// (cuda::fp8_gemm_path_for).
void CudaModel::Impl::linear(const Lane& lane, const cuda::DeviceMatrix& w, const bf16* x, int64_t m, bf16* y,
                             const Fp8Rows& quantized, const int32_t* rows_live) {
    DSV4_CHECK(!rows_live || w.format == WeightFormat::kFp8Block, "linear: rows_live needs an FP8 weight ({} given)",
               weight_format_name(w.format));
    if (w.format == WeightFormat::kFp8Block) {
        const Fp8Rows a = fp8_rows(lane, x, m, w.cols, quantized);
        cuda::Fp8GemmParams p;
        p.a = a.q;
        p.a_scale = a.scales;
        p.w = static_cast<const uint8_t*>(w.data);
        p.w_scale = w.scale;
        p.y = y;
        p.m = m;
        p.n = w.rows;
        p.k = w.cols;
        p.workspace = lane.gemm;
        p.workspace_bytes = lane.gemm_bytes;
        p.path = cuda::fp8_gemm_path_for(w.cols);
        p.rows_live = rows_live;
        cuda::fp8_gemm(*lt, p, lane.stream);
        return;
    }
    linear_f32(lane, w, x, m, lane.y_f32, 0, false);
    cuda::f32_to_bf16({lane.y_f32, y, m, w.rows, w.rows, w.rows}, lane.stream);
}

void CudaModel::Impl::grouped_linear(const cuda::DeviceMatrix& w, const bf16* x, int64_t m, int64_t groups, bf16* y) {
    const int64_t in = w.cols, out = w.rows / groups;
    if (w.format == WeightFormat::kFp8Block) {
        cuda::GroupedLinearParams p;
        p.x = x;
        p.w = static_cast<const uint8_t*>(w.data);
        p.w_scale = w.scale;
        p.y = y;
        p.m = m;
        p.groups = groups;
        p.in = in;
        p.out = out;
        cuda::grouped_linear(p, stream->get());
        return;
    }
    // Dense wo_a (the F32 fixtures): group g's rows of W on group g's slice of x, f32, then one bf16 cast.
    DSV4_CHECK(w.format == WeightFormat::kF32 || w.format == WeightFormat::kBF16, "grouped_linear: format {}",
               weight_format_name(w.format));
    const bool f32 = w.format == WeightFormat::kF32;
    for (int64_t g = 0; g < groups; ++g) {
        cuda::DenseLinearParams p;
        p.type = f32 ? cuda::DenseType::kF32 : cuda::DenseType::kBF16;
        p.x = x + g * in;
        p.w = static_cast<const uint8_t*>(w.data) + g * out * in * (f32 ? 4 : 2);
        p.y = ws.y_f32 + g * out;
        p.m = m;
        p.n = out;
        p.k = in;
        p.ldx = groups * in;
        p.ldw = in;
        p.ldy = groups * out;
        cuda::dense_linear(p, stream->get());
    }
    cuda::f32_to_bf16({ws.y_f32, y, m, groups * out, groups * out, groups * out}, stream->get());
}

// CpuModel::block_forward.
void CudaModel::Impl::block(int64_t layer) {
    const ModelConfig& c = config;
    const int64_t T = piece.tokens;
    const cuda::DeviceBlock& b = w.layers[size_t(layer)];
    const int64_t D = c.hidden_size, n_hc = c.hc_mult;
    cudaStream_t s = stream->get();
    // Only hc_post reads comb, so its Sinkhorn normalization is deferred and runs on the side lane beside the
    // sub-layer (pending_sinkhorn; joined before hc_post). An observer synchronizes the main stream to download, so
    // with one everything stays on the main lane.
    const bool side_sinkhorn = !observer;
    if (T == 0) {  // data-parallel attention, none of the piece's rows on this rank: its share of the experts only
        moe(layer);
        return;
    }
    auto hc_pre = [&](const cuda::DeviceHc& hw, const float* norm) {  // x, and x quantized for the FP8 GEMMs
        cuda::HcMixParams mix = hc_mix_params(hw, ws.streams, T);
        mix.defer_sinkhorn = side_sinkhorn;
        // The sub-layer's input norm runs inside hc_pre's kernel where it can (decode batches).
        cuda::hc_pre_norm(mix, {ws.x, norm, ws.x, T, D, D, D, float(c.rms_norm_eps), ws.x_fp8.q, ws.x_fp8.scales}, s);
        if (side_sinkhorn) pending_sinkhorn = mix;
    };
    auto hc_post = [&]() {   // of ws.y, or of the MoE's pending sum of routed and shared outputs
        sinkhorn_on_side();  // where the sub-layer did not launch it
        if (side_sinkhorn) join_side();
        const cuda::HcPostParams post{ws.y, ws.streams, ws.mix, ws.streams_next, T, n_hc, D};
        if (pending_combine)
            cuda::hc_post_of_moe(post, *pending_combine, s);
        else
            cuda::hc_post(post, s);
        pending_combine.reset();
        std::swap(ws.streams, ws.streams_next);
    };

    // 1. Attention sub-block.
    stages.mark("attn_hc_pre", layer);
    hc_pre(b.hc_attn, b.attn_norm);
    observe_bf16("attn_in", layer, ws.x, T, D);
    attention(layer);
    observe_bf16("attn_out", layer, ws.y, T, D);
    stages.mark("attn_hc_post", layer);
    hc_post();

    // 2. MoE sub-block.
    stages.mark("ffn_hc_pre", layer);
    hc_pre(b.hc_ffn, b.ffn_norm);
    sinkhorn_on_side();
    observe_bf16("ffn_in", layer, ws.x, T, D);
    moe(layer);
    observe_bf16("ffn_out", layer, ws.y, T, D);
    stages.mark("ffn_hc_post", layer);
    hc_post();
    observe_bf16("streams", layer, ws.streams, T, n_hc * D);
}

void CudaModel::Impl::query_and_kv_latents(const cuda::DeviceAttention& a) {
    const int64_t T = piece.tokens, q = config.q_lora_rank, d = config.head_dim;
    const float eps = float(config.rms_norm_eps);
    cudaStream_t s = stream->get();
    if (options.stacked_projections && a.wq_a_wkv.data) {
        // One GEMM: ws.qr_kv [T, q + d] holds wq_a x in columns [0, q) and wkv x in [q, q + d); the two norms (one
        // launch) read their columns with the row stride q + d and write their dense buffers.
        linear(a.wq_a_wkv, ws.x, T, ws.qr_kv, ws.x_fp8);
        const cuda::RmsNormParams norms[] = {
            {ws.qr_kv, a.q_norm, ws.qr, T, q, q + d, q, eps, ws.qr_fp8.q, ws.qr_fp8.scales},
            {ws.qr_kv + q, a.kv_norm, ws.kv, T, d, q + d, d, eps}};
        cuda::rms_norms(norms, s);
        return;
    }
    linear(a.wq_a, ws.x, T, ws.qr, ws.x_fp8);
    cuda::rms_norm({ws.qr, a.q_norm, ws.qr, T, q, q, q, eps, ws.qr_fp8.q, ws.qr_fp8.scales}, s);
    linear(a.wkv, ws.x, T, ws.kv, ws.x_fp8);
    cuda::rms_norm({ws.kv, a.kv_norm, ws.kv, T, d, d, d, eps}, s);
}

const float* F32Projections::of(const cuda::DeviceMatrix& w) const {
    const auto at = std::find(weights.begin(), weights.end(), &w);
    DSV4_CHECK(at != weights.end(), "no f32 projection of x with this weight");
    return outputs[size_t(at - weights.begin())];
}

F32Projections CudaModel::Impl::f32_projections_of_x(const Lane& lane, const cuda::DeviceAttention& a) {
    F32Projections out;
    out.weights = cuda::f32_projections(a);
    std::vector<int64_t> column;
    for (const cuda::DeviceMatrix* w : out.weights) {
        column.push_back(out.width);
        out.outputs.push_back(ws.f32_proj + out.width);
        out.width += w->rows;
    }
    // The stack and its parts alone must give the same bits, so the tensor cores take them only if they take
    // every part.
    const bool chains = !std::all_of(out.weights.begin(), out.weights.end(),
                                     [](const cuda::DeviceMatrix* w) { return f32_on_tensor_cores(*w); });
    if (options.stacked_projections && a.f32_proj.data) {
        linear_f32(lane, a.f32_proj, ws.x, piece.tokens, ws.f32_proj, 0, chains);  // the stack's rows are the columns
        return out;
    }
    for (size_t i = 0; i < out.weights.size(); ++i)
        linear_f32(lane, *out.weights[i], ws.x, piece.tokens, ws.f32_proj + column[i], out.width, chains);
    return out;
}

// attention_forward: x = ws.x [T, D] -> ws.y [T, D].
void CudaModel::Impl::attention(int64_t layer) {
    const ModelConfig& c = config;
    const int64_t T = piece.tokens;
    const cuda::DeviceAttention& a = w.layers[size_t(layer)].attn;
    const int64_t H = c.num_heads, d = c.head_dim, r = c.rope_head_dim, W = c.sliding_window, D = c.hidden_size;
    const int64_t ratio = c.compress_ratios[size_t(layer)], S = pool.sequences;
    const float eps = float(c.rms_norm_eps);
    cudaStream_t s = stream->get();
    // run_compressor on its f32 projections of x (wkv x, wgate x): the device state machine writes the closed
    // entries.
    auto compress = [&](const cuda::DeviceCompressor& cw, const F32Projections& proj, cuda::CompressorKind kind,
                        uint8_t* cache, int64_t state_offset, cudaStream_t on) {
        const int64_t width = (cw.overlap ? 2 : 1) * cw.head_dim, slots = (cw.overlap ? 2 : 1) * cw.ratio;
        cuda::CompressorParams p;
        p.kv = proj.of(cw.wkv);
        p.score = proj.of(cw.wgate);
        p.row_stride = proj.width;
        p.token_seq = ws.token_seq;
        p.seq_first_row = ws.seq_first_row;
        p.seq_tokens = ws.seq_tokens;
        p.seq_start_position = ws.seq_start;
        p.seq_state = ws.seq_state;
        p.ape = cw.ape;
        p.norm_weight = cw.norm;
        p.rope_inv_freq = inv_freq(layer);
        p.state_kv = comp_state + state_offset;
        p.state_score = comp_state + state_offset + S * slots * width;
        p.cache = cache;
        p.page_table = ws.page_table;
        p.max_pages = int32_t(pool.max_pages);
        p.page_size = int32_t(pool.page_entries[size_t(layer)]);
        p.tokens = int32_t(T);
        p.seqs = int32_t(piece.seqs);
        p.head_dim = int32_t(cw.head_dim);
        p.rope_dim = int32_t(r);
        p.ratio = int32_t(cw.ratio);
        p.eps = eps;
        p.kind = kind;
        cuda::compressor(p, on);
    };

    // Steps 3 and 4 (the f32 projections of x, the indexer, the main compressor) read only x, qr and the pool and
    // write only their own buffers and the pool's compressed rows and keys: on layers that compress they run on the
    // side lane, beside steps 1 and 2, joined before the sparse attention. The f32 projections need only x, so they
    // start there before wq_a | wkv; the rest waits for qr. An observer synchronizes the main stream to download, so
    // with one everything stays on the main lane. On a layer without that side work the deferred Sinkhorn of mHC
    // takes the side lane at once; on one with it, after it (the side lane is the longer branch on CSA layers).
    // On CSA layers the side lane forks once more: the two compressors and the indexer's head weights read only the
    // f32 projections, so they run on the compressor lane beside the indexer's queries, and the side lane waits for
    // the indexer's keys only before its scores (the side lane's chain after qr is what the main lane waits for).
    const bool fork = ratio > 0 && !observer;
    const Lane side = fork ? side_lane() : main_lane();
    const bool compressor_lane = fork && a.indexer;
    const cudaStream_t compressors = compressor_lane ? compressor_stream->get() : side.stream;
    // Observer downloads (single-sequence pieces only): the entries this piece closes.
    const int slot = piece.slot;
    const int64_t start = piece.start;
    const int64_t closed = ratio > 0 && slot >= 0 ? (start + T) / ratio - start / ratio : 0;
    DSV4_CHECK(!observer || slot >= 0, "an observer needs single-sequence pieces");
    // Entries visible to the piece's last rows (the indexer's score columns, the HCA slot list): from the sequences'
    // furthest position, or from the pool's context when a decode graph is captured for any step.
    const int64_t visible = ratio > 0 ? piece.max_end / ratio : 0;
    uint8_t* const keys = a.indexer ? index_keys + pool.index_row[size_t(layer)] * pool.index_entry_bytes : nullptr;
    // The indexer's keys of the piece (its compressor), the indexer's head weights and the main compressor's entries.
    auto index_keys_of = [&](const F32Projections& proj) {
        compress(a.indexer->compressor, proj, cuda::CompressorKind::kIndexer, keys,
                 pool.index_state_offset[size_t(layer)], compressors);
    };
    auto head_weights_of = [&](const F32Projections& proj) {
        // bf16(weights_proj x) * (dI^-0.5 nI^-0.5), rounded to bf16 again, in the cast.
        const int64_t nI = c.index_n_heads, dI = c.index_head_dim;
        const float weight_scale = float(std::pow(double(dI), -0.5) * std::pow(double(nI), -0.5));
        cuda::f32_to_bf16({proj.of(a.indexer->weights_proj), ws.head_weights, T, nI, proj.width, nI, weight_scale},
                          compressors);
    };
    auto main_entries_of = [&](const F32Projections& proj) {
        compress(*a.compressor, proj, cuda::CompressorKind::kMain,
                 entries + pool.compressed_row[size_t(layer)] * pool.entry_bytes, pool.state_offset[size_t(layer)],
                 compressors);
    };
    F32Projections proj;
    if (fork) {
        fork_side();
        proj = f32_projections_of_x(side, a);
    } else {
        sinkhorn_on_side();
    }
    if (compressor_lane) {
        wait_for(compressors, side.stream, *compressor_fork);
        index_keys_of(proj);
        if (c.index_topk > 0) head_weights_of(proj);
        index_keys_ready->record(compressors);
        if (a.compressor) main_entries_of(proj);
    }

    // 1. Queries and window KV: qr = q_norm(wq_a x) and kv = kv_norm(wkv x); q = wq_b qr.
    stages.mark("q_proj", layer);
    query_and_kv_latents(a);
    observe_bf16("attn.qr", layer, ws.qr, T, c.q_lora_rank);
    if (fork) fork_side();  // the side lane's indexer reads qr
    linear(a.wq_b, ws.qr, T, ws.q, ws.qr_fp8);
    observe_bf16("attn.q_proj", layer, ws.q, T, H * d);

    // 2. With them in one launch: the per-head norm and RoPE of q, RoPE of kv and kv packed (FP8 nope) as the
    //    chunk's own entries. In a decode step (one token per sequence) also into each sequence's ring of the last W
    //    entries: the entry a token replaces there is W positions back, outside every window of the step. Otherwise
    //    the ring is updated after the attention (step 7), which may still read the entries the piece replaces.
    const int64_t ring_row = pool.ring_row + layer * S * W;  // this layer's ring of state slot 0
    uint8_t* chunk_entries = entries + pool.chunk_row * pool.entry_bytes;
    const bool ring_now = piece.one_token_each;
    cuda::AttentionInputsParams in;
    in.q = ws.q;
    in.kv = ws.kv;
    in.inv_freq = inv_freq(layer);
    in.positions = ws.positions;
    in.entries = chunk_entries;
    in.ring = ring_now ? entries + ring_row * pool.entry_bytes : nullptr;
    in.ring_slots = ring_now ? ws.ring_target : nullptr;
    in.tokens = T;
    in.heads = H;
    in.head_dim = d;
    in.rope_dim = r;
    in.eps = eps;
    cuda::attention_inputs(in, s);
    observe_bf16("attn.q", layer, ws.q, T, H * d);
    if (observer) {
        cuda::unpack_kv_entries({chunk_entries, nullptr, ws.kv_view, T, d, r, d}, s);
        observe_bf16("attn.kv", layer, ws.kv_view, T, d);
    }

    // The key list of every query token for step 5 (window slots, then the selected or visible compressed entries):
    // written by the indexer's top-k from its selection where there is one, else by its own launch in step 5, which
    // closes the side lane on layers that fork (off the main lane's chain there). An observer's step 4 borrows the
    // list's buffer after the top-k, so with one the list is written in step 5.
    const bool slots_by_topk = a.indexer && c.index_topk > 0 && !observer;
    const int64_t slots = a.indexer ? W + c.index_topk : (a.compressor ? W + visible : W);
    cuda::AttentionSlotsParams ap;
    ap.indices = ws.attn_indices;
    ap.selected = a.indexer ? ws.selected : nullptr;
    ap.positions = ws.positions;
    ap.token_seq = ws.token_seq;
    ap.seq_first_row = ws.seq_first_row;
    ap.seq_start_position = ws.seq_start;
    ap.seq_state = ws.seq_state;
    ap.page_table = ws.page_table;
    ap.max_pages = int32_t(pool.max_pages);
    ap.page_size = ratio > 0 ? int32_t(pool.page_entries[size_t(layer)]) : 0;
    ap.tokens = int32_t(T);
    ap.slots = int32_t(slots);
    ap.window = int32_t(W);
    ap.topk = int32_t(c.index_topk);
    ap.ratio = a.indexer ? 0 : int32_t(ratio);
    ap.ring_row = ring_row;
    ap.chunk_row = pool.chunk_row;
    ap.compressed_row = ratio > 0 ? pool.compressed_row[size_t(layer)] : 0;

    // 3. Lightning indexer (CSA). First the f32 projections of x that it and the main compressor read (CSA, HCA):
    //    every compressor's wkv x and wgate x, the indexer's weights_proj x.
    if (a.indexer && !fork) stages.mark("indexer", layer);
    if (!fork) proj = f32_projections_of_x(side, a);
    // With index_topk 0 a CSA layer selects no compressed entry: no queries or scores, but its keys are still built
    // (as the CPU does).
    if (a.indexer && c.index_topk > 0) {
        linear(side, a.indexer->wq_b, ws.qr, T, ws.qi, ws.qr_fp8);
        cuda::IndexerRotateParams rq{ws.qi, T * c.index_n_heads, c.index_head_dim, c.index_head_dim};
        rq.rope_inv_freq = inv_freq(layer);  // RoPE of each head in the same launch
        rq.positions = ws.positions;
        rq.rope_dim = r;
        rq.rope_heads = c.index_n_heads;
        cuda::indexer_rotate_fp4(rq, side.stream);
    }
    if (a.indexer) {
        const int64_t dI = c.index_head_dim;
        if (!compressor_lane) index_keys_of(proj);
        if (observer && closed > 0) {  // the keys this piece closed, decoded as the indexer reads them
            const int64_t bytes = pool.index_entry_bytes;
            std::vector<uint8_t> raw(static_cast<size_t>(closed * bytes));
            for (int64_t e = 0; e < closed; ++e)
                DSV4_CUDA_CHECK(cudaMemcpyAsync(raw.data() + e * bytes,
                                                index_keys + entry_row(layer, slot, start / ratio + e, true) * bytes,
                                                size_t(bytes), cudaMemcpyDeviceToHost, s));
            stream->synchronize();
            std::vector<float> values(static_cast<size_t>(closed * dI));
            for (int64_t e = 0; e < closed; ++e) {
                const uint8_t* entry = raw.data() + e * bytes;
                for (int64_t i = 0; i < dI; ++i) {
                    const uint8_t byte = entry[i / 2];
                    const float scale = std::ldexp(1.0f, int(entry[dI / 2 + i / 32]) - 127);
                    values[size_t(e * dI + i)] = e2m1_to_f32(uint8_t(i % 2 ? byte >> 4 : byte & 0xF)) * scale;
                }
            }
            observe_host("attn.index_keys", layer, values, closed, dI);
        }
    }
    if (a.indexer && c.index_topk > 0) {
        const int64_t nI = c.index_n_heads, dI = c.index_head_dim;
        if (compressor_lane)
            DSV4_CUDA_CHECK(cudaStreamWaitEvent(side.stream, index_keys_ready->get()));
        else
            head_weights_of(proj);
        cuda::IndexerScoresParams sp;
        sp.q = reinterpret_cast<const uint16_t*>(ws.qi);
        sp.head_weights = reinterpret_cast<const uint16_t*>(ws.head_weights);
        sp.keys = keys;
        sp.page_table = ws.page_table;
        sp.token_state = ws.token_state;
        sp.token_position = ws.positions;
        sp.scores = reinterpret_cast<uint16_t*>(ws.index_scores);
        sp.tokens = int32_t(T);
        sp.heads = int32_t(nI);
        sp.dim = int32_t(dI);
        sp.ratio = int32_t(ratio);
        sp.max_visible = int32_t(visible);
        sp.max_pages = int32_t(pool.max_pages);
        sp.page_size = int32_t(pool.page_entries[size_t(layer)]);
        cuda::indexer_scores(sp, side.stream);
        cuda::IndexerTopkParams tp;
        tp.scores = sp.scores;
        tp.token_position = ws.positions;
        tp.selected = ws.selected;
        tp.tokens = int32_t(T);
        tp.ratio = int32_t(ratio);
        tp.max_visible = int32_t(visible);
        tp.topk = int32_t(c.index_topk);
        if (slots_by_topk) tp.slots = ap;
        cuda::indexer_topk(tp, side.stream);
    }
    if (a.indexer && observer) {  // the top-k margins, from the device's scores, as the CPU computes them
        std::vector<uint16_t> raw(static_cast<size_t>(T * visible));
        if (visible > 0)
            DSV4_CUDA_CHECK(cudaMemcpyAsync(raw.data(), ws.index_scores, raw.size() * 2, cudaMemcpyDeviceToHost, s));
        stream->synchronize();
        std::vector<float> margin(static_cast<size_t>(T)), row;
        for (int64_t t = 0; t < T; ++t) {
            const int64_t vis = (start + t + 1) / ratio;
            row.resize(size_t(vis));
            for (int64_t e = 0; e < vis; ++e) row[size_t(e)] = bf16_to_f32(raw[size_t(t * visible + e)]);
            margin[size_t(t)] = top_k_margin(row.data(), vis, std::min(c.index_topk, vis));
        }
        observe_host("attn.index_margin", layer, margin, T, 1);
        std::vector<int32_t> chosen(static_cast<size_t>(T * c.index_topk));
        DSV4_CUDA_CHECK(cudaMemcpyAsync(chosen.data(), ws.selected, chosen.size() * 4, cudaMemcpyDeviceToHost, s));
        stream->synchronize();
        observe_host("attn.selected", layer, std::vector<float>(chosen.begin(), chosen.end()), T, c.index_topk);
    }

    // 4. Main compressor (CSA/HCA).
    if (a.compressor && !fork) stages.mark("compressor", layer);
    if (a.compressor) {
        if (!compressor_lane) main_entries_of(proj);
        if (observer && closed > 0) {  // the entries this piece closed, unpacked (closed <= T rows of kv_view)
            std::vector<int32_t> rows(static_cast<size_t>(closed));
            for (int64_t e = 0; e < closed; ++e)
                rows[size_t(e)] = int32_t(entry_row(layer, slot, start / ratio + e, false));
            DSV4_CUDA_CHECK(cudaMemcpyAsync(ws.attn_indices, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice, s));
            cuda::unpack_kv_entries({entries, ws.attn_indices, ws.kv_view, closed, d, r, d}, s);
            observe_bf16("attn.compressed", layer, ws.kv_view, closed, d);  // synchronizes: `rows` outlives the copy
        }
    }

    // 5a. The key list, where the top-k did not write it.
    if (!fork) stages.mark("sparse_attn", layer);
    if (!slots_by_topk) cuda::attention_slots(ap, fork ? side.stream : s);

    // The side lane's end: what remains of steps 3 and 4 after steps 1 and 2.
    if (fork) {
        stages.mark(a.indexer ? "indexer" : "compressor", layer);
        if (compressor_lane) wait_for(side.stream, compressors, *compressor_join);
        join_side();
        sinkhorn_on_side();
        stages.mark("sparse_attn", layer);
    }

    // 5b. Sparse attention over the window slots and the compressed entries, then the inverse RoPE.
    const cuda::SparseAttentionPlan plan = cuda::plan_sparse_attention(int32_t(H), int32_t(d), int32_t(slots));
    cuda::SparseAttentionParams sp;
    sp.q = reinterpret_cast<const uint16_t*>(ws.q);
    sp.kv = entries;
    sp.indices = ws.attn_indices;
    sp.sink = a.sink;
    sp.out = reinterpret_cast<uint16_t*>(ws.o);
    sp.workspace = plan.splits > 1 ? ws.attn_partials : nullptr;
    sp.workspace_floats = ws.attn_partial_floats;
    sp.tokens = int32_t(T);
    sp.heads = int32_t(H);
    sp.head_dim = int32_t(d);
    sp.rope_dim = int32_t(r);
    sp.slots = int32_t(slots);
    sp.splits = plan.splits;
    sp.scale = float(std::pow(double(d), -0.5));
    sp.inverse_rope_inv_freq = inv_freq(layer);  // fused into the attention's combine where it can be
    sp.positions = ws.positions;
    cuda::sparse_attention(sp, s);
    observe_bf16("attn.o", layer, ws.o, T, H * d);

    // 6. Grouped low-rank output projection.
    stages.mark("o_proj", layer);
    grouped_linear(a.wo_a, ws.o, T, c.o_groups, ws.z);
    observe_bf16("attn.z", layer, ws.z, T, c.o_groups * c.o_lora_rank);
    linear(a.wo_b, ws.z, T, ws.y);

    // 7. Each sequence's ring keeps its last W entries (written after the attention read the old ones), unless
    //    step 2 wrote them.
    if (!ring_now) {
        stages.mark("ring_update", layer);
        cuda::pack_kv_entries({ws.kv, entries + ring_row * pool.entry_bytes, ws.ring_target, T, d, r, d}, s);
    }
    (void)D;
}

}  // namespace dsv4
