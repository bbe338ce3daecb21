// Weight upload (see device_weights.h). One builder walks the weights twice: in measure mode it only adds up
// the (256-byte aligned) sizes; in upload mode it copies through a double-buffered pinned staging buffer, or only
// reserves the space of routed experts that the GPU generates (ExpertShare::generated).
#include "runtime/cuda/device_weights.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>
#include <memory>
#include <span>

#include <fmt/format.h>

#include "core/error.h"
#include "core/number_formats.h"
#include "core/progress.h"
#include "kernels/cpu/dequantize.h"

namespace dsv4::cuda {
namespace {

constexpr size_t kAlign = 256;
constexpr size_t kStagingBytes = size_t(16) << 20;  // per half of the double buffer

size_t align_up(size_t n) {
    return (n + kAlign - 1) / kAlign * kAlign;
}

struct Piece {
    const void* src;
    size_t bytes;
};

class Uploader {
  public:
    // measure mode: arena == nullptr
    Uploader(uint8_t* arena, size_t capacity, cudaStream_t stream, ProgressLine* progress = nullptr)
        : arena_(arena), capacity_(capacity), stream_(stream), progress_(progress) {
        if (arena_) {
            staging_ = std::make_unique<PinnedBuffer<uint8_t>>(2 * kStagingBytes);
            for (auto& e : done_) e = std::make_unique<Event>();
        }
    }
    ~Uploader() {
        if (arena_) cudaStreamSynchronize(stream_);
    }

    size_t used() const { return used_; }
    bool measuring() const { return arena_ == nullptr; }

    // Space for `bytes` that the caller fills on the device; where it starts (null in measure mode).
    void* reserve(size_t bytes) {
        const size_t offset = used_;
        used_ += align_up(bytes);
        if (!arena_) return nullptr;
        DSV4_CHECK(used_ <= capacity_, "weight upload overran its arena ({} > {} bytes)", used_, capacity_);
        return arena_ + offset;
    }
    // Copies the pieces contiguously and returns where they start on the device (null in measure mode).
    const void* put(std::initializer_list<Piece> pieces) { return put(std::vector<Piece>(pieces)); }
    const void* put(const std::vector<Piece>& pieces) {
        size_t total = 0;
        for (const Piece& p : pieces) total += p.bytes;
        uint8_t* const start = static_cast<uint8_t*>(reserve(total));
        if (!start) return nullptr;
        size_t dst = size_t(start - arena_);
        for (const Piece& p : pieces) {
            copy(static_cast<const uint8_t*>(p.src), p.bytes, dst);
            dst += p.bytes;
        }
        return start;
    }
    const void* put(const void* src, size_t bytes) { return put({Piece{src, bytes}}); }
    template <typename T>
    const T* put_vec(const std::vector<T>& v) {
        return static_cast<const T*>(put(v.data(), v.size() * sizeof(T)));
    }
    // Host data made for the upload; kept alive until the stream has consumed it.
    template <typename T>
    const T* put_owned(std::vector<T> v) {
        if (!arena_) return static_cast<const T*>(put(nullptr, v.size() * sizeof(T)));
        owned_.emplace_back(reinterpret_cast<const uint8_t*>(v.data()),
                            reinterpret_cast<const uint8_t*>(v.data() + v.size()));
        return static_cast<const T*>(put(owned_.back().data(), owned_.back().size()));
    }

  private:
    void copy(const uint8_t* src, size_t bytes, size_t dst) {
        while (bytes > 0) {
            const size_t n = std::min(bytes, kStagingBytes);
            uint8_t* stage = staging_->get() + half_ * kStagingBytes;
            DSV4_CUDA_CHECK(cudaEventSynchronize(done_[half_]->get()));  // the previous copy out of this half
            std::memcpy(stage, src, n);
            DSV4_CUDA_CHECK(cudaMemcpyAsync(arena_ + dst, stage, n, cudaMemcpyHostToDevice, stream_));
            done_[half_]->record(stream_);
            half_ ^= 1;
            src += n;
            dst += n;
            bytes -= n;
            copied_ += n;
            if (progress_ && progress_->active()) {
                const double s = std::max(progress_->elapsed_s(), 1e-3);
                progress_->update(fmt::format("weights to the GPU: {} of {} ({:.0f}%), {}/s", format_bytes(copied_),
                                              format_bytes(capacity_), 100.0 * double(copied_) / double(capacity_),
                                              format_bytes(uint64_t(double(copied_) / s))));
            }
        }
    }

