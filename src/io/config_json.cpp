// config.json -> ModelConfig: see config_json.h. The shape is told apart by the keys only transformers writes
// (layer_types, mlp_layer_types, compress_rates, rope_parameters, partial_rotary_factor); both shapes end in the
// same validation pass, so every ModelConfig that leaves this file is self-consistent.
#include "io/config_json.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <tuple>

#include "core/error.h"

namespace dsv4 {
namespace {

using nlohmann::json;

constexpr const char* kSliding = "sliding_attention";
constexpr const char* kCsa = "compressed_sparse_attention";
constexpr const char* kHca = "heavily_compressed_attention";

// Typed access to one JSON object of the config, with errors naming the file and the dotted field path.
// A JSON null counts as absent, as transformers writes null for unset optional fields.
class Fields {
  public:
    Fields(const json& obj, const std::string& source, std::string prefix)
        : obj_(obj), source_(source), prefix_(std::move(prefix)) {}

    std::string path(const std::string& key) const { return prefix_.empty() ? key : prefix_ + "." + key; }
    const std::string& source() const { return source_; }

    const json* find(const std::string& key) const {
        auto it = obj_.find(key);
        return it == obj_.end() || it->is_null() ? nullptr : &*it;
    }
    bool has(const std::string& key) const { return find(key) != nullptr; }

    const json& require(const std::string& key) const {
        const json* v = find(key);
        if (!v) fail("{}: missing required field '{}'", source_, path(key));
        return *v;
    }

    [[noreturn]] void bad(const std::string& key, const std::string& what) const {
        fail("{}: field '{}': {}", source_, path(key), what);
    }

    // Every integer of a V4 config (dimensions, counts, positions, token ids) is far below 2^31; bounding them there
    // keeps any product of two in int64 (a config with head_dim 2^63 - 1 made num_heads * head_dim overflow).
    int64_t as_int(const std::string& key, const json& v) const {
        constexpr int64_t kLimit = INT32_MAX;
        if (v.is_number_integer()) {
            if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(kLimit)
                                       : v.get<int64_t>() > kLimit || v.get<int64_t>() < -kLimit)
                bad(key, fmt::format("{} is out of range (dsv4 reads config integers within +-(2^31 - 1))", v.dump()));
            return v.get<int64_t>();
        }
        bad(key, fmt::format("expected an integer, got {} {}", v.type_name(), v.dump()));
    }
    double as_number(const std::string& key, const json& v) const {
        if (!v.is_number()) bad(key, fmt::format("expected a number, got {} {}", v.type_name(), v.dump()));
        double d = v.get<double>();
        if (!std::isfinite(d)) bad(key, "expected a finite number");
        return d;
    }
    bool as_bool(const std::string& key, const json& v) const {
        if (!v.is_boolean()) bad(key, fmt::format("expected true or false, got {} {}", v.type_name(), v.dump()));
        return v.get<bool>();
    }
    std::string as_string(const std::string& key, const json& v) const {
        if (!v.is_string()) bad(key, fmt::format("expected a string, got {} {}", v.type_name(), v.dump()));
        return v.get<std::string>();
    }
    const json& as_object(const std::string& key, const json& v) const {
        if (!v.is_object()) bad(key, fmt::format("expected an object, got {} {}", v.type_name(), v.dump()));
        return v;
    }
    const json& as_array(const std::string& key, const json& v) const {
        if (!v.is_array()) bad(key, fmt::format("expected a list, got {} {}", v.type_name(), v.dump()));
        return v;
    }

    int64_t req_int(const std::string& key) const { return as_int(key, require(key)); }
    double req_number(const std::string& key) const { return as_number(key, require(key)); }

    std::optional<int64_t> opt_int(const std::string& key) const {
        const json* v = find(key);
        return v ? std::optional(as_int(key, *v)) : std::nullopt;
    }
    std::optional<double> opt_number(const std::string& key) const {
        const json* v = find(key);
        return v ? std::optional(as_number(key, *v)) : std::nullopt;
    }
    std::optional<std::string> opt_string(const std::string& key) const {
        const json* v = find(key);
        return v ? std::optional(as_string(key, *v)) : std::nullopt;
    }
    std::optional<bool> opt_bool(const std::string& key) const {
        const json* v = find(key);
        return v ? std::optional(as_bool(key, *v)) : std::nullopt;
    }
    std::vector<int64_t> int_list(const std::string& key, const json& v) const {
        as_array(key, v);
        std::vector<int64_t> out;
        for (size_t i = 0; i < v.size(); ++i) out.push_back(as_int(fmt::format("{}[{}]", key, i), v[i]));
        return out;
    }
    std::vector<std::string> string_list(const std::string& key, const json& v) const {
        as_array(key, v);
        std::vector<std::string> out;
        for (size_t i = 0; i < v.size(); ++i) out.push_back(as_string(fmt::format("{}[{}]", key, i), v[i]));
        return out;
    }
    Fields sub(const std::string& key, const json& v) const { return Fields(as_object(key, v), source_, path(key)); }

