// CudaModel's forward: items packed into pieces of several sequences, each piece's metadata uploaded in one copy,
// decode pieces replayed from the CUDA graph of their batch size, everything else enqueued directly; the forward
// loop embedding -> blocks (cuda_layer.cpp) -> mHC head -> norm -> f32 head, as CpuModel::forward.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/number_formats.h"
#include "kernels/cuda/convert/convert.h"
#include "kernels/cuda/embed/embed.h"
#include "kernels/cuda/mhc/mhc.h"
#include "kernels/cuda/rms_norm/rms_norm.h"
#include "runtime/cuda/cuda_model_impl.h"

namespace dsv4 {

std::vector<float> CudaModel::forward(SequenceState& state, std::span<const int32_t> ids, bool all_logits) {
    const BatchItem item{&state, ids, all_logits};
    return std::move(forward_batch(std::span(&item, 1))[0]);
}

std::vector<std::vector<float>> CudaModel::forward_batch(std::span<const BatchItem> items) {
    std::vector<std::vector<float>> logits;
    forward_batch_into(items, logits);
    return logits;
}

bool CudaModel::draws_tokens() const {
    return impl_->draws;
}

void CudaModel::forward_batch_into(std::span<const BatchItem> items, std::vector<std::vector<float>>& logits) {
    Impl& m = *impl_;
    const int64_t V = m.config.vocab_size;
    // Check everything before anything runs: a bad item fails the call with no sequence advanced.
    std::vector<const CudaSequence*> seq(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
        DSV4_CHECK(items[i].state, "forward_batch: item {} has no sequence state", i);
        DSV4_CHECK(!items[i].draw || (draws_tokens() && !items[i].all_logits),
                   "forward_batch: item {} asks for a draw {}", i,
                   draws_tokens() ? "with the logits of every position"
                                  : "this model does not make (a rank whose logits nobody reads, or a vocabulary "
                                    "past the draws' limit)");
        seq[i] = &m.check_input(*items[i].state, items[i].state->position, items[i].ids);
        for (size_t j = 0; j < i; ++j)
            DSV4_CHECK(items[j].state != items[i].state, "forward_batch: items {} and {} are the same sequence", j, i);
    }
    std::vector<RankSlotPools::Need> needs;
    for (size_t i = 0; i < items.size(); ++i)
        needs.push_back({seq[i]->rank, seq[i]->slot, items[i].state->position + int64_t(items[i].ids.size())});
    m.pools->reserve(needs);  // every rank's pages (alike on every rank), or none
    if (logits.size() < items.size()) logits.resize(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
        logits[i].clear();  // keeps its capacity: the pages of the last step's logits
        if (m.options.expert_parallel.host_logits && !items[i].draw)
            logits[i].reserve(size_t((items[i].all_logits ? items[i].ids.size() : 1) * V));
    }

    // Pack the items' tokens into pieces of at most `chunk` rows, in item order; an item that does not fit the rest
    // of a piece continues in the next one (exact: the forward is chunk-invariant). With an observer, one sequence
    // per piece, so the activations it receives are one sequence's. Under data-parallel attention a piece holds
    // every rank's rows (each rank computes the attention of its own), so every rank runs the same pieces.
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
            ps.rank = seq[i]->rank;
            ps.slot = seq[i]->slot;
            ps.start = item.state->position + done[i];
            ps.ids = item.ids.data() + done[i];
            ps.tokens = take;
            ps.first_logit = item.all_logits ? 0 : (last ? take - 1 : take);
            ps.logits = &logits[i];
            if (last) ps.draw = item.draw;
            piece.push_back(ps);
            rows += take;
            done[i] += take;
        }
    }
    flush();
    for (const BatchItem& item : items) item.state->position += int64_t(item.ids.size());
}

std::vector<float> CudaModel::forward_block(SequenceState& state, int64_t layer, int64_t start_position,
                                            std::span<const int32_t> ids, const float* streams_in) {
    Impl& m = *impl_;
    DSV4_CHECK(layer >= 0 && layer < m.config.num_layers && start_position >= 0,
               "layer {} / position {} out of range", layer, start_position);
    const CudaSequence& seq = m.check_input(state, start_position, ids);
    const int64_t tokens = int64_t(ids.size()), row = m.config.hc_mult * m.config.hidden_size;
    const RankSlotPools::Need need{seq.rank, seq.slot, start_position + tokens};
    m.pools->reserve(std::span(&need, 1));
    std::vector<float> streams;
    streams.reserve(size_t(tokens * row));
    for (int64_t done = 0; done < tokens;) {
        const int64_t n = std::min(tokens - done, m.pool.chunk);
        m.run_block_piece(int(layer), seq, start_position + done, ids.data() + done, streams_in + done * row, n,
                          streams);
        done += n;
    }
    return streams;
}

