// The attention half of a GPU block: the steps of attention_forward (src/model/attention.cpp), same rounding points,
// same order: the queries and the window KV, the lightning indexer and the compressors (on side lanes where the
// layer compresses), the sparse attention over the selected entries, the grouped output projection, and the observer
// downloads of the intermediate values the CPU's tests compare. Tested through tests/gpu/cuda_model_test.cpp and
// cuda_layer_test.cpp against the CPU.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/number_formats.h"
#include "kernels/cuda/attention_inputs/attention_inputs.h"
#include "kernels/cuda/attention_slots/attention_slots.h"
#include "kernels/cuda/compressor/compressor.h"
#include "kernels/cuda/convert/convert.h"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/quant/quant.h"
#include "kernels/cuda/rms_norm/rms_norm.h"
#include "kernels/cuda/sparse_attention/sparse_attention.h"
#include "runtime/cuda/cuda_model_impl.h"
#include "runtime/cuda/top_k_margin.h"

namespace dsv4 {

// attention_forward: x = ws.x [T, D] -> ws.y [T, D].
void CudaModel::Impl::attention(int64_t layer) {
    const ModelConfig& c = config;
    const int64_t T = piece.tokens;
    const cuda::DeviceAttention& a = w.layers[size_t(layer)].attn;
    const int64_t H = c.num_heads, W = c.sliding_window, S = pool.sequences;
    const int64_t ratio = c.compress_ratios[size_t(layer)];
    cudaStream_t s = stream->get();

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
    // With index_topk 0 a CSA layer selects no compressed entry: no queries or scores, but its keys are still built
    // (as the CPU does).
    const bool selects = a.indexer && c.index_topk > 0;
    // Observer downloads (single-sequence pieces only): the entries this piece closes.
    DSV4_CHECK(!observer || piece.slot >= 0, "an observer needs single-sequence pieces");
    const int64_t closed = ratio > 0 && piece.slot >= 0 ? (piece.start + T) / ratio - piece.start / ratio : 0;
    // Entries visible to the piece's last rows (the indexer's score columns, the HCA slot list): from the sequences'
    // furthest position, or from the pool's context when a decode graph is captured for any step.
    const int64_t visible = ratio > 0 ? piece.max_end / ratio : 0;
    uint8_t* const keys = a.indexer ? index_keys + pool.index_row[size_t(layer)] * pool.index_entry_bytes : nullptr;
    // The indexer's keys of the piece (its compressor) and the main compressor's entries.
    auto index_keys_of = [&](const F32Projections& proj) {
        compress(layer, a.indexer->compressor, proj, cuda::CompressorKind::kIndexer, keys,
                 pool.index_state_offset[size_t(layer)], compressors);
    };
    auto main_entries_of = [&](const F32Projections& proj) {
        compress(layer, *a.compressor, proj, cuda::CompressorKind::kMain,
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
        if (selects) index_head_weights(a, proj, compressors);
        index_keys_ready->record(compressors);
        if (a.compressor) main_entries_of(proj);
    }

    // 1. Queries and window KV: qr = q_norm(wq_a x) and kv = kv_norm(wkv x); q = wq_b qr.
    stages.mark("q_proj", layer);
    query_and_kv_latents(a);
    observe_bf16("attn.qr", layer, ws.qr, T, c.q_lora_rank);
    if (fork) fork_side();  // the side lane's indexer reads qr
    linear(a.wq_b, ws.qr, T, ws.q, ws.qr_fp8);
    observe_bf16("attn.q_proj", layer, ws.q, T, H * c.head_dim);

    // 2. With them in one launch: the per-head norm and RoPE of q, RoPE of kv and kv packed (FP8 nope) as the
    //    chunk's own entries. In a decode step (one token per sequence) also into each sequence's ring of the last W
    //    entries: the entry a token replaces there is W positions back, outside every window of the step. Otherwise
    //    the ring is updated after the attention (step 7), which may still read the entries the piece replaces.
    const int64_t ring_row = pool.ring_row + layer * S * W;  // this layer's ring of state slot 0
    const bool ring_now = piece.one_token_each;
    attention_inputs(layer, ring_now ? ring_row : -1);

    // The key list of every query token for step 5 (window slots, then the selected or visible compressed entries):
    // written by the indexer's top-k from its selection where there is one, else by its own launch in step 5, which
    // closes the side lane on layers that fork (off the main lane's chain there). An observer's step 4 borrows the
    // list's buffer after the top-k, so with one the list is written in step 5.
    const bool slots_by_topk = selects && !observer;
    const int64_t slots = a.indexer ? W + c.index_topk : (a.compressor ? W + visible : W);
    const cuda::AttentionSlotsParams key_list = attention_slots_params(layer, slots, ring_row);

    // 3. Lightning indexer (CSA). First the f32 projections of x that it and the main compressor read (CSA, HCA):
    //    every compressor's wkv x and wgate x, the indexer's weights_proj x.
    if (a.indexer && !fork) stages.mark("indexer", layer);
    if (!fork) proj = f32_projections_of_x(side, a);
    if (selects) indexer_queries(side, layer);
    if (a.indexer) {
        if (!compressor_lane) index_keys_of(proj);
        if (observer && closed > 0) observe_index_keys(layer, closed);
    }
    if (selects) {
        if (compressor_lane)
            DSV4_CUDA_CHECK(cudaStreamWaitEvent(side.stream, index_keys_ready->get()));
        else
            index_head_weights(a, proj, compressors);
        indexer_select(side.stream, layer, keys, visible, slots_by_topk ? &key_list : nullptr);
    }
    if (a.indexer && observer) observe_index_selection(layer, visible);

    // 4. Main compressor (CSA/HCA).
    if (a.compressor && !fork) stages.mark("compressor", layer);
    if (a.compressor) {
        if (!compressor_lane) main_entries_of(proj);
        if (observer && closed > 0) observe_compressed_entries(layer, closed);
    }

    // 5a. The key list, where the top-k did not write it.
    if (!fork) stages.mark("sparse_attn", layer);
    if (!slots_by_topk) cuda::attention_slots(key_list, fork ? side.stream : s);

    // The side lane's end: what remains of steps 3 and 4 after steps 1 and 2.
    if (fork) {
        stages.mark(a.indexer ? "indexer" : "compressor", layer);
        if (compressor_lane) wait_for(side.stream, compressors, *compressor_join);
        join_side();
        sinkhorn_on_side();
        stages.mark("sparse_attn", layer);
    }

    // 5b. Sparse attention over the window slots and the compressed entries, then the inverse RoPE.
    sparse_attention(a, layer, slots);
    observe_bf16("attn.o", layer, ws.o, T, H * c.head_dim);

    // 6. Grouped low-rank output projection.
    stages.mark("o_proj", layer);
    grouped_linear(a.wo_a, ws.o, T, c.o_groups, ws.z);
    observe_bf16("attn.z", layer, ws.z, T, c.o_groups * c.o_lora_rank);
    if (attention_post_mix) {  // and the sub-layer's mHC post-mix in its epilogue (block() swaps the streams)
        const cuda::HcPostParams post = ready_post_mix();
        linear(main_lane(), a.wo_b, ws.z, T, ws.y, {}, nullptr, &post);
    } else {
        linear(a.wo_b, ws.z, T, ws.y);
    }

    // 7. Each sequence's ring keeps its last W entries (written after the attention read the old ones), unless
    //    step 2 wrote them.
    if (!ring_now) {
        stages.mark("ring_update", layer);
        const int64_t d = c.head_dim, r = c.rope_head_dim;
        cuda::pack_kv_entries({ws.kv, entries + ring_row * pool.entry_bytes, ws.ring_target, T, d, r, d}, s);
    }
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

void CudaModel::Impl::attention_inputs(int64_t layer, int64_t ring_row) {
    const ModelConfig& c = config;
    const int64_t T = piece.tokens, d = c.head_dim, r = c.rope_head_dim;
    uint8_t* const chunk_entries = entries + pool.chunk_row * pool.entry_bytes;
    cuda::AttentionInputsParams in;
    in.q = ws.q;
    in.kv = ws.kv;
    in.inv_freq = inv_freq(layer);
    in.positions = ws.positions;
    in.entries = chunk_entries;
    in.ring = ring_row >= 0 ? entries + ring_row * pool.entry_bytes : nullptr;
    in.ring_slots = ring_row >= 0 ? ws.ring_target : nullptr;
    in.tokens = T;
    in.heads = c.num_heads;
    in.head_dim = d;
    in.rope_dim = r;
    in.eps = float(c.rms_norm_eps);
    cuda::attention_inputs(in, stream->get());
    observe_bf16("attn.q", layer, ws.q, T, c.num_heads * d);
    if (observer) {
        cuda::unpack_kv_entries({chunk_entries, nullptr, ws.kv_view, T, d, r, d}, stream->get());
        observe_bf16("attn.kv", layer, ws.kv_view, T, d);
    }
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

void CudaModel::Impl::compress(int64_t layer, const cuda::DeviceCompressor& cw, const F32Projections& proj,
                               cuda::CompressorKind kind, uint8_t* cache, int64_t state_offset, cudaStream_t on) {
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
    p.state_score = comp_state + state_offset + pool.sequences * slots * width;
    p.cache = cache;
    p.page_table = ws.page_table;
    p.max_pages = int32_t(pool.max_pages);
    p.page_size = int32_t(pool.page_entries[size_t(layer)]);
    p.tokens = int32_t(piece.tokens);
    p.seqs = int32_t(piece.seqs);
    p.head_dim = int32_t(cw.head_dim);
    p.rope_dim = int32_t(config.rope_head_dim);
    p.ratio = int32_t(cw.ratio);
    p.eps = float(config.rms_norm_eps);
    p.kind = kind;
    cuda::compressor(p, on);
}

void CudaModel::Impl::index_head_weights(const cuda::DeviceAttention& a, const F32Projections& proj, cudaStream_t on) {
    // bf16(weights_proj x) * (dI^-0.5 nI^-0.5), rounded to bf16 again, in the cast.
    const int64_t nI = config.index_n_heads, dI = config.index_head_dim;
    const float weight_scale = float(std::pow(double(dI), -0.5) * std::pow(double(nI), -0.5));
    cuda::f32_to_bf16(
        {proj.of(a.indexer->weights_proj), ws.head_weights, piece.tokens, nI, proj.width, nI, weight_scale}, on);
}

void CudaModel::Impl::indexer_queries(const Lane& lane, int64_t layer) {
    const ModelConfig& c = config;
    const int64_t T = piece.tokens;
    linear(lane, w.layers[size_t(layer)].attn.indexer->wq_b, ws.qr, T, ws.qi, ws.qr_fp8);
    cuda::IndexerRotateParams rq{ws.qi, T * c.index_n_heads, c.index_head_dim, c.index_head_dim};
    rq.rope_inv_freq = inv_freq(layer);  // RoPE of each head in the same launch
    rq.positions = ws.positions;
    rq.rope_dim = c.rope_head_dim;
    rq.rope_heads = c.index_n_heads;
    cuda::indexer_rotate_fp4(rq, lane.stream);
}

void CudaModel::Impl::indexer_select(cudaStream_t on, int64_t layer, const uint8_t* keys, int64_t visible,
                                     const cuda::AttentionSlotsParams* key_list) {
    const ModelConfig& c = config;
    const int64_t ratio = c.compress_ratios[size_t(layer)];
    cuda::IndexerScoresParams sp;
    sp.q = reinterpret_cast<const uint16_t*>(ws.qi);
    sp.head_weights = reinterpret_cast<const uint16_t*>(ws.head_weights);
    sp.keys = keys;
    sp.page_table = ws.page_table;
    sp.token_state = ws.token_state;
    sp.token_position = ws.positions;
    sp.scores = reinterpret_cast<uint16_t*>(ws.index_scores);
    sp.tokens = int32_t(piece.tokens);
    sp.heads = int32_t(c.index_n_heads);
    sp.dim = int32_t(c.index_head_dim);
    sp.ratio = int32_t(ratio);
    sp.max_visible = int32_t(visible);
    sp.max_pages = int32_t(pool.max_pages);
    sp.page_size = int32_t(pool.page_entries[size_t(layer)]);
    sp.sequence_runs = !piece.one_token_each;  // a prefill piece: runs of tokens of one sequence
    cuda::indexer_scores(sp, on);
    cuda::IndexerTopkParams tp;
    tp.scores = sp.scores;
    tp.token_position = ws.positions;
    tp.selected = ws.selected;
    tp.tokens = int32_t(piece.tokens);
    tp.ratio = int32_t(ratio);
    tp.max_visible = int32_t(visible);
    tp.topk = int32_t(c.index_topk);
    if (key_list) tp.slots = *key_list;
    cuda::indexer_topk(tp, on);
}

cuda::AttentionSlotsParams CudaModel::Impl::attention_slots_params(int64_t layer, int64_t slots,
                                                                   int64_t ring_row) const {
    const ModelConfig& c = config;
    const cuda::DeviceAttention& a = w.layers[size_t(layer)].attn;
    const int64_t ratio = c.compress_ratios[size_t(layer)];
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
    ap.tokens = int32_t(piece.tokens);
    ap.slots = int32_t(slots);
    ap.window = int32_t(c.sliding_window);
    ap.topk = int32_t(c.index_topk);
    ap.ratio = a.indexer ? 0 : int32_t(ratio);
    ap.ring_row = ring_row;
    ap.chunk_row = pool.chunk_row;
    ap.compressed_row = ratio > 0 ? pool.compressed_row[size_t(layer)] : 0;
    return ap;
}

void CudaModel::Impl::sparse_attention(const cuda::DeviceAttention& a, int64_t layer, int64_t slots) {
    const ModelConfig& c = config;
    const int64_t H = c.num_heads, d = c.head_dim;
    const cuda::SparseAttentionPlan plan = cuda::plan_sparse_attention(int32_t(H), int32_t(d), int32_t(slots));
    cuda::SparseAttentionParams sp;
    sp.q = reinterpret_cast<const uint16_t*>(ws.q);
    sp.kv = entries;
    sp.indices = ws.attn_indices;
    sp.sink = a.sink;
    sp.out = reinterpret_cast<uint16_t*>(ws.o);
    sp.workspace = plan.splits > 1 ? ws.attn_partials : nullptr;
    sp.workspace_floats = ws.attn_partial_floats;
    sp.tokens = int32_t(piece.tokens);
    sp.heads = int32_t(H);
    sp.head_dim = int32_t(d);
    sp.rope_dim = int32_t(c.rope_head_dim);
    sp.slots = int32_t(slots);
    sp.splits = plan.splits;
    sp.scale = float(std::pow(double(d), -0.5));
    sp.inverse_rope_inv_freq = inv_freq(layer);  // fused into the attention's combine where it can be
    sp.positions = ws.positions;
    cuda::sparse_attention(sp, stream->get());
}

// ---- observer downloads (single-sequence pieces; each synchronizes the main stream)

void CudaModel::Impl::observe_index_keys(int64_t layer, int64_t closed) {
    // The keys this piece closed, decoded as the indexer reads them.
    const int64_t bytes = pool.index_entry_bytes, dI = config.index_head_dim;
    const int64_t first = piece.start / config.compress_ratios[size_t(layer)];
    std::vector<uint8_t> raw(static_cast<size_t>(closed * bytes));
    for (int64_t e = 0; e < closed; ++e)
        DSV4_CUDA_CHECK(cudaMemcpyAsync(raw.data() + e * bytes,
                                        index_keys + entry_row(layer, piece.slot, first + e, true) * bytes,
                                        size_t(bytes), cudaMemcpyDeviceToHost, stream->get()));
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

void CudaModel::Impl::observe_index_selection(int64_t layer, int64_t visible) {
    // The top-k margins, from the device's scores, as the CPU computes them; then the selection.
    const int64_t T = piece.tokens, ratio = config.compress_ratios[size_t(layer)], topk = config.index_topk;
    std::vector<uint16_t> raw(static_cast<size_t>(T * visible));
    if (visible > 0)
        DSV4_CUDA_CHECK(
            cudaMemcpyAsync(raw.data(), ws.index_scores, raw.size() * 2, cudaMemcpyDeviceToHost, stream->get()));
    stream->synchronize();
    std::vector<float> margin(static_cast<size_t>(T)), row;
    for (int64_t t = 0; t < T; ++t) {
        const int64_t vis = (piece.start + t + 1) / ratio;
        row.resize(size_t(vis));
        for (int64_t e = 0; e < vis; ++e) row[size_t(e)] = bf16_to_f32(raw[size_t(t * visible + e)]);
        margin[size_t(t)] = top_k_margin(row.data(), vis, std::min(topk, vis));
    }
    observe_host("attn.index_margin", layer, margin, T, 1);
    std::vector<int32_t> chosen(static_cast<size_t>(T * topk));
    DSV4_CUDA_CHECK(
        cudaMemcpyAsync(chosen.data(), ws.selected, chosen.size() * 4, cudaMemcpyDeviceToHost, stream->get()));
    stream->synchronize();
    observe_host("attn.selected", layer, std::vector<float>(chosen.begin(), chosen.end()), T, topk);
}

void CudaModel::Impl::observe_compressed_entries(int64_t layer, int64_t closed) {
    // The entries this piece closed, unpacked (closed <= T rows of kv_view) through the key list's buffer.
    const int64_t d = config.head_dim, r = config.rope_head_dim;
    const int64_t first = piece.start / config.compress_ratios[size_t(layer)];
    std::vector<int32_t> rows(static_cast<size_t>(closed));
    for (int64_t e = 0; e < closed; ++e) rows[size_t(e)] = int32_t(entry_row(layer, piece.slot, first + e, false));
    DSV4_CUDA_CHECK(
        cudaMemcpyAsync(ws.attn_indices, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice, stream->get()));
    cuda::unpack_kv_entries({entries, ws.attn_indices, ws.kv_view, closed, d, r, d}, stream->get());
    observe_bf16("attn.compressed", layer, ws.kv_view, closed, d);  // synchronizes: `rows` outlives the copy
}

}  // namespace dsv4