    // In the Hub shape a field is required; in the transformers shape it falls back to the config class default.
    int64_t int_or_default(const std::string& key, bool required, int64_t hf_default) const {
        return required ? req_int(key) : opt_int(key).value_or(hf_default);
    }
    double number_or_default(const std::string& key, bool required, double hf_default) const {
        return required ? req_number(key) : opt_number(key).value_or(hf_default);
    }

  private:
    const json& obj_;
    const std::string& source_;
    std::string prefix_;
};

// YaRN's attention (magnitude) factor as transformers infers it when a rope dict does not set
// attention_factor: get_mscale(factor [, mscale]) / get_mscale(factor [, mscale_all_dim]).
double inferred_yarn_attention_factor(double factor, std::optional<double> mscale, std::optional<double> mscale_all) {
    auto get_mscale = [&](double m) { return factor <= 1.0 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; };
    if (mscale && *mscale != 0.0 && mscale_all && *mscale_all != 0.0)
        return get_mscale(*mscale) / get_mscale(*mscale_all);
    return get_mscale(1.0);
}

// A RoPE dict: the Hub's rope_scaling, or one of transformers' rope_parameters.{main,compress} (which may also
// carry rope_theta and partial_rotary_factor, read by the caller). Returns the YaRN parameters or nullopt for
// plain RoPE, read the way transformers reads them: original_max_position_embeddings defaults to
// max_position_embeddings, a beta of 0 or null means its default (`beta_fast or 32`). `magnitude_pinned`: the
// dict came flat (rope_scaling, or a flat rope_parameters), which DeepseekV4Config nests with attention_factor
// forced to 1.0; a dict already nested is taken as-is, so a missing attention_factor is inferred from the factor.
// V4 has no YaRN magnitude scaling (spec §6): a factor other than 1 is not supported. `truncate` is ignored, as
// transformers reads it from the top level of the nested dict, where it never is.
std::optional<YarnParams> parse_rope_dict(const Fields& f, int64_t max_position_embeddings, bool magnitude_pinned) {
    std::string type = f.opt_string("rope_type").value_or(f.opt_string("type").value_or("default"));
    if (type == "default") return std::nullopt;
    if (type != "yarn")
        f.bad(f.has("rope_type") ? "rope_type" : "type",
              fmt::format("RoPE type '{}' is not supported by dsv4 (DeepSeek-V4 uses 'default' or 'yarn')", type));
    YarnParams y;
    y.factor = f.req_number("factor");
    y.original_max_position_embeddings =
        f.opt_int("original_max_position_embeddings").value_or(max_position_embeddings);
    if (!(y.factor > 0)) f.bad("factor", fmt::format("must be > 0, got {}", y.factor));
    if (y.original_max_position_embeddings <= 0)
        f.bad("original_max_position_embeddings",
              fmt::format("must be > 0, got {}", y.original_max_position_embeddings));
    for (auto [key, fallback, out] : {std::tuple{"beta_fast", 32.0, &y.beta_fast}, {"beta_slow", 1.0, &y.beta_slow}}) {
        double v = f.opt_number(key).value_or(0.0);
        if (v < 0)  // YaRN's correction range takes log(original / (beta * 2 pi))
            f.bad(key, fmt::format("must be >= 0 (0 means the default {}), got {}", fallback, v));
        *out = v == 0.0 ? fallback : v;
    }
    std::optional<double> af = f.opt_number("attention_factor");
    if (!af && !magnitude_pinned)
        af = inferred_yarn_attention_factor(y.factor, f.opt_number("mscale"), f.opt_number("mscale_all_dim"));
    if (af && *af != 1.0)
        f.bad("attention_factor",
              fmt::format("{} YaRN magnitude scaling{} is not supported by dsv4: DeepSeek-V4 scales no cos/sin "
                          "(set \"attention_factor\": 1.0, as transformers does for a flat rope dict)",
                          *af, f.has("attention_factor") ? "" : " (transformers' default for this nested dict)"));
    return y;
}

MlpType parse_mlp_type(const Fields& f, const std::string& key, const std::string& s) {
    if (s == "hash_moe") return MlpType::kHashMoe;
    if (s == "moe") return MlpType::kMoe;
    f.bad(key, fmt::format("unknown MLP layer type '{}' (expected 'hash_moe' or 'moe')", s));
}

// The Hub shape: compress_ratios[0..L) for the trunk, then one entry per MTP layer. Releases with an attached
// DSpark drafter (Flash-0731, Pro-0813) list extra trailing entries for draft layers that are not MTP layers;
// we accept extra entries only when they are all 0, since a non-zero one would describe a compressor layer
// this checkpoint claims but that num_nextn_predict_layers does not account for.
void split_hub_compress_ratios(const Fields& f, const std::vector<int64_t>& ratios, ModelConfig& c) {
    size_t L = size_t(c.num_layers), n_mtp = size_t(c.num_mtp_layers);
    if (ratios.size() < L)
        f.bad("compress_ratios", fmt::format("has {} entries, fewer than num_hidden_layers ({})", ratios.size(), L));
    if (ratios.size() < L + n_mtp)
        f.bad("compress_ratios", fmt::format("has {} entries, but num_hidden_layers + num_nextn_predict_layers is {}",
                                             ratios.size(), L + n_mtp));
    for (size_t i = 0; i < ratios.size(); ++i) {
        if (ratios[i] < 0) f.bad(fmt::format("compress_ratios[{}]", i), fmt::format("{} is negative", ratios[i]));
        if (i >= L + n_mtp && ratios[i] != 0)
            f.bad(fmt::format("compress_ratios[{}]", i),
                  fmt::format("{} lies beyond num_hidden_layers + num_nextn_predict_layers ({}); only trailing zeros "
                              "(draft-layer entries) are accepted there",
                              ratios[i], L + n_mtp));
    }
    c.compress_ratios.assign(ratios.begin(), ratios.begin() + L);
    c.mtp_compress_ratios.assign(ratios.begin() + L, ratios.begin() + L + n_mtp);
}

void parse_quantization(const Fields& root, ModelConfig& c) {
    const json* q = root.find("quantization_config");
    if (q) {
        Fields f = root.sub("quantization_config", *q);
        std::string method = f.as_string("quant_method", f.require("quant_method"));
        if (method != "fp8")
            f.bad("quant_method", fmt::format("'{}' is not supported (DeepSeek-V4 releases use 'fp8')", method));
        c.fp8_quantized = true;
        if (auto fmt_name = f.opt_string("fmt"); fmt_name && *fmt_name != "e4m3")
            f.bad("fmt", fmt::format("'{}' is not supported (expected 'e4m3')", *fmt_name));
        if (auto scale_fmt = f.opt_string("scale_fmt")) {
            if (*scale_fmt != "ue8m0")
                f.bad("scale_fmt", fmt::format("'{}' is not supported (expected 'ue8m0')", *scale_fmt));
            c.scale_fmt_ue8m0 = true;
        }
        c.weight_block_size = {128, 128};
        if (const json* b = f.find("weight_block_size")) {
            c.weight_block_size = f.int_list("weight_block_size", *b);
            if (c.weight_block_size != std::vector<int64_t>{128, 128})
                f.bad("weight_block_size",
                      fmt::format("{} is not supported (FP8 weights use [128, 128] blocks)", b->dump()));
        }
        if (auto scheme = f.opt_string("activation_scheme"); scheme && *scheme != "dynamic")
            f.bad("activation_scheme", fmt::format("'{}' is not supported (expected 'dynamic')", *scheme));
    }

    // expert_dtype sits at the top level in DeepSeek's configs; accept it inside quantization_config too.
    std::optional<std::string> expert = root.opt_string("expert_dtype");
    std::string expert_key = "expert_dtype";
    if (!expert && q) {
        expert = root.sub("quantization_config", *q).opt_string("expert_dtype");
        expert_key = "quantization_config.expert_dtype";
    }
    if (!expert) {
        c.expert_dtype = c.fp8_quantized ? ExpertDtype::kFp8 : ExpertDtype::kBf16;
    } else if (*expert == "fp4") {
        c.expert_dtype = ExpertDtype::kFp4;
    } else if (*expert == "fp8") {
        c.expert_dtype = ExpertDtype::kFp8;
    } else if (*expert == "bf16" || *expert == "bfloat16") {
        c.expert_dtype = ExpertDtype::kBf16;
    } else {
        fail("{}: field '{}': unknown expert dtype '{}' (expected fp4, fp8 or bf16)", root.source(), expert_key,
             *expert);
    }
    if (c.expert_dtype != ExpertDtype::kBf16 && !c.fp8_quantized)
        fail("{}: field '{}': quantized experts need quantization_config with quant_method 'fp8'", root.source(),
             expert_key);
}

// The transformers shape: layer_types / compress_rates / mlp_layer_types / rope_parameters, with the legacy
// fields folded in the way DeepseekV4Config does (explicit new field > legacy field > class default).
void parse_transformers_schedule(const Fields& f, ModelConfig& c, double& main_theta, double& compress_theta) {
    const int64_t L = c.num_layers;

    int64_t csa_rate = 4, hca_rate = 128;
    if (const json* rates = f.find("compress_rates")) {  // transformers reads these two keys and no others
        Fields r = f.sub("compress_rates", *rates);
        csa_rate = r.opt_int(kCsa).value_or(csa_rate);
        hca_rate = r.opt_int(kHca).value_or(hca_rate);
    }
    csa_rate = f.opt_int("compress_rate_csa").value_or(csa_rate);
    hca_rate = f.opt_int("compress_rate_hca").value_or(hca_rate);
    if (csa_rate <= 0 || hca_rate <= 0)  // a window of m tokens; transformers divides by m
        f.bad("compress_rates", fmt::format("rates must be > 0, got {} {} and {} {}", kCsa, csa_rate, kHca, hca_rate));
    // transformers would run CSA at any rate and HCA at rate 4, but DeepSeek's code and this engine tell the two
    // apart by the ratio alone (overlapping compressor + indexer <=> m == 4, spec §2.3), so neither is expressible.
    if (csa_rate != 4)
        f.bad("compress_rates", fmt::format("a {} rate of {} is not supported by dsv4: CSA is the ratio-4 layer "
                                            "(overlapping windows and the indexer are keyed on m == 4)",
                                            kCsa, csa_rate));
    if (hca_rate == 4)
        f.bad("compress_rates", fmt::format("a {} rate of 4 is not supported by dsv4: ratio 4 means CSA (overlapping "
                                            "windows and an indexer); use any other rate",
                                            kHca));

    std::vector<int64_t> legacy_ratios;
    if (const json* v = f.find("compress_ratios")) legacy_ratios = f.int_list("compress_ratios", *v);

    std::vector<std::string> layer_types;
    if (const json* v = f.find("layer_types")) {
        layer_types = f.string_list("layer_types", *v);
        if (int64_t(layer_types.size()) < L)  // transformers keeps the first num_hidden_layers of a longer list
            f.bad("layer_types",
                  fmt::format("has {} entries, fewer than num_hidden_layers ({})", layer_types.size(), L));
        layer_types.resize(size_t(L));
    } else if (!legacy_ratios.empty()) {
        if (int64_t(legacy_ratios.size()) < L)
            f.bad("compress_ratios",
                  fmt::format("has {} entries, fewer than num_hidden_layers ({})", legacy_ratios.size(), L));
        for (int64_t i = 0; i < L; ++i) {
            int64_t m = legacy_ratios[size_t(i)];
            if (m != 0 && m != 4 && m != 128)
                f.bad(fmt::format("compress_ratios[{}]", i), fmt::format("{} is not one of 0, 4, 128", m));
            layer_types.push_back(m == 0 ? kSliding : (m == 4 ? kCsa : kHca));
        }
    } else {  // DeepseekV4Config's default schedule: the Pro pattern, two HCA layers then CSA/HCA alternating
        for (int64_t i = 0; i < L; ++i) layer_types.push_back(i < 2 || (i - 2) % 2 == 0 ? kHca : kCsa);
    }
    for (int64_t i = 0; i < L; ++i) {
        const std::string& t = layer_types[size_t(i)];
        if (t == kSliding)
            c.compress_ratios.push_back(0);
        else if (t == kCsa)
            c.compress_ratios.push_back(csa_rate);
        else if (t == kHca)
            c.compress_ratios.push_back(hca_rate);
        else
            f.bad(fmt::format("layer_types[{}]", i), fmt::format("unknown layer type '{}'", t));
    }
    // MTP layers are sliding-window only in every release (spec §2.1); a legacy list may still say otherwise.
    c.mtp_compress_ratios.assign(size_t(c.num_mtp_layers), 0);
    for (int64_t i = 0; i < c.num_mtp_layers && size_t(L + i) < legacy_ratios.size(); ++i)
        c.mtp_compress_ratios[size_t(i)] = legacy_ratios[size_t(L + i)];

    if (const json* v = f.find("mlp_layer_types")) {
        auto types = f.string_list("mlp_layer_types", *v);
        if (int64_t(types.size()) < L)
            f.bad("mlp_layer_types", fmt::format("has {} entries, fewer than num_hidden_layers ({})", types.size(), L));
        for (size_t i = 0; i < size_t(L); ++i)
            c.mlp_types.push_back(parse_mlp_type(f, fmt::format("mlp_layer_types[{}]", i), types[i]));
    } else {
        int64_t n_hash = f.opt_int("num_hash_layers").value_or(3);
        if (n_hash < 0) f.bad("num_hash_layers", "must be >= 0");
        for (int64_t i = 0; i < L; ++i) c.mlp_types.push_back(i < n_hash ? MlpType::kHashMoe : MlpType::kMoe);
    }

    // partial_rotary_factor (or legacy qk_rope_head_dim) sizes the rope slice of every head; transformers takes
    // int(head_dim * factor), truncating, and the same double arithmetic here gives the same number.
    double factor = 64.0 / 512.0;
    if (auto p = f.opt_number("partial_rotary_factor"))
        factor = *p;
    else if (auto r = f.opt_int("qk_rope_head_dim"))
        factor = double(*r) / double(c.head_dim);
    const double rope_dim = std::trunc(double(c.head_dim) * factor);
    c.rope_head_dim = rope_dim >= 0 && rope_dim <= double(c.head_dim) ? int64_t(rope_dim) : -1;
    if (c.rope_head_dim <= 0 || c.rope_head_dim % 2 != 0)
        f.bad("partial_rotary_factor",
              fmt::format("{} x head_dim {} gives a rope slice of {} dims; it must be even (RoPE rotates pairs) and "
                          "in [2, head_dim]",
                          factor, c.head_dim, rope_dim));
    if (auto r = f.opt_int("qk_rope_head_dim"); r && *r != c.rope_head_dim)
        f.bad("qk_rope_head_dim",
              fmt::format("{} disagrees with partial_rotary_factor x head_dim = {}", *r, c.rope_head_dim));

    // The rope dict: rope_scaling if set (transformers' `rope_scaling or rope_parameters`), else rope_parameters;
    // nested {main, compress} as saved by transformers, or a flat dict (older saves; it then describes the
    // compress rope, with the thetas at the top level). A nested sub-dict without rope_theta takes the top-level
    // rope_theta, for both labels, as transformers' standardize_rope_params does.
    const json* rp = f.find("rope_scaling");
    std::string rp_key = "rope_scaling";
    if (!rp || (rp->is_object() && rp->empty())) {
        rp = f.find("rope_parameters");
        rp_key = "rope_parameters";
    }
    if (rp && rp->is_object() && rp->contains("main") && rp->contains("compress")) {
        Fields all = f.sub(rp_key, *rp);
        const double top_theta = main_theta;
        for (const char* label : {"main", "compress"}) {
            Fields d = all.sub(label, all.require(label));
            const bool main = std::string(label) == "main";
            (main ? c.main_rope : c.compress_rope).yarn =
                parse_rope_dict(d, c.max_position_embeddings, /*magnitude_pinned=*/false);
            (main ? main_theta : compress_theta) = d.opt_number("rope_theta").value_or(top_theta);
            if (auto p = d.opt_number("partial_rotary_factor"); p && std::fabs(*p - factor) > 1e-9)
                d.bad("partial_rotary_factor",
                      fmt::format("{} disagrees with the top-level value {} (dsv4 has one rope slice for both "
                                  "RoPE types, as DeepSeek's code)",
                                  *p, factor));
        }
    } else if (rp) {
        c.compress_rope.yarn =
            parse_rope_dict(f.sub(rp_key, *rp), c.max_position_embeddings, /*magnitude_pinned=*/true);
    }
}

// What the model cannot compute, or dsv4 cannot yet; docs/config.md gives the reason for every rule (and for
// the fields accepted although a stricter reading would refuse them).
void validate(const Fields& f, const ModelConfig& c) {
    auto positive = [&](const char* key, int64_t v) {  // 0 fails in both references (an empty weight, a division)
        if (v <= 0) f.bad(key, fmt::format("must be > 0, got {}", v));
    };
    // 0 where transformers still computes something constant from an empty weight; negative is malformed.
    auto nonzero = [&](const char* key, int64_t v, const char* what_zero_means) {
        if (v < 0) f.bad(key, fmt::format("must be > 0, got {}", v));
        if (v == 0) f.bad(key, fmt::format("0 is not supported by dsv4: {}", what_zero_means));
    };
    auto non_negative = [&](const char* key, double v) {
        if (v < 0) f.bad(key, fmt::format("must be >= 0, got {}", v));
    };
    positive("vocab_size", c.vocab_size);
    nonzero("hidden_size", c.hidden_size, "an empty hidden state (every logit 0)");
    positive("num_hidden_layers", c.num_layers);
    positive("num_attention_heads", c.num_heads);
    positive("head_dim", c.head_dim);
    nonzero("q_lora_rank", c.q_lora_rank, "every query would be 0");
    positive("o_groups", c.o_groups);
    positive("o_lora_rank", c.o_lora_rank);
    positive("sliding_window", c.sliding_window);  // DeepSeek's ring buffer takes positions modulo the window
    nonzero("max_position_embeddings", c.max_position_embeddings, "dsv4 limits every sequence to it");
    positive("n_routed_experts", c.n_routed_experts);
    nonzero("num_experts_per_tok", c.num_experts_per_tok, "no routed expert (the MoE would be its shared expert)");
    nonzero("moe_intermediate_size", c.moe_intermediate_size, "experts of width 0 (the MoE would output 0)");
    nonzero("hc_mult", c.hc_mult, "no residual stream (every logit 0)");
    // 0 Sinkhorn iterations: both references still do the first column normalization, so 0 computes as 1.
    if (c.hc_sinkhorn_iters < 0) f.bad("hc_sinkhorn_iters", fmt::format("must be >= 0, got {}", c.hc_sinkhorn_iters));
    if (c.rope_head_dim <= 0 || c.rope_head_dim % 2 != 0)
        f.bad("qk_rope_head_dim", fmt::format("must be even and > 0 (RoPE rotates pairs), got {}", c.rope_head_dim));
    if (c.head_dim < c.rope_head_dim)  // equal: every dim rotates, no nope part
        f.bad("head_dim", fmt::format("{} is smaller than the rope dim {} (RoPE rotates the last rope dims of a head)",
                                      c.head_dim, c.rope_head_dim));
    // The grouped output projection splits the H * head_dim outputs into o_groups equal runs; a group may end
    // inside a head.
    if ((c.num_heads * c.head_dim) % c.o_groups != 0)
        f.bad("o_groups", fmt::format("{} does not divide num_attention_heads x head_dim = {}", c.o_groups,
                                      c.num_heads * c.head_dim));
    if (c.num_experts_per_tok > c.n_routed_experts)
        f.bad("num_experts_per_tok",
              fmt::format("{} exceeds n_routed_experts {}", c.num_experts_per_tok, c.n_routed_experts));
    if (c.n_shared_experts != 1)  // DeepSeek's MoE asserts it; transformers ignores the field and builds one
        f.bad("n_shared_experts",
              fmt::format("must be 1 (DeepSeek-V4 has one shared expert), got {}", c.n_shared_experts));

    bool any_csa = false;
    for (int64_t m : c.compress_ratios) any_csa |= m == 4;
    for (int64_t m : c.mtp_compress_ratios) any_csa |= m == 4;
    if (any_csa) {  // only CSA layers have an indexer
        positive("index_n_heads", c.index_n_heads);
        if (c.index_topk < 0) f.bad("index_topk", fmt::format("must be >= 0, got {}", c.index_topk));
        if (c.index_head_dim < c.rope_head_dim)  // equal: the indexer heads have no non-rotary part
            f.bad("index_head_dim",
                  fmt::format("{} is smaller than the rope dim {} (RoPE rotates the last rope dims of "
                              "an indexer head)",
                              c.index_head_dim, c.rope_head_dim));
    }
    if (c.scoring_func != "sqrtsoftplus")
        f.bad("scoring_func", fmt::format("'{}' is not supported by dsv4: it routes with 'sqrtsoftplus', the function "
                                          "of every DeepSeek-V4 release",
                                          c.scoring_func));
    // swiglu_limit 0 disables the clamp (DeepSeek's `if swiglu_limit > 0`); transformers would clamp to [0, 0].
    if (c.swiglu_limit < 0)
        f.bad("swiglu_limit", fmt::format("must be >= 0 (0 disables the clamp), got {}", c.swiglu_limit));
    non_negative("hc_eps", c.hc_eps);
    non_negative("rms_norm_eps", c.rms_norm_eps);
    for (auto [key, rope] : {std::pair{"rope_theta", &c.main_rope}, {"compress_rope_theta", &c.compress_rope}}) {
        if (!(rope->theta > 0)) f.bad(key, fmt::format("must be > 0, got {}", rope->theta));
        if (rope->yarn && rope->theta == 1.0)  // YaRN's correction range divides by ln(theta)
            f.bad(key, "must not be 1 with YaRN (its correction range divides by ln theta)");
    }
}

}  // namespace