const CudaSequence& CudaModel::Impl::check_input(const SequenceState& state, int64_t start,
                                                 std::span<const int32_t> ids) {
    const int64_t tokens = int64_t(ids.size()), V = config.vocab_size;
    DSV4_CHECK(tokens > 0, "no input tokens");
    const auto* seq = dynamic_cast<const CudaSequence*>(state.device.get());
    DSV4_CHECK(seq && seq->owner == this && state.layers.empty(), "sequence state does not belong to this model");
    for (int32_t id : ids) DSV4_CHECK(id >= 0 && id < V, "token id {} is outside the vocabulary [0, {})", id, V);
    DSV4_CHECK(start + tokens <= pool.context,
               "the sequence would reach {} positions, more than the {} the GPU state pool holds per sequence",
               start + tokens, pool.context);
    DSV4_CUDA_CHECK(cudaSetDevice(options.device));
    return *seq;
}

PieceShape CudaModel::Impl::shape_of(std::span<const PieceSequence> seqs) const {
    std::vector<int64_t> rank_tokens(size_t(dp_ranks), 0), rank_logit_rows(size_t(dp_ranks), 0);
    for (const PieceSequence& ps : seqs) {
        rank_tokens[size_t(ps.rank)] += ps.tokens;
        rank_logit_rows[size_t(ps.rank)] += ps.tokens - ps.first_logit;
    }
    return shape_of_counts(std::move(rank_tokens), std::move(rank_logit_rows));
}

PieceShape CudaModel::Impl::shape_of_counts(std::vector<int64_t> rank_tokens,
                                            std::vector<int64_t> rank_logit_rows) const {
    PieceShape shape;
    for (int r = 0; r < dp_ranks; ++r) {
        if (r < dp_rank) {
            shape.moe_first += rank_tokens[size_t(r)];
            shape.logit_first += rank_logit_rows[size_t(r)];
        }
        shape.moe_tokens += rank_tokens[size_t(r)];
        shape.all_logit_rows += rank_logit_rows[size_t(r)];
    }
    shape.rank_tokens = std::move(rank_tokens);
    shape.rank_logit_rows = std::move(rank_logit_rows);
    return shape;
}

std::span<const PieceSequence> CudaModel::Impl::local_part(std::span<const PieceSequence> seqs) const {
    const auto first =
        std::find_if(seqs.begin(), seqs.end(), [&](const PieceSequence& ps) { return ps.rank == dp_rank; });
    const auto last = std::find_if(first, seqs.end(), [&](const PieceSequence& ps) { return ps.rank != dp_rank; });
    return {first, last};
}

void CudaModel::Impl::upload_piece(std::span<const PieceSequence> all) {
    const int64_t W = config.sliding_window, C = pool.chunk;
    const std::span<const PieceSequence> seqs = local_part(all);
    // The pinned buffer is rewritten only once the previous piece's copy is done: known after any piece that ended
    // with the logits copy (so a decode step never waits here), else waited for.
    if (meta_in_flight) DSV4_CUDA_CHECK(cudaEventSynchronize(meta_copied->get()));
    int32_t* h = meta_host;
    const int64_t offset[] = {0, C, 2 * C, 3 * C, 4 * C, 5 * C, 6 * C};
    const int64_t P = std::min(C, pool.sequences);
    DSV4_CHECK(int64_t(seqs.size()) <= P, "a piece of {} sequences exceeds the {} the workspace holds", seqs.size(), P);
    PieceShape shape = shape_of(all);
    DSV4_CHECK(shape.moe_tokens <= C, "a piece of {} rows exceeds the chunk of {}", shape.moe_tokens, C);
    {
        int64_t row = 0;  // the experts' rows: every rank's, rank-major
        for (const PieceSequence& ps : all)
            for (int64_t t = 0; t < ps.tokens; ++t) h[offset[6] + row++] = ps.ids[t];
    }
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
        h[7 * C + q] = int32_t(row - ps.tokens);
        h[7 * C + P + q] = int32_t(ps.tokens);
        h[7 * C + 2 * P + q] = int32_t(ps.start);
        h[7 * C + 3 * P + q] = ps.slot;
        shape.max_end = std::max(shape.max_end, ps.start + ps.tokens);
    }
    shape.tokens = row;
    shape.seqs = int64_t(seqs.size());
    shape.one_token_each =
        std::all_of(seqs.begin(), seqs.end(), [](const PieceSequence& ps) { return ps.tokens == 1; });
    shape.gather = !identity;
    if (seqs.size() == 1) shape.slot = seqs[0].slot, shape.start = seqs[0].start;
    {
        std::lock_guard lock(slots->mutex);
        std::copy(slots->table.begin(), slots->table.end(), h + 7 * C + 4 * P);
    }
    stages.restart();
    stages.mark("upload");
    DSV4_CUDA_CHECK(cudaMemcpyAsync(ws.meta, h, sizeof(int32_t) * size_t(ws.meta_ints), cudaMemcpyHostToDevice,
                                    stream->get()));
    meta_copied->record(stream->get());
    meta_in_flight = true;
    piece = shape;
}