    uint8_t* arena_;
    size_t capacity_;
    cudaStream_t stream_;
    ProgressLine* progress_;
    size_t used_ = 0, copied_ = 0;
    std::unique_ptr<PinnedBuffer<uint8_t>> staging_;
    std::unique_ptr<Event> done_[2];
    int half_ = 0;
    std::deque<std::vector<uint8_t>> owned_;
};

size_t dense_bytes(WeightFormat f) {
    return f == WeightFormat::kF32 ? 4 : 2;
}

void require(bool ok, const QuantizedMatrix& m, const char* what) {
    DSV4_CHECK(ok, "the CUDA backend cannot run tensor '{}' stored as {}: {}", m.name, weight_format_name(m.format),
               what);
}

// FP8 block scales as f32 [ceil(rows/128), scale_cols] (E8M0 decoded exactly).
std::vector<float> fp8_scales(const QuantizedMatrix& m) {
    const int64_t n = (m.rows + 127) / 128 * m.scale_cols;
    std::vector<float> scale(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        scale[size_t(i)] = m.scale_dtype == DType::kF8E8M0
                               ? e8m0_to_f32(m.scale[i])
                               : std::bit_cast<float>(reinterpret_cast<const uint32_t*>(m.scale)[i]);
    return scale;
}

DeviceMatrix put_matrix(Uploader& up, const QuantizedMatrix& m, bool dense_only) {
    DeviceMatrix d;
    d.format = m.format;
    d.rows = m.rows;
    d.cols = m.cols;
    switch (m.format) {
        case WeightFormat::kF32:
        case WeightFormat::kBF16:
            d.data = up.put(m.data, size_t(m.rows * m.cols) * dense_bytes(m.format));
            break;
        case WeightFormat::kFp8Block:
            require(!dense_only, m, "this matrix is used in f32 and has no FP8 path");
            d.data = up.put(m.data, size_t(m.rows * m.cols));
            d.scale = up.put_owned(fp8_scales(m));
            break;
        default:
            require(false, m, "F16 and packed FP4 weights are supported only for routed experts");
    }
    return d;
}

// Whether matrices that read one input stack by rows into one matrix of their format: one format and K, dense
// (F32, BF16) or FP8 with every part but the last a whole number of 128-row scale blocks, so that each part's scale
// rows follow the previous part's unchanged. gemm_fp8 and dense_linear compute every output element from its own
// weight row (and scale row) alone, in an order that depends on neither N nor the tile (gemm_fp8.h kMma / kGeneric,
// dense_linear.h), so one launch on the stack gives each part's bits.
bool stackable(std::span<const QuantizedMatrix* const> parts, bool dense_only) {
    if (parts.empty()) return false;
    const QuantizedMatrix& first = *parts.front();
    for (size_t i = 0; i < parts.size(); ++i) {
        const QuantizedMatrix& m = *parts[i];
        if (m.format != first.format || m.cols != first.cols) return false;
        if (m.format == WeightFormat::kFp8Block) {
            if (dense_only || m.scale_cols != first.scale_cols) return false;
            if (i + 1 < parts.size() && m.rows % 128 != 0) return false;
        } else if (m.format != WeightFormat::kF32 && m.format != WeightFormat::kBF16) {
            return false;
        }
    }
    return true;
}

// Matrices that read one input: stacked by rows where stackable() (returns the stack and points each views[i] at
// its part's rows in it), else uploaded one by one into views[i] (returns a matrix whose data is null).
DeviceMatrix put_shared_input(Uploader& up, std::span<const QuantizedMatrix* const> parts,
                              std::span<DeviceMatrix* const> views, bool dense_only) {
    DSV4_CHECK(parts.size() == views.size(), "put_shared_input: {} parts, {} views", parts.size(), views.size());
    if (!stackable(parts, dense_only)) {
        for (size_t i = 0; i < parts.size(); ++i) *views[i] = put_matrix(up, *parts[i], dense_only);
        return {};
    }
    const QuantizedMatrix& first = *parts.front();
    const bool fp8 = first.format == WeightFormat::kFp8Block;
    const size_t element = fp8 ? 1 : dense_bytes(first.format);
    DeviceMatrix stack;
    stack.format = first.format;
    stack.cols = first.cols;
    std::vector<Piece> data;
    std::vector<float> scale;
    for (const QuantizedMatrix* m : parts) {
        data.push_back({m->data, size_t(m->rows * m->cols) * element});
        if (fp8) {
            const std::vector<float> s = fp8_scales(*m);
            scale.insert(scale.end(), s.begin(), s.end());
        }
        stack.rows += m->rows;
    }
    stack.data = up.put(data);
    if (fp8) stack.scale = up.put_owned(std::move(scale));
    int64_t row = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
        DeviceMatrix& v = *views[i];
        v.format = stack.format;
        v.rows = parts[i]->rows;
        v.cols = stack.cols;
        if (stack.data) {  // null while measuring
            v.data = static_cast<const uint8_t*>(stack.data) + size_t(row * stack.cols) * element;
            if (fp8) v.scale = stack.scale + row / 128 * first.scale_cols;
        }
        row += v.rows;
    }
    return stack;
}

// `generated`: ExpertShare::generated.
DeviceExperts put_experts(Uploader& up, std::span<const ExpertWeights> experts,
                          const QuantizedMatrix ExpertWeights::*proj, bool generated) {
    const QuantizedMatrix& first = experts.front().*proj;
    DeviceExperts d;
    d.format = first.format;
    d.experts = int64_t(experts.size());
    d.rows = first.rows;
    d.cols = first.cols;
    const bool packed = first.format == WeightFormat::kFp4Mx || first.format == WeightFormat::kNvfp4;
    for (const ExpertWeights& e : experts) {
        const QuantizedMatrix& m = e.*proj;
        DSV4_CHECK(m.format == first.format && m.rows == first.rows && m.cols == first.cols,
                   "tensor '{}' differs in format or shape from '{}': the CUDA backend needs one format per layer",
                   m.name, first.name);
        DSV4_CHECK(generated || (m.data && (m.scale || !packed)),
                   "tensor '{}' has no bytes in host memory: routed experts without bytes are generated on the GPU "
                   "only for dsv4 bench (CudaOptions::random_experts_seed)",
                   m.name);
    }
    if (generated) {  // the bytes are made on the device after the upload: only their space here
        require(first.format == WeightFormat::kFp4Mx && first.scale_cols * 32 == first.cols, first,
                "only MXFP4 routed experts are generated on the GPU (CudaOptions::random_experts_seed)");
        d.data = up.reserve(size_t(d.experts * d.rows * d.cols / 2));
        d.scale = static_cast<const uint8_t*>(up.reserve(size_t(d.experts * d.rows * first.scale_cols)));
        return d;
    }
    std::vector<Piece> data, scale;
    std::vector<float> global;
    switch (first.format) {
        case WeightFormat::kF32:
        case WeightFormat::kBF16:
            for (const ExpertWeights& e : experts)
                data.push_back({(e.*proj).data, size_t(d.rows * d.cols) * dense_bytes(d.format)});
            d.data = up.put(data);
            break;
        case WeightFormat::kFp4Mx:
        case WeightFormat::kNvfp4:
            for (const ExpertWeights& e : experts) {
                data.push_back({(e.*proj).data, size_t(d.rows * d.cols / 2)});
                scale.push_back({(e.*proj).scale, size_t(d.rows * (e.*proj).scale_cols)});
                global.push_back((e.*proj).global_scale);
            }
            d.data = up.put(data);
            d.scale = static_cast<const uint8_t*>(up.put(scale));
            if (d.format == WeightFormat::kNvfp4) d.global = up.put_owned(std::move(global));
            break;
        default:
            require(false, first,
                    "routed experts run as MXFP4/NVFP4 (moe_gemm) or dense; FP8 experts have no kernel yet");
    }
    return d;
}

DeviceHc put_hc(Uploader& up, const HcWeights& h) {
    return {up.put_vec(h.fn), up.put_vec(h.base), up.put_vec(h.scale)};
}

// Everything but wkv and wgate, which go up with the layer's other f32 projections (f32_projections).
DeviceCompressor put_compressor(Uploader& up, const CompressorWeights& c) {
    DeviceCompressor d;
    d.ratio = c.ratio;
    d.head_dim = c.head_dim;
    d.overlap = c.overlap;
    d.ape = up.put_vec(c.ape);
    d.norm = up.put_vec(c.norm);
    return d;
}

DeviceWeights build(Uploader& up, const ModelConfig& config, const ModelWeights& w, ExpertShare share) {
    DeviceWeights d;
    // The embedding as a bf16 table: the forward rounds the gathered row to bf16, so rounding the table is the same.
    if (w.embed.format == WeightFormat::kBF16) {
        d.embed = static_cast<const __nv_bfloat16*>(up.put(w.embed.data, size_t(w.embed.rows * w.embed.cols) * 2));
    } else {
        std::vector<uint16_t> table(size_t(w.embed.rows * w.embed.cols));
        if (!up.measuring()) {
            std::vector<float> row(static_cast<size_t>(w.embed.cols));
            for (int64_t r = 0; r < w.embed.rows; ++r) {
                cpu::dequantize_row(w.embed, r, row.data());
                for (int64_t c = 0; c < w.embed.cols; ++c)
                    table[size_t(r * w.embed.cols + c)] = f32_to_bf16(row[size_t(c)]);
            }
        }
        d.embed = reinterpret_cast<const __nv_bfloat16*>(up.put_owned(std::move(table)));
    }
    d.head = put_matrix(up, w.head, true);
    d.norm = up.put_vec(w.norm);
    d.hc_head = put_hc(up, w.hc_head);
    for (int64_t l = 0; l < config.num_layers; ++l) {
        const BlockWeights& b = w.layers[size_t(l)];
        DeviceBlock db;
        db.attn_norm = up.put_vec(b.attn_norm);
        db.ffn_norm = up.put_vec(b.ffn_norm);
        db.hc_attn = put_hc(up, b.hc_attn);
        db.hc_ffn = put_hc(up, b.hc_ffn);
        const AttentionWeights& a = b.attn;
        DeviceAttention& da = db.attn;
        da.sink = up.put_vec(a.attn_sink);
        const QuantizedMatrix* q_kv[] = {&a.wq_a, &a.wkv};
        DeviceMatrix* q_kv_views[] = {&da.wq_a, &da.wkv};
        da.wq_a_wkv = put_shared_input(up, q_kv, q_kv_views, false);
        da.q_norm = up.put_vec(a.q_norm);
        da.wq_b = put_matrix(up, a.wq_b, false);
        da.kv_norm = up.put_vec(a.kv_norm);
        da.wo_a = put_matrix(up, a.wo_a, false);
        da.wo_b = put_matrix(up, a.wo_b, false);
        if (a.compressor) da.compressor = put_compressor(up, *a.compressor);
        if (a.indexer) {
            DeviceIndexer ix;
            ix.wq_b = put_matrix(up, a.indexer->wq_b, false);
            ix.compressor = put_compressor(up, a.indexer->compressor);
            da.indexer = ix;
        }
        da.f32_proj = put_shared_input(up, f32_projections(a), f32_projections(da), true);
        const MoeWeights& m = b.ffn;
        DeviceMoe& dm = db.ffn;
        dm.gate = put_matrix(up, m.gate, true);
        if (!m.gate_bias.empty()) dm.bias = up.put_vec(m.gate_bias);
        if (!m.tid2eid.empty()) dm.tid2eid = up.put_vec(m.tid2eid);
        const int64_t count = share.count < 0 ? int64_t(m.experts.size()) : share.count;
        DSV4_CHECK(share.first >= 0 && count > 0 && share.first + count <= int64_t(m.experts.size()),
                   "experts [{}, {}) of layer {}: the layer has {} routed experts", share.first, share.first + count, l,
                   m.experts.size());
        const std::span<const ExpertWeights> held = std::span(m.experts).subspan(size_t(share.first), size_t(count));
        dm.w1 = put_experts(up, held, &ExpertWeights::w1, share.generated);
        dm.w2 = put_experts(up, held, &ExpertWeights::w2, share.generated);
        dm.w3 = put_experts(up, held, &ExpertWeights::w3, share.generated);
        const QuantizedMatrix* gate_up[] = {&m.shared.w1, &m.shared.w3};
        DeviceMatrix* gate_up_views[] = {&dm.s1, &dm.s3};
        dm.s1_s3 = put_shared_input(up, gate_up, gate_up_views, false);
        dm.s2 = put_matrix(up, m.shared.w2, false);
        d.layers.push_back(std::move(db));
    }
    return d;
}

}  // namespace

size_t measure_weights(const ModelConfig& config, const ModelWeights& weights, ExpertShare experts) {
    Uploader up(nullptr, 0, nullptr);
    build(up, config, weights, experts);
    return up.used();
}

DeviceWeights upload_weights(const ModelConfig& config, const ModelWeights& weights, DeviceBuffer<uint8_t>& arena,
                             cudaStream_t stream, ExpertShare experts, ProgressLine* progress) {
    DeviceWeights d;
    {
        Uploader up(arena.get(), arena.bytes(), stream, progress);
        d = build(up, config, weights, experts);
    }  // the uploader waits for its copies before the staging buffer and owned host data go
    return d;
}

}  // namespace dsv4::cuda