ParsedConfig parse_config_json(const std::string& json_text, const std::string& source) {
    json root;
    try {
        root = json::parse(json_text);
    } catch (const json::exception& e) {
        fail("{}: not valid JSON: {}", source, e.what());
    }
    if (!root.is_object()) fail("{}: expected a JSON object at the top level, got {}", source, root.type_name());
    Fields f(root, source, "");

    if (auto type = f.opt_string("model_type"); type && *type != "deepseek_v4")
        f.bad("model_type", fmt::format("'{}' is not 'deepseek_v4'{}", *type,
                                        *type == "deepseek_v41" ? " (DeepSeek-V4.1 is a different architecture)" : ""));
    if (auto act = f.opt_string("hidden_act"); act && *act != "silu")
        f.bad("hidden_act",
              fmt::format("'{}' is not supported by dsv4: its experts use SwiGLU with 'silu', as DeepSeek's "
                          "code (transformers would apply '{}')",
                          *act, *act));

    ParsedConfig out;
    bool hf = false;
    for (const char* key :
         {"layer_types", "mlp_layer_types", "compress_rates", "rope_parameters", "partial_rotary_factor"})
        hf |= f.has(key);
    out.shape = hf ? ConfigShape::kTransformers : ConfigShape::kHub;
    const bool req = !hf;  // Hub configs must spell out the architecture; transformers ones may lean on defaults

    ModelConfig& c = out.config;
    c.vocab_size = f.int_or_default("vocab_size", req, 129280);
    c.hidden_size = f.int_or_default("hidden_size", req, 4096);
    c.num_layers = f.int_or_default("num_hidden_layers", req, 43);
    c.num_heads = f.int_or_default("num_attention_heads", req, 64);
    // Read, never used: transformers' V4 ignores it and DeepSeek's code has no such field; both run one K=V head.
    c.num_kv_heads = f.opt_int("num_key_value_heads").value_or(1);
    c.head_dim = f.int_or_default("head_dim", req, 512);
    c.q_lora_rank = f.int_or_default("q_lora_rank", req, 1024);
    c.o_groups = f.int_or_default("o_groups", req, 8);
    c.o_lora_rank = f.int_or_default("o_lora_rank", req, 1024);
    c.sliding_window = f.int_or_default("sliding_window", req, 128);
    c.max_position_embeddings = f.int_or_default("max_position_embeddings", req, 1048576);
    c.index_n_heads = f.int_or_default("index_n_heads", req, 64);
    c.index_head_dim = f.int_or_default("index_head_dim", req, 128);
    c.index_topk = f.int_or_default("index_topk", req, 512);
    c.n_routed_experts = f.int_or_default("n_routed_experts", req, 256);
    c.n_shared_experts = f.opt_int("n_shared_experts").value_or(1);
    c.num_experts_per_tok = f.int_or_default("num_experts_per_tok", req, 6);
    c.moe_intermediate_size = f.int_or_default("moe_intermediate_size", req, 2048);
    c.scoring_func = f.opt_string("scoring_func").value_or("sqrtsoftplus");
    // topk_method and norm_topk_prob: read, never used; neither reference reads them (flat top-k over score + bias,
    // weights always normalized).
    c.topk_method = f.opt_string("topk_method").value_or("noaux_tc");
    c.norm_topk_prob = f.opt_bool("norm_topk_prob").value_or(true);
    c.routed_scaling_factor = f.number_or_default("routed_scaling_factor", req, 1.5);
    c.swiglu_limit = f.number_or_default("swiglu_limit", req, 10.0);
    c.hc_mult = f.int_or_default("hc_mult", req, 4);
    c.hc_sinkhorn_iters = f.int_or_default("hc_sinkhorn_iters", req, 20);
    c.hc_eps = f.opt_number("hc_eps").value_or(1e-6);
    c.rms_norm_eps = f.opt_number("rms_norm_eps").value_or(1e-6);
    c.num_mtp_layers = f.int_or_default("num_nextn_predict_layers", req, 1);
    c.bos_token_id = f.opt_int("bos_token_id").value_or(0);
    if (const json* eos = f.find("eos_token_id")) {
        // transformers allows a list of stop ids; V4 has exactly one (spec §16.3 item 13), the first.
        if (eos->is_array()) {
            auto ids = f.int_list("eos_token_id", *eos);
            if (ids.empty()) f.bad("eos_token_id", "is an empty list");
            c.eos_token_id = ids[0];
        } else {
            c.eos_token_id = f.as_int("eos_token_id", *eos);
        }
    }
    c.tie_word_embeddings = f.opt_bool("tie_word_embeddings").value_or(false);
    // transformers 5 writes "dtype"; older writers and the Hub write "torch_dtype".
    c.torch_dtype = f.opt_string("torch_dtype").value_or(f.opt_string("dtype").value_or("bfloat16"));

    double main_theta = f.number_or_default("rope_theta", req, 10000.0);
    double compress_theta = f.number_or_default("compress_rope_theta", req, 160000.0);
    // The schedule code below sizes lists by these two; the rest is validated once everything is read.
    // The upper bounds are far beyond any release (61 + 3); they stop a corrupt value from sizing huge lists.
    if (c.num_layers == 0)
        f.bad("num_hidden_layers",
              "0 (embedding straight to the head) is not supported by dsv4: it needs at least one "
              "decoder layer");
    if (c.num_layers < 0 || c.num_layers > 4096)
        f.bad("num_hidden_layers", fmt::format("must be in [1, 4096], got {}", c.num_layers));
    if (c.num_mtp_layers < 0 || c.num_mtp_layers > 64)
        f.bad("num_nextn_predict_layers", fmt::format("must be in [0, 64], got {}", c.num_mtp_layers));
    if (c.head_dim <= 0) f.bad("head_dim", fmt::format("must be > 0, got {}", c.head_dim));
    if (hf) {
        parse_transformers_schedule(f, c, main_theta, compress_theta);
    } else {
        c.rope_head_dim = f.req_int("qk_rope_head_dim");
        split_hub_compress_ratios(f, f.int_list("compress_ratios", f.require("compress_ratios")), c);
        int64_t n_hash = f.req_int("num_hash_layers");  // more than num_hidden_layers: every layer, as both references
        if (n_hash < 0) f.bad("num_hash_layers", fmt::format("must be >= 0, got {}", n_hash));
        for (int64_t i = 0; i < c.num_layers; ++i)
            c.mlp_types.push_back(i < n_hash ? MlpType::kHashMoe : MlpType::kMoe);
        if (const json* rs = f.find("rope_scaling"))
            c.compress_rope.yarn =
                parse_rope_dict(f.sub("rope_scaling", *rs), c.max_position_embeddings, /*magnitude_pinned=*/true);
    }
    c.main_rope.theta = main_theta;
    c.compress_rope.theta = compress_theta;
    parse_quantization(f, c);
    validate(f, c);
    return out;
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& source_name) {
    return parse_config_json(json_text, source_name).config;
}

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    DSV4_CHECK(in.good(), "{}: cannot open for reading", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    DSV4_CHECK(!in.bad(), "{}: read failed", path);
    return ss.str();
}

ModelConfig read_model_config(const std::string& path) {
    return parse_model_config(read_text_file(path), path);
}

}  // namespace dsv4