void CudaModel::Impl::run_block_piece(int layer, const CudaSequence& seq, int64_t start, const int32_t* ids,
                                      const float* streams_in, int64_t tokens, std::vector<float>& streams_out) {
    const int64_t row = config.hc_mult * config.hidden_size;
    const size_t n = size_t(tokens * row);
    cudaStream_t s = stream->get();
    const PieceSequence ps{seq.rank, seq.slot, start, ids, tokens, tokens, nullptr};
    upload_piece(std::span(&ps, 1));
    std::vector<uint16_t> raw(n);
    for (size_t i = 0; i < n; ++i) {
        raw[i] = f32_to_bf16(streams_in[i]);
        DSV4_CHECK(bf16_to_f32(raw[i]) == streams_in[i] || std::isnan(streams_in[i]),
                   "input stream value {} is not a bf16 value", streams_in[i]);
    }
    if (piece.tokens > 0)  // the sequence's rank (every rank without data-parallel attention)
        DSV4_CUDA_CHECK(cudaMemcpyAsync(ws.streams, raw.data(), n * 2, cudaMemcpyHostToDevice, s));
    block(layer);
    const bf16* out = ws.streams;
    if (data_parallel()) {  // the owner's output streams to every rank
        const RankCollectives::Rows rows{ws.streams, ws.streams_next, row * int64_t(sizeof(bf16))};
        options.expert_parallel.comm->gather_rows(std::span(&rows, 1), piece.rank_tokens, s);
        out = ws.streams_next;
    }
    stages.finish();
    DSV4_CUDA_CHECK(cudaMemcpyAsync(raw.data(), out, n * 2, cudaMemcpyDeviceToHost, s));
    DSV4_CUDA_CHECK(cudaStreamSynchronize(s));
    meta_in_flight = false;
    for (uint16_t b : raw) streams_out.push_back(bf16_to_f32(b));
}

void CudaModel::Impl::run_piece(std::span<const PieceSequence> in) {
    const int64_t V = config.vocab_size;
    cudaStream_t s = stream->get();
    // Rank-major (data-parallel attention): the order of the experts' rows and of the gathered logits.
    std::vector<PieceSequence> seqs(in.begin(), in.end());
    std::stable_sort(seqs.begin(), seqs.end(),
                     [](const PieceSequence& a, const PieceSequence& b) { return a.rank < b.rank; });
    upload_piece(seqs);
    const bool decode = std::all_of(seqs.begin(), seqs.end(),
                                    [](const PieceSequence& ps) { return ps.tokens == 1 && ps.first_logit == 0; });
    if (decode && options.decode_graphs && !observer) {
        // The graph of this batch size (of each rank's rows) was captured with bounds from the pool (max_end =
        // context), so it serves every step of any sequences; its launches read positions, slots and ring targets
        // from ws.meta. With the stage profiler on, a graph of its own: the same launches with event-record nodes
        // between the stages.
        std::pair<std::vector<int64_t>, bool> key{piece.rank_tokens, stages.on()};
        if (!decode_graphs.count(key)) {
            evict_decode_graphs(size_t(options.max_decode_graphs - 1));
            capture_decode_graph(piece.rank_tokens);
        }
        DecodeGraph& graph = decode_graphs.at(key);
        graph.last_replay = ++decode_steps;
        DSV4_CUDA_CHECK(cudaGraphLaunch(graph.exec, s));
        stages.replayed(graph.first_mark, graph.marks);
    } else {
        enqueue_piece();
    }
    if (piece.all_logit_rows == 0) {
        stages.finish();
        return;
    }
    // Every rank's logit rows (gathered), in the order of seqs: a sequence's rows are drawn from where they are
    // (its draw) or copied to its vector. A follower (host_logits off) does neither: its step ends when its device
    // work does.
    std::vector<LogitRows> copies;
    std::vector<TokenDraw*> drawn;
    for (int64_t row = 0; const PieceSequence& ps : seqs) {
        const int64_t count = ps.tokens - ps.first_logit;
        if (count == 0 || !options.expert_parallel.host_logits) continue;
        if (ps.draw) {
            const TokenDraw& d = *ps.draw;
            DSV4_CHECK(drawn.size() < draws_host.size(), "a piece draws for more than the {} sequences planned",
                       draws_host.size());
            draws_host.get()[drawn.size()] = {d.u, d.temperature, d.min_p, d.greedy, int32_t(row)};
            drawn.push_back(ps.draw);
        } else {
            copies.push_back({ps.logits, row, count});
        }
        row += count;
    }
    if (!drawn.empty()) {
        stages.mark("draw");
        const int64_t n = int64_t(drawn.size());
        DSV4_CUDA_CHECK(cudaMemcpyAsync(ws.draws, draws_host.get(), sizeof(cuda::RowDraw) * size_t(n),
                                        cudaMemcpyHostToDevice, s));
        cuda::SampleParams sp;
        sp.logits = ws.logits;
        sp.draws = ws.draws;
        sp.ids = ws.drawn_ids;
        sp.scratch = ws.draw_scratch;
        sp.draws_count = n;
        sp.vocab = V;
        cuda::sample_rows(sp, s);
        DSV4_CUDA_CHECK(
            cudaMemcpyAsync(drawn_host.get(), ws.drawn_ids, sizeof(int32_t) * size_t(n), cudaMemcpyDeviceToHost, s));
    }
    if (copies.empty()) {
        stages.finish();
        DSV4_CUDA_CHECK(cudaStreamSynchronize(s));
        meta_in_flight = false;
    } else {
        copy_logits(copies);
    }
    for (size_t i = 0; i < drawn.size(); ++i) drawn[i]->id = drawn_host.get()[i];
}

