// load_model_weights: builds the weight structs of weights.h from a Checkpoint. Each matrix's format is read off
// the dtypes present (spec §11.2-11.5) and cross-checked against the config; every shape is checked against the
// config; every tensor must be used exactly once. Tested in tests/io/weights_test.cpp.
#include "model/weights.h"

#include <cctype>
#include <cmath>
#include <set>
#include <string>

#include "core/error.h"
#include "core/int_math.h"
#include "io/checkpoint.h"
#include "io/tensor_decode.h"

namespace dsv4 {
namespace {

// What the config says a matrix may be stored as.
enum class MatrixRole {
    kDense,   // always F32/BF16/F16: embed, head, router gate, compressor and indexer scorer projections
    kLinear,  // FP8 block-scaled when quantization_config says fp8, else dense: attention, shared experts, MTP proj
    kExpert,  // routed experts: by expert_dtype (fp4: MXFP4 or NVFP4, fp8: FP8 block, bf16: dense)
};

std::string shape_str(const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

bool is_dense(DType t) {
    return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
}

// mtp.N.emb* and mtp.N.head.weight: copies of the embedding/head some checkpoints carry; the official converter
// drops them (spec §11.1, §11.4) and so do we.
bool is_ignored_mtp_copy(const std::string& name) {
    if (name.compare(0, 4, "mtp.") != 0) return false;
    size_t i = 4;
    while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
    if (i == 4 || i >= name.size() || name[i] != '.') return false;
    std::string rest = name.substr(i + 1);
    return rest.compare(0, 3, "emb") == 0 || rest == "head.weight";
}

class WeightLoader {
  public:
    WeightLoader(const Checkpoint& ck, const ModelConfig& c) : ck_(ck), c_(c) {}

    const TensorRef& take(const std::string& name) {
        const TensorRef& t = ck_.get(name);
        used_.insert(name);
        return t;
    }
    const TensorRef* take_if_present(const std::string& name) {
        const TensorRef* t = ck_.find(name);
        if (t) used_.insert(name);
        return t;
    }

    void expect_shape(const TensorRef& t, const std::vector<int64_t>& shape) {
        DSV4_CHECK(t.shape == shape, "{}: tensor '{}' has shape {}, expected {}", t.file, t.name, t.shape_string(),
                   shape_str(shape));
    }

    Vec vec(const std::string& name, const std::vector<int64_t>& shape) {
        const TensorRef& t = take(name);
        expect_shape(t, shape);
        return decode_f32(t);
    }

    QuantizedMatrix matrix(const std::string& prefix, int64_t rows, int64_t cols, MatrixRole role);
    HcWeights hc(const std::string& prefix, int64_t mixer_rows, int64_t scales);
    CompressorWeights compressor(const std::string& prefix, int64_t ratio, int64_t head_dim);
    AttentionWeights attention(const std::string& prefix, int64_t ratio);
    ExpertWeights expert(const std::string& prefix, MatrixRole role);
    MoeWeights moe(const std::string& prefix, MlpType type);
    BlockWeights block(const std::string& prefix, int64_t ratio, MlpType type);

    void reject_leftovers() const;

  private:
    const Checkpoint& ck_;
    const ModelConfig& c_;
    std::set<std::string> used_;
};

QuantizedMatrix WeightLoader::matrix(const std::string& prefix, int64_t rows, int64_t cols, MatrixRole role) {
    const TensorRef& w = take(prefix + ".weight");
    QuantizedMatrix m;
    m.name = w.name;
    m.rows = rows;
    m.cols = cols;
    m.data = reinterpret_cast<const uint8_t*>(w.data);

    switch (w.dtype) {
        case DType::kF32:
            m.format = WeightFormat::kF32;
            break;
        case DType::kBF16:
            m.format = WeightFormat::kBF16;
            break;
        case DType::kF16:
            m.format = WeightFormat::kF16;
            break;
        case DType::kF8E4M3: {
            m.format = WeightFormat::kFp8Block;
            const TensorRef& s = take(prefix + ".scale");
            DSV4_CHECK(s.dtype == DType::kF8E8M0 || s.dtype == DType::kF32,
                       "{}: tensor '{}' has dtype {}, expected F8_E8M0 or F32 block scales", s.file, s.name,
                       dtype_name(s.dtype));
            DSV4_CHECK(!c_.scale_fmt_ue8m0 || s.dtype == DType::kF8E8M0,
                       "{}: tensor '{}' has dtype {}, but the config's scale_fmt is ue8m0 (F8_E8M0 scales)", s.file,
                       s.name, dtype_name(s.dtype));
            expect_shape(s, {ceil_div(rows, 128), ceil_div(cols, 128)});
            m.scale = reinterpret_cast<const uint8_t*>(s.data);
            m.scale_dtype = s.dtype;
            m.scale_cols = ceil_div(cols, 128);
            m.block_rows = 128;
            m.block_cols = 128;
            break;
        }
        case DType::kI8:
        case DType::kU8: {
            // Packed E2M1 pairs: the logical in_features is twice the stored columns.
            const int64_t block = ck_.find(prefix + ".weight_scale") ? 16 : 32;
            DSV4_CHECK(cols % block == 0,
                       "{}: tensor '{}' is packed FP4 with a scale per {} columns, but its "
                       "in_features {} is not a multiple of {}",
                       w.file, w.name, block, cols, block);
            if (const TensorRef* ws = take_if_present(prefix + ".weight_scale")) {
                // NVIDIA's NVFP4 release (spec §11.5): E4M3 scale per 16 columns times a per-tensor F32 scale.
                m.format = WeightFormat::kNvfp4;
                DSV4_CHECK(ws->dtype == DType::kF8E4M3, "{}: tensor '{}' has dtype {}, expected F8_E4M3 (NVFP4 scales)",
                           ws->file, ws->name, dtype_name(ws->dtype));
                expect_shape(*ws, {rows, cols / 16});
                m.scale = reinterpret_cast<const uint8_t*>(ws->data);
                m.scale_dtype = ws->dtype;
                m.scale_cols = cols / 16;
                m.block_cols = 16;
                const TensorRef& ws2 = take(prefix + ".weight_scale_2");
                m.global_scale = decode_scalar_f32(ws2);
                // Zero is suspicious but was reported for a real file (spec §11.5): only non-finite is rejected.
                DSV4_CHECK(std::isfinite(m.global_scale), "{}: tensor '{}' is {}, expected a finite scale", ws2.file,
                           ws2.name, m.global_scale);
                if (const TensorRef* is = take_if_present(prefix + ".input_scale"))
                    m.input_scale = decode_scalar_f32(*is);
            } else {
                m.format = WeightFormat::kFp4Mx;
                const TensorRef& s = take(prefix + ".scale");
                DSV4_CHECK(s.dtype == DType::kF8E8M0, "{}: tensor '{}' has dtype {}, expected F8_E8M0 (FP4 scales)",
                           s.file, s.name, dtype_name(s.dtype));
                expect_shape(s, {rows, cols / 32});
                m.scale = reinterpret_cast<const uint8_t*>(s.data);
                m.scale_dtype = s.dtype;
                m.scale_cols = cols / 32;
                m.block_cols = 32;
            }
            expect_shape(w, {rows, cols / 2});
            break;
        }
        default:
            fail("{}: tensor '{}' has dtype {}, which is no weight format DeepSeek-V4 checkpoints use", w.file, w.name,
                 dtype_name(w.dtype));
    }
    if (is_dense(w.dtype) || w.dtype == DType::kF8E4M3) expect_shape(w, {rows, cols});

    // Cross-check the format against what the config declares.
    const char* want = nullptr;
    bool ok = true;
    switch (role) {
        case MatrixRole::kDense:
            ok = is_dense(w.dtype);
            want = "F32/BF16/F16";
            break;
        case MatrixRole::kLinear:
            ok = c_.fp8_quantized ? m.format == WeightFormat::kFp8Block : is_dense(w.dtype);
            want = c_.fp8_quantized ? "FP8 block-scaled (quantization_config is fp8)"
                                    : "F32/BF16/F16 (the config has no quantization_config)";
            break;
        case MatrixRole::kExpert:
            switch (c_.expert_dtype) {
                case ExpertDtype::kFp4:
                    ok = m.format == WeightFormat::kFp4Mx || m.format == WeightFormat::kNvfp4;
                    want = "packed FP4 (expert_dtype fp4)";
                    break;
                case ExpertDtype::kFp8:
                    ok = m.format == WeightFormat::kFp8Block;
                    want = "FP8 block-scaled (expert_dtype fp8)";
                    break;
                case ExpertDtype::kBf16:
                    ok = is_dense(w.dtype);
                    want = "F32/BF16/F16 (expert_dtype bf16 or unquantized)";
                    break;
            }
            break;
    }
    DSV4_CHECK(ok, "{}: tensor '{}' is stored as {}, but the config calls for {}", w.file, w.name,
               weight_format_name(m.format), want);
    return m;
}

HcWeights WeightLoader::hc(const std::string& prefix, int64_t mixer_rows, int64_t scales) {
    HcWeights h;
    h.fn = vec(prefix + "_fn", {mixer_rows, c_.hc_mult * c_.hidden_size});
    h.base = vec(prefix + "_base", {mixer_rows});
    h.scale = vec(prefix + "_scale", {scales});
    return h;
}

CompressorWeights WeightLoader::compressor(const std::string& prefix, int64_t ratio, int64_t head_dim) {
    CompressorWeights cw;
    cw.ratio = ratio;
    cw.head_dim = head_dim;
    cw.overlap = ratio == 4;
    const int64_t width = (cw.overlap ? 2 : 1) * head_dim;  // overlapping windows carry two halves
    cw.wkv = matrix(prefix + ".wkv", width, c_.hidden_size, MatrixRole::kDense);
    cw.wgate = matrix(prefix + ".wgate", width, c_.hidden_size, MatrixRole::kDense);
    cw.ape = vec(prefix + ".ape", {ratio, width});
    cw.norm = vec(prefix + ".norm.weight", {head_dim});
    return cw;
}

AttentionWeights WeightLoader::attention(const std::string& p, int64_t ratio) {
    const int64_t D = c_.hidden_size, H = c_.num_heads, d = c_.head_dim, g = c_.o_groups;
    AttentionWeights a;
    a.attn_sink = vec(p + ".attn_sink", {H});
    a.wq_a = matrix(p + ".wq_a", c_.q_lora_rank, D, MatrixRole::kLinear);
    a.q_norm = vec(p + ".q_norm.weight", {c_.q_lora_rank});
    a.wq_b = matrix(p + ".wq_b", H * d, c_.q_lora_rank, MatrixRole::kLinear);
    a.wkv = matrix(p + ".wkv", d, D, MatrixRole::kLinear);
    a.kv_norm = vec(p + ".kv_norm.weight", {d});
    a.wo_a = matrix(p + ".wo_a", g * c_.o_lora_rank, H * d / g, MatrixRole::kLinear);
    a.wo_b = matrix(p + ".wo_b", D, g * c_.o_lora_rank, MatrixRole::kLinear);
    if (ratio > 0) a.compressor = compressor(p + ".compressor", ratio, d);
    if (ratio == 4) {
        IndexerWeights ix;
        ix.wq_b =
            matrix(p + ".indexer.wq_b", c_.index_n_heads * c_.index_head_dim, c_.q_lora_rank, MatrixRole::kLinear);
        ix.weights_proj = matrix(p + ".indexer.weights_proj", c_.index_n_heads, D, MatrixRole::kDense);
        ix.compressor = compressor(p + ".indexer.compressor", ratio, c_.index_head_dim);
        a.indexer = std::move(ix);
    }
    return a;
}

ExpertWeights WeightLoader::expert(const std::string& p, MatrixRole role) {
    const int64_t D = c_.hidden_size, I = c_.moe_intermediate_size;
    ExpertWeights e;
    e.w1 = matrix(p + ".w1", I, D, role);
    e.w2 = matrix(p + ".w2", D, I, role);
    e.w3 = matrix(p + ".w3", I, D, role);
    return e;
}

MoeWeights WeightLoader::moe(const std::string& p, MlpType type) {
    const int64_t E = c_.n_routed_experts;
    MoeWeights m;
    m.gate = matrix(p + ".gate", E, c_.hidden_size, MatrixRole::kDense);
    if (type == MlpType::kHashMoe) {
        const TensorRef& t = take(p + ".gate.tid2eid");
        expect_shape(t, {c_.vocab_size, c_.num_experts_per_tok});
        m.tid2eid = decode_index_i32(t, 0, E);
    } else {
        m.gate_bias = vec(p + ".gate.bias", {E});
    }
    m.experts.reserve(size_t(E));
    for (int64_t e = 0; e < E; ++e)
        m.experts.push_back(expert(p + ".experts." + std::to_string(e), MatrixRole::kExpert));
    m.shared = expert(p + ".shared_experts", MatrixRole::kLinear);
    return m;
}

BlockWeights WeightLoader::block(const std::string& p, int64_t ratio, MlpType type) {
    const int64_t D = c_.hidden_size, n = c_.hc_mult;
    BlockWeights b;
    b.attn_norm = vec(p + ".attn_norm.weight", {D});
    b.ffn_norm = vec(p + ".ffn_norm.weight", {D});
    b.hc_attn = hc(p + ".hc_attn", (2 + n) * n, 3);  // pre (n) + post (n) + residual mixing (n x n) rows
    b.hc_ffn = hc(p + ".hc_ffn", (2 + n) * n, 3);
    b.attn = attention(p + ".attn", ratio);
    b.ffn = moe(p + ".ffn", type);
    return b;
}

void WeightLoader::reject_leftovers() const {
    const TensorRef* first = nullptr;
    size_t count = 0;
    for (const auto& [name, t] : ck_.tensors()) {
        if (used_.count(name) || is_ignored_mtp_copy(name)) continue;
        if (!first) first = &t;
        ++count;
    }
    if (first)
        fail("{}: unexpected tensor '{}' (no part of a DeepSeek-V4 model with this config uses it){}", first->file,
             first->name, count > 1 ? fmt::format("; {} more unexpected tensors", count - 1) : std::string());
}

}  // namespace

ModelWeights load_model_weights(std::shared_ptr<const Checkpoint> checkpoint, const ModelConfig& c) {
    DSV4_CHECK(checkpoint != nullptr, "load_model_weights: no checkpoint");
    DSV4_CHECK(int64_t(c.compress_ratios.size()) == c.num_layers && int64_t(c.mlp_types.size()) == c.num_layers &&
                   int64_t(c.mtp_compress_ratios.size()) == c.num_mtp_layers,
               "{}: the model config's per-layer lists do not match its layer counts", checkpoint->dir());
    WeightLoader ld(*checkpoint, c);
    const int64_t D = c.hidden_size, n = c.hc_mult;

    ModelWeights w;
    w.checkpoint = checkpoint;
    w.embed = ld.matrix("embed", c.vocab_size, D, MatrixRole::kDense);
    if (c.tie_word_embeddings && !checkpoint->find("head.weight"))
        w.head = w.embed;
    else
        w.head = ld.matrix("head", c.vocab_size, D, MatrixRole::kDense);
    w.norm = ld.vec("norm.weight", {D});
    w.hc_head = ld.hc("hc_head", n, 1);

    w.layers.reserve(size_t(c.num_layers));
    for (int64_t i = 0; i < c.num_layers; ++i)
        w.layers.push_back(
            ld.block("layers." + std::to_string(i), c.compress_ratios[size_t(i)], c.mlp_types[size_t(i)]));

    w.mtp.reserve(size_t(c.num_mtp_layers));
    for (int64_t i = 0; i < c.num_mtp_layers; ++i) {
        const std::string p = "mtp." + std::to_string(i);
        MtpWeights m;
        // MTP blocks are never hash-routed: their layer id L + i is past every hash layer (spec §2.1).
        m.block = ld.block(p, c.mtp_compress_ratios[size_t(i)], MlpType::kMoe);
        m.e_proj = ld.matrix(p + ".e_proj", D, D, MatrixRole::kLinear);
        m.h_proj = ld.matrix(p + ".h_proj", D, D, MatrixRole::kLinear);
        m.enorm = ld.vec(p + ".enorm.weight", {D});
        m.hnorm = ld.vec(p + ".hnorm.weight", {D});
        m.norm = ld.vec(p + ".norm.weight", {D});
        m.hc_head = ld.hc(p + ".hc_head", n, 1);
        w.mtp.push_back(std::move(m));
    }
    ld.reject_leftovers();
    return w;
}

}  // namespace dsv4