void CudaModel::Impl::copy_logits(std::span<const LogitRows> copies) {
    // Through pinned memory reused from step to step: the copy runs at the link's rate and no fresh host pages are
    // zeroed or faulted in (at batch 256 that is 132 MB a step). The runs of rows are packed into slices of the
    // staging buffer (runs adjacent on the device in one copy); each run is appended to its vector in order.
    const int64_t V = config.vocab_size;
    cudaStream_t s = stream->get();
    stages.mark("logits_copy");
    int64_t total = 0;
    for (const LogitRows& c : copies) total += c.count;
    const int64_t slice_rows =
        std::clamp<int64_t>(int64_t(options.logit_staging_bytes / (sizeof(float) * size_t(V))), 1, total);
    if (logits_host.size() < size_t(slice_rows * V)) logits_host = cuda::PinnedBuffer<float>(size_t(slice_rows * V));
    size_t run = 0;
    int64_t run_done = 0;  // rows of copies[run] already staged
    for (int64_t staged = 0; staged < total;) {
        const int64_t rows = std::min(slice_rows, total - staged);
        struct Part {
            std::vector<float>* to;
            int64_t at, count;  // rows at ... of the slice
        };
        std::vector<Part> parts;  // the slice's rows by run (each run at most once per slice)
        int64_t device_first = -1, device_count = 0, at = 0;  // the device rows of the copy being gathered
        auto flush = [&] {
            if (device_count > 0)
                DSV4_CUDA_CHECK(cudaMemcpyAsync(logits_host.get() + (at - device_count) * V,
                                                ws.logits + device_first * V, sizeof(float) * size_t(device_count * V),
                                                cudaMemcpyDeviceToHost, s));
            device_count = 0;
        };
        while (at < rows) {
            const LogitRows& c = copies[run];
            const int64_t take = std::min(rows - at, c.count - run_done), first = c.first + run_done;
            if (device_count > 0 && device_first + device_count != first) flush();
            if (device_count == 0) device_first = first;
            device_count += take;
            parts.push_back({c.to, at, take});
            at += take;
            run_done += take;
            if (run_done == c.count) ++run, run_done = 0;
        }
        flush();
        staged += rows;
        if (staged == total) stages.finish();
        DSV4_CUDA_CHECK(cudaStreamSynchronize(s));
        meta_in_flight = false;
        auto copy = [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) {
                const float* from = logits_host.get() + parts[size_t(i)].at * V;
                parts[size_t(i)].to->insert(parts[size_t(i)].to->end(), from, from + parts[size_t(i)].count * V);
            }
        };
        constexpr int64_t kRowsPerTask = 8;  // ~4 MB at V4's vocabulary: below that one thread is as quick
        if (rows >= 2 * kRowsPerTask) {
            if (!logits_pool) logits_pool = std::make_unique<ThreadPool>(8);
            logits_pool->parallel_for(int64_t(parts.size()), copy, kRowsPerTask);
        } else {
            copy(0, int64_t(parts.size()));
        }
    }
}

void CudaModel::Impl::capture_decode_graph(std::vector<int64_t> rank_tokens) {  // a copy: `piece` is reset below
    cudaStream_t s = stream->get();
    const PieceShape uploaded = piece;
    piece = shape_of_counts(rank_tokens, rank_tokens);  // one token and its logits per sequence
    piece.tokens = piece.seqs = piece.logit_rows = rank_tokens[size_t(dp_rank)];
    piece.one_token_each = true;
    piece.max_end = pool.context;
    const size_t first_mark = stages.count();  // the marks recorded before the graph (upload)
    // Thread-local capture mode: any call of this thread that could synchronize with the host or allocate
    // (cudaMalloc, a synchronous copy, a stream or event wait from the host) fails the capture instead of being
    // recorded. Not global: models of several GPUs in one process capture at once, each on its own thread with NCCL
    // in its graph, and global mode would let one thread's calls break the other's capture (NCCL's CUDA-graph notes).
    DSV4_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
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
    // Each kernel node keeps the priority of the stream it was captured from (CudaOptions::prioritize_main_lane).
    const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority);
    cudaGraphDestroy(graph);
    DSV4_CUDA_CHECK(instantiated);
    decode_graphs[{rank_tokens, stages.on()}] = {exec, first_mark, stages.take_graph_marks(first_mark)};
    piece = uploaded;
}

void CudaModel::Impl::evict_decode_graphs(size_t keep) {
    if (decode_graphs.size() <= keep) return;
    // No replay may still run: a decode step ends with the host waiting for its logits, but say so here rather than
    // rely on it.
    DSV4_CUDA_CHECK(cudaStreamSynchronize(stream->get()));
    while (decode_graphs.size() > keep) {
        auto oldest = std::min_element(decode_graphs.begin(), decode_graphs.end(), [](const auto& a, const auto& b) {
            return a.second.last_replay < b.second.last_replay;
        });
        DSV4_CUDA_CHECK(cudaGraphExecDestroy(oldest->second.exec));
        decode_graphs.erase(oldest);
    }
}

void CudaModel::Impl::enqueue_piece() {
    const ModelConfig& c = config;
    const int64_t D = c.hidden_size, n_hc = c.hc_mult, V = c.vocab_size, T = piece.tokens;
    cudaStream_t s = stream->get();

    if (T > 0) {  // under data-parallel attention a rank may have no rows in a piece: it runs only its experts
        stages.mark("embed");
        cuda::EmbedParams ep;
        ep.ids = ws.ids;
        ep.table = w.embed;
        ep.streams = ws.streams;
        ep.tokens = T;
        ep.vocab = V;
        ep.dim = D;
        ep.n_hc = n_hc;
        cuda::embed(ep, s);
    }

    for (int64_t layer = 0; layer < c.num_layers; ++layer) block(layer);

    // mHC head, final norm, f32 head for the rows whose logits are wanted: this rank's rows of the piece's logits,
    // which every rank then gathers (data-parallel attention).
    float* logits = ws.logits + piece.logit_first * V;
    head(piece.logit_rows, logits);
    if (data_parallel() && piece.all_logit_rows > 0) {
        stages.mark("logits_gather");
        const RankCollectives::Rows all{logits, ws.logits, V * int64_t(sizeof(float))};
        options.expert_parallel.comm->gather_rows(std::span(&all, 1), piece.rank_logit_rows, s);
    }
}

void CudaModel::Impl::head(int64_t rows, float* logits) {
    if (rows == 0) return;
    const ModelConfig& c = config;
    const int64_t D = c.hidden_size, n_hc = c.hc_mult;
    cudaStream_t s = stream->get();
    stages.mark("head");
    const bf16* streams = ws.streams;
    if (piece.gather) {
        cuda::gather_rows_bf16({ws.streams, ws.logit_rows, ws.streams_next, rows, n_hc * D}, s);
        streams = ws.streams_next;
    }
    cuda::hc_head(hc_mix_params(w.hc_head, streams, rows), s);
    cuda::rms_norm({ws.x, w.norm, ws.x, rows, D, D, D, float(c.rms_norm_eps)}, s);
    linear_f32(w.head, ws.x, rows, logits);
}

}  // namespace dsv4
