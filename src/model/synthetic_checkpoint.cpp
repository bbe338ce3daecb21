// Synthetic checkpoints: see synthetic_checkpoint.h. Three steps: plan (every logical tensor of the config with
// its storage and initializer, in the order a loader reads them), assign the planned tensors to shards by bytes,
// then generate and write one shard at a time (memory: one shard). Values come from a counter-based generator,
// so any tensor can be generated alone, in parallel, and identically on every run.
#include "model/synthetic_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <numbers>

#include "core/error.h"
#include "core/int_math.h"
#include "core/mix64.h"
#include "core/number_formats.h"
#include "core/thread_pool.h"
#include "io/safetensors_writer.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

// ---- Presets.

// Layer pattern of the tiny preset: SWA first and last, CSA and HCA-16 alternating between (4 layers: 0,4,16,0).
// HCA uses ratio 16 rather than 128 so that short demo conversations already produce compressed entries.
ModelConfig tiny_config(int64_t L) {
    ModelConfig c;
    c.vocab_size = 129280;
    c.hidden_size = 128;
    c.num_layers = L;
    c.num_heads = 4;
    c.head_dim = 128;
    c.rope_head_dim = 64;  // head_dim - rope = 64: the KV FP8 round trip of `model` numerics works in blocks of 64
    c.q_lora_rank = 64;
    c.o_groups = 2;
    c.o_lora_rank = 64;
    c.sliding_window = 32;
    for (int64_t i = 0; i < L; ++i)
        c.compress_ratios.push_back(i == 0 || (L >= 4 && i == L - 1) ? 0 : (i % 2 == 1 ? 4 : 16));
    c.num_mtp_layers = 1;
    c.mtp_compress_ratios = {0};
    for (int64_t i = 0; i < L; ++i) c.mlp_types.push_back(i < 2 ? MlpType::kHashMoe : MlpType::kMoe);
    c.main_rope = {10000.0, std::nullopt};
    c.compress_rope = {160000.0, YarnParams{16.0, 256, 32.0, 1.0}};
    c.max_position_embeddings = 4096;  // = YaRN factor x original context
    c.index_n_heads = 4;
    c.index_head_dim = 128;  // a power of two: the indexer's Hadamard transform
    c.index_topk = 16;
    c.n_routed_experts = 8;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 64;
    c.routed_scaling_factor = 1.5;
    c.swiglu_limit = 10.0;
    c.hc_mult = 4;
    c.hc_sinkhorn_iters = 20;
    c.expert_dtype = ExpertDtype::kFp4;
    c.fp8_quantized = true;
    c.scale_fmt_ue8m0 = true;
    c.weight_block_size = {128, 128};
    return c;
}

// V4-Flash (spec §2.1): compress_ratios [0,0] + [4,128]*20 + [4] for 43 layers; deeper or shallower trunks
// continue the same pattern.
ModelConfig flash_config(int64_t L) {
    ModelConfig c = tiny_config(L);
    c.hidden_size = 4096;
    c.num_heads = 64;
    c.head_dim = 512;
    c.q_lora_rank = 1024;
    c.o_groups = 8;
    c.o_lora_rank = 1024;
    c.sliding_window = 128;
    c.compress_ratios.clear();
    for (int64_t i = 0; i < L; ++i) c.compress_ratios.push_back(i < 2 ? 0 : (i % 2 == 0 ? 4 : 128));
    c.mlp_types.clear();
    for (int64_t i = 0; i < L; ++i) c.mlp_types.push_back(i < 3 ? MlpType::kHashMoe : MlpType::kMoe);
    c.compress_rope = {160000.0, YarnParams{16.0, 65536, 32.0, 1.0}};
    c.max_position_embeddings = 1048576;
    c.index_n_heads = 64;
    c.index_head_dim = 128;
    c.index_topk = 512;
    c.n_routed_experts = 256;
    c.num_experts_per_tok = 6;
    c.moe_intermediate_size = 2048;
    return c;
}

// V4-Pro (spec §2.1): compress_ratios [128,128] + [4,128]*29 + [4] for 61 layers (every layer compresses); deeper or
// shallower trunks continue the same pattern.
ModelConfig pro_config(int64_t L) {
    ModelConfig c = flash_config(L);
    c.hidden_size = 7168;
    c.num_heads = 128;
    c.q_lora_rank = 1536;
    c.o_groups = 16;
    c.compress_ratios.clear();
    for (int64_t i = 0; i < L; ++i) c.compress_ratios.push_back(i < 2 ? 128 : (i % 2 == 0 ? 4 : 128));
    c.index_topk = 1024;
    c.n_routed_experts = 384;
    c.moe_intermediate_size = 3072;
    c.routed_scaling_factor = 2.5;
    return c;
}

// ---- Deterministic values: value i of a tensor is a function of (seed, name, i) only.

uint64_t name_key(uint64_t seed, std::string_view name) {
    uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
    for (unsigned char ch : name) h = (h ^ ch) * 0x100000001B3ull;
    return mix64(h ^ mix64(seed));
}

struct Init {
    enum Kind { kNormal, kUniform } kind = kNormal;
    double a = 0.0, b = 1.0;  // normal: mean a, std b; uniform: [a, b)

    static Init normal(double std) { return {kNormal, 0.0, std}; }
    static Init uniform(double lo, double hi) { return {kUniform, lo, hi}; }
};

class Values {
  public:
    Values(uint64_t key, Init init) : key_(key), init_(init) {}

    // Values [begin, begin + n) into out. Normal values come in pairs (2j, 2j+1) from one Box-Muller draw, so
    // element i is the same whichever range it is generated in.
    void fill(uint64_t begin, int64_t n, float* out) const {
        for (uint64_t i = begin, end = begin + uint64_t(n); i < end;) {
            const uint64_t pair = i >> 1;
            const uint64_t h = mix64(key_ + 0x9E3779B97F4A7C15ull * (pair + 1));
            const double u1 = (double(h >> 32) + 0.5) * 0x1p-32;          // (0, 1)
            const double u2 = (double(h & 0xFFFFFFFFu) + 0.5) * 0x1p-32;  // (0, 1)
            if (init_.kind == Init::kUniform) {
                const double u = (i & 1) ? u2 : u1;
                out[i - begin] = float(init_.a + (init_.b - init_.a) * u);
                ++i;
                continue;
            }
            const double r = std::sqrt(-2.0 * std::log(u1)), theta = 2.0 * std::numbers::pi * u2;
            if ((i & 1) == 0) out[i++ - begin] = float(init_.a + init_.b * r * std::cos(theta));
            if (i < end) out[i++ - begin] = float(init_.a + init_.b * r * std::sin(theta));
        }
    }

  private:
    uint64_t key_;
    Init init_;
};

// ---- The plan.

enum class Storage {
    kF32,
    kBF16,
    kFp8Block,  // .weight F8_E4M3 [N, K] + .scale F8_E8M0 [ceil(N/128), ceil(K/128)]
    kFp4Mx,     // .weight I8 [N, K/2] (low nibble = even column) + .scale F8_E8M0 [N, K/32]
    kTid2eid,   // I64 [vocab, k]: k distinct experts per row; `cols` = k, `experts` = E
};

struct Planned {
    std::string name;  // full tensor name; for kFp8Block/kFp4Mx the prefix before .weight/.scale
    Storage storage = Storage::kF32;
    std::vector<int64_t> shape;  // logical [N] or [N, K]
    Init init;
    int64_t experts = 0;  // kTid2eid only

    int64_t rows() const { return shape[0]; }
    int64_t cols() const { return shape.size() > 1 ? shape[1] : 1; }
};

uint64_t stored_bytes(const Planned& p) {
    const uint64_t n = uint64_t(p.rows()) * uint64_t(p.cols());
    switch (p.storage) {
        case Storage::kF32:
            return 4 * n;
        case Storage::kBF16:
            return 2 * n;
        case Storage::kFp8Block:
            return n + uint64_t(ceil_div(p.rows(), 128) * ceil_div(p.cols(), 128));
        case Storage::kFp4Mx:
            return n / 2 + n / 32;
        case Storage::kTid2eid:
            return 8 * n;
    }
    return 0;
}

class Planner {
  public:
    explicit Planner(const ModelConfig& c) : c_(c) {}

    std::vector<Planned> plan() {
        const int64_t D = c_.hidden_size, n = c_.hc_mult;
        add(dense("embed.weight", c_.vocab_size, D, Init::normal(1.0)));
        for (int64_t i = 0; i < c_.num_layers; ++i)
            block("layers." + std::to_string(i), c_.compress_ratios[size_t(i)], c_.mlp_types[size_t(i)]);
        for (int64_t i = 0; i < c_.num_mtp_layers; ++i) {
            const std::string p = "mtp." + std::to_string(i);
            block(p, c_.mtp_compress_ratios[size_t(i)], MlpType::kMoe);  // MTP blocks are never hash-routed
            linear(p + ".e_proj", D, D);
            linear(p + ".h_proj", D, D);
            norm(p + ".enorm.weight", D);
            norm(p + ".hnorm.weight", D);
            norm(p + ".norm.weight", D);
            hc(p + ".hc_head", n, 1);
        }
        norm("norm.weight", D);
        hc("hc_head", n, 1);
        if (!c_.tie_word_embeddings) add(dense("head.weight", c_.vocab_size, D, Init::normal(1.0 / std::sqrt(D))));
        return std::move(out_);
    }

  private:
    void add(Planned p) { out_.push_back(std::move(p)); }

    static Planned dense(std::string name, int64_t rows, int64_t cols, Init init) {
        return {std::move(name), Storage::kBF16, {rows, cols}, init};
    }
    static Planned f32(std::string name, std::vector<int64_t> shape, Init init) {
        return {std::move(name), Storage::kF32, std::move(shape), init};
    }
    void norm(const std::string& name, int64_t size) { add({name, Storage::kBF16, {size}, Init::uniform(0.9, 1.1)}); }
    // Attention, shared-expert and MTP projections: FP8 block-scaled in quantized checkpoints, else BF16.
    void linear(const std::string& prefix, int64_t rows, int64_t cols) {
        Init init = Init::normal(1.0 / std::sqrt(double(cols)));
        if (c_.fp8_quantized)
            add({prefix, Storage::kFp8Block, {rows, cols}, init});
        else
            add(dense(prefix + ".weight", rows, cols, init));
    }
    void expert_linear(const std::string& prefix, int64_t rows, int64_t cols) {
        Init init = Init::normal(1.0 / std::sqrt(double(cols)));
        switch (c_.expert_dtype) {
            case ExpertDtype::kFp4:
                add({prefix, Storage::kFp4Mx, {rows, cols}, init});
                break;
            case ExpertDtype::kFp8:
                add({prefix, Storage::kFp8Block, {rows, cols}, init});
                break;
            case ExpertDtype::kBf16:
                add(dense(prefix + ".weight", rows, cols, init));
                break;
        }
    }
    // mHC mixers: fn [rows, n_hc * D], base [rows], scale [scales] (spec §5).
    void hc(const std::string& prefix, int64_t rows, int64_t scales) {
        const int64_t width = c_.hc_mult * c_.hidden_size;
        add(f32(prefix + "_fn", {rows, width}, Init::normal(1.0 / std::sqrt(double(width)))));
        add(f32(prefix + "_base", {rows}, Init::normal(0.5)));
        add(f32(prefix + "_scale", {scales}, Init::uniform(0.5, 1.5)));
    }
    void compressor(const std::string& p, int64_t ratio, int64_t head_dim) {
        const int64_t width = (ratio == 4 ? 2 : 1) * head_dim, D = c_.hidden_size;
        add(dense(p + ".wkv.weight", width, D, Init::normal(1.0 / std::sqrt(double(D)))));
        add(dense(p + ".wgate.weight", width, D, Init::normal(1.0 / std::sqrt(double(D)))));
        add(f32(p + ".ape", {ratio, width}, Init::normal(0.5)));
        norm(p + ".norm.weight", head_dim);
    }
    void attention(const std::string& p, int64_t ratio) {
        const int64_t D = c_.hidden_size, H = c_.num_heads, d = c_.head_dim, g = c_.o_groups;
        add(f32(p + ".attn_sink", {H}, Init::normal(0.5)));
        linear(p + ".wq_a", c_.q_lora_rank, D);
        norm(p + ".q_norm.weight", c_.q_lora_rank);
        linear(p + ".wq_b", H * d, c_.q_lora_rank);
        linear(p + ".wkv", d, D);
        norm(p + ".kv_norm.weight", d);
        linear(p + ".wo_a", g * c_.o_lora_rank, H * d / g);
        linear(p + ".wo_b", D, g * c_.o_lora_rank);
        if (ratio > 0) compressor(p + ".compressor", ratio, d);
        if (ratio == 4) {
            linear(p + ".indexer.wq_b", c_.index_n_heads * c_.index_head_dim, c_.q_lora_rank);
            add(dense(p + ".indexer.weights_proj.weight", c_.index_n_heads, D, Init::normal(1.0 / std::sqrt(D))));
            compressor(p + ".indexer.compressor", ratio, c_.index_head_dim);
        }
    }
    void moe(const std::string& p, MlpType type) {
        const int64_t D = c_.hidden_size, I = c_.moe_intermediate_size, E = c_.n_routed_experts;
        add(dense(p + ".gate.weight", E, D, Init::normal(1.0 / std::sqrt(double(D)))));
        if (type == MlpType::kHashMoe)
            add({p + ".gate.tid2eid", Storage::kTid2eid, {c_.vocab_size, c_.num_experts_per_tok}, {}, E});
        else
            add(f32(p + ".gate.bias", {E}, Init::normal(0.1)));
        for (int64_t e = 0; e < E; ++e) {
            const std::string x = p + ".experts." + std::to_string(e);
            expert_linear(x + ".w1", I, D);
            expert_linear(x + ".w2", D, I);
            expert_linear(x + ".w3", I, D);
        }
        linear(p + ".shared_experts.w1", I, D);
        linear(p + ".shared_experts.w2", D, I);
        linear(p + ".shared_experts.w3", I, D);
    }
    void block(const std::string& p, int64_t ratio, MlpType type) {
        const int64_t D = c_.hidden_size, n = c_.hc_mult;
        norm(p + ".attn_norm.weight", D);
        norm(p + ".ffn_norm.weight", D);
        hc(p + ".hc_attn", (2 + n) * n, 3);
        hc(p + ".hc_ffn", (2 + n) * n, 3);
        attention(p + ".attn", ratio);
        moe(p + ".ffn", type);
    }

    const ModelConfig& c_;
    std::vector<Planned> out_;
};

// ---- Generation: one planned tensor -> its stored tensors (bytes owned here until the shard is written).

struct Stored {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
};

uint8_t e8m0_byte(float power_of_two) {
    return uint8_t((float_bits(power_of_two) >> 23) & 0xFF);
}

class Generator {
  public:
    Generator(uint64_t seed, ThreadPool& pool) : seed_(seed), pool_(pool) {}

    std::vector<Stored> generate(const Planned& p) {
        const Values v(name_key(seed_, p.name), p.init);
        const int64_t N = p.rows(), K = p.cols();
        switch (p.storage) {
            case Storage::kF32: {
                Stored s{p.name, DType::kF32, p.shape, std::vector<uint8_t>(size_t(N * K) * 4)};
                auto* out = reinterpret_cast<float*>(s.bytes.data());
                rows(N, [&](int64_t r) { v.fill(uint64_t(r * K), K, out + r * K); });
                return vec(std::move(s));
            }
            case Storage::kBF16: {
                Stored s{p.name, DType::kBF16, p.shape, std::vector<uint8_t>(size_t(N * K) * 2)};
                auto* out = reinterpret_cast<uint16_t*>(s.bytes.data());
                rows(N, [&](int64_t r) {
                    std::vector<float> row(static_cast<size_t>(K));
                    v.fill(uint64_t(r * K), K, row.data());
                    for (int64_t k = 0; k < K; ++k) out[r * K + k] = f32_to_bf16(row[size_t(k)]);
                });
                return vec(std::move(s));
            }
            case Storage::kFp8Block:
                return fp8_block(p, v);
            case Storage::kFp4Mx:
                return fp4_mx(p, v);
            case Storage::kTid2eid:
                return tid2eid(p);
        }
        return {};
    }

  private:
    static std::vector<Stored> vec(Stored s) {
        std::vector<Stored> out;
        out.push_back(std::move(s));
        return out;
    }

    void rows(int64_t n, const std::function<void(int64_t)>& fn) {
        pool_.parallel_for(
            n,
            [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) fn(r);
            },
            16);
    }

    // W = e4m3(w / s) * s with s = 2^ceil(log2(amax / 448)) per 128x128 block (spec §11.3).
    std::vector<Stored> fp8_block(const Planned& p, const Values& v) {
        const int64_t N = p.rows(), K = p.cols(), bn = ceil_div(N, 128), bk = ceil_div(K, 128);
        Stored w{p.name + ".weight", DType::kF8E4M3, {N, K}, std::vector<uint8_t>(size_t(N * K))};
        Stored s{p.name + ".scale", DType::kF8E8M0, {bn, bk}, std::vector<uint8_t>(size_t(bn * bk))};
        pool_.parallel_for(bn, [&](int64_t b0, int64_t b1) {
            std::vector<float> band;
            for (int64_t b = b0; b < b1; ++b) {
                const int64_t r0 = b * 128, r1 = std::min(N, r0 + 128);
                band.resize(size_t((r1 - r0) * K));
                v.fill(uint64_t(r0 * K), (r1 - r0) * K, band.data());
                for (int64_t c = 0; c < bk; ++c) {
                    const int64_t k0 = c * 128, k1 = std::min(K, k0 + 128);
                    float amax = 1e-4f;
                    for (int64_t r = r0; r < r1; ++r)
                        for (int64_t k = k0; k < k1; ++k)
                            amax = std::max(amax, std::fabs(band[size_t((r - r0) * K + k)]));
                    const float scale = ue8m0_ceil_pow2(amax / kE4M3Max);
                    s.bytes[size_t(b * bk + c)] = e8m0_byte(scale);
                    for (int64_t r = r0; r < r1; ++r)
                        for (int64_t k = k0; k < k1; ++k)
                            w.bytes[size_t(r * K + k)] = f32_to_e4m3(band[size_t((r - r0) * K + k)] / scale);
                }
            }
        });
        std::vector<Stored> out;
        out.push_back(std::move(w));
        out.push_back(std::move(s));
        return out;
    }

    // MXFP4: scale 2^ceil(log2(amax / 6)) per 32 columns; byte j of a row holds column 2j (low) and 2j+1 (high).
    std::vector<Stored> fp4_mx(const Planned& p, const Values& v) {
        const int64_t N = p.rows(), K = p.cols();
        DSV4_CHECK(K % 32 == 0, "synthetic checkpoint: FP4 tensor '{}' needs in_features divisible by 32, got {}",
                   p.name, K);
        Stored w{p.name + ".weight", DType::kI8, {N, K / 2}, std::vector<uint8_t>(size_t(N * K / 2))};
        Stored s{p.name + ".scale", DType::kF8E8M0, {N, K / 32}, std::vector<uint8_t>(size_t(N * K / 32))};
        rows(N, [&](int64_t r) {
            float block[32];
            for (int64_t c = 0; c < K / 32; ++c) {
                v.fill(uint64_t(r * K + c * 32), 32, block);
                float amax = 6.0f * 0x1p-126f;
                for (float x : block) amax = std::max(amax, std::fabs(x));
                const float scale = ue8m0_ceil_pow2(amax / kE2M1Max);
                s.bytes[size_t(r * (K / 32) + c)] = e8m0_byte(scale);
                for (int j = 0; j < 32; j += 2) {
                    const uint8_t lo = f32_to_e2m1(block[j] / scale), hi = f32_to_e2m1(block[j + 1] / scale);
                    w.bytes[size_t(r * (K / 2) + c * 16 + j / 2)] = uint8_t(lo | (hi << 4));
                }
            }
        });
        std::vector<Stored> out;
        out.push_back(std::move(w));
        out.push_back(std::move(s));
        return out;
    }

    // Each row: the first k of a Fisher-Yates shuffle of the experts, driven by (seed, name, row).
    std::vector<Stored> tid2eid(const Planned& p) {
        const int64_t V = p.rows(), k = p.cols(), E = p.experts;
        const uint64_t key = name_key(seed_, p.name);
        Stored s{p.name, DType::kI64, p.shape, std::vector<uint8_t>(size_t(V * k) * 8)};
        auto* out = reinterpret_cast<int64_t*>(s.bytes.data());
        rows(V, [&](int64_t r) {
            std::vector<int64_t> experts(static_cast<size_t>(E));
            for (int64_t e = 0; e < E; ++e) experts[size_t(e)] = e;
            for (int64_t j = 0; j < k; ++j) {
                const uint64_t h = mix64(key + 0x9E3779B97F4A7C15ull * uint64_t(r * k + j + 1));
                const int64_t pick = j + int64_t(h % uint64_t(E - j));
                std::swap(experts[size_t(j)], experts[size_t(pick)]);
                out[r * k + j] = experts[size_t(j)];
            }
        });
        return vec(std::move(s));
    }

    uint64_t seed_;
    ThreadPool& pool_;
};

void check_writable(const ModelConfig& c) {
    DSV4_CHECK(int64_t(c.compress_ratios.size()) == c.num_layers && int64_t(c.mlp_types.size()) == c.num_layers &&
                   int64_t(c.mtp_compress_ratios.size()) == c.num_mtp_layers,
               "synthetic checkpoint: the config's per-layer lists do not match its layer counts");
    DSV4_CHECK(c.expert_dtype == ExpertDtype::kBf16 || c.fp8_quantized,
               "synthetic checkpoint: quantized experts need an fp8-quantized config");
    DSV4_CHECK((c.num_heads * c.head_dim) % c.o_groups == 0,
               "synthetic checkpoint: o_groups {} does not divide {} heads x {} dims", c.o_groups, c.num_heads,
               c.head_dim);
}

}  // namespace

std::vector<std::string> synthetic_preset_names() {
    return {"tiny", "flash", "pro"};
}

ModelConfig synthetic_preset(std::string_view name, int64_t num_layers) {
    DSV4_CHECK(num_layers >= 0 && num_layers <= 4096, "--layers must be in [1, 4096], got {}", num_layers);
    if (name == "tiny") return tiny_config(num_layers ? num_layers : 4);
    if (name == "flash") return flash_config(num_layers ? num_layers : 43);
    if (name == "pro") return pro_config(num_layers ? num_layers : 61);
    fail("unknown preset '{}': choose tiny, flash or pro", name);
}

std::string hub_config_json(const ModelConfig& c) {
    int64_t hash_layers = 0;
    while (hash_layers < c.num_layers && c.mlp_types[size_t(hash_layers)] == MlpType::kHashMoe) ++hash_layers;
    for (int64_t i = hash_layers; i < c.num_layers; ++i)
        DSV4_CHECK(
            c.mlp_types[size_t(i)] == MlpType::kMoe,
            "the Hub config shape can only describe hash-routed layers that come first (layer {} is hash-routed)", i);
    DSV4_CHECK(!c.main_rope.yarn, "the Hub config shape has YaRN on the compressor layers only, not the main RoPE");

    std::vector<int64_t> ratios = c.compress_ratios;
    ratios.insert(ratios.end(), c.mtp_compress_ratios.begin(), c.mtp_compress_ratios.end());
    nlohmann::ordered_json j;
    j["architectures"] = {"DeepseekV4ForCausalLM"};
    j["model_type"] = "deepseek_v4";
    j["vocab_size"] = c.vocab_size;
    j["hidden_size"] = c.hidden_size;
    j["num_hidden_layers"] = c.num_layers;
    j["num_attention_heads"] = c.num_heads;
    j["num_key_value_heads"] = c.num_kv_heads;
    j["head_dim"] = c.head_dim;
    j["qk_rope_head_dim"] = c.rope_head_dim;
    j["q_lora_rank"] = c.q_lora_rank;
    j["o_groups"] = c.o_groups;
    j["o_lora_rank"] = c.o_lora_rank;
    j["sliding_window"] = c.sliding_window;
    j["compress_ratios"] = ratios;
    j["compress_rope_theta"] = c.compress_rope.theta;
    j["rope_theta"] = c.main_rope.theta;
    if (const auto& y = c.compress_rope.yarn)
        j["rope_scaling"] = {{"type", "yarn"},
                             {"factor", y->factor},
                             {"original_max_position_embeddings", y->original_max_position_embeddings},
                             {"beta_fast", y->beta_fast},
                             {"beta_slow", y->beta_slow}};
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["index_n_heads"] = c.index_n_heads;
    j["index_head_dim"] = c.index_head_dim;
    j["index_topk"] = c.index_topk;
    j["n_routed_experts"] = c.n_routed_experts;
    j["n_shared_experts"] = c.n_shared_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["num_hash_layers"] = hash_layers;
    j["scoring_func"] = c.scoring_func;
    j["topk_method"] = c.topk_method;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["routed_scaling_factor"] = c.routed_scaling_factor;
    j["swiglu_limit"] = c.swiglu_limit;
    j["hc_mult"] = c.hc_mult;
    j["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
    j["hc_eps"] = c.hc_eps;
    j["rms_norm_eps"] = c.rms_norm_eps;
    j["num_nextn_predict_layers"] = c.num_mtp_layers;
    j["hidden_act"] = "silu";
    j["bos_token_id"] = c.bos_token_id;
    j["eos_token_id"] = c.eos_token_id;
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    j["torch_dtype"] = c.torch_dtype;
    if (c.fp8_quantized) {
        j["expert_dtype"] =
            c.expert_dtype == ExpertDtype::kFp4 ? "fp4" : (c.expert_dtype == ExpertDtype::kFp8 ? "fp8" : "bf16");
        nlohmann::ordered_json q;
        q["quant_method"] = "fp8";
        q["fmt"] = "e4m3";
        if (c.scale_fmt_ue8m0) q["scale_fmt"] = "ue8m0";
        q["weight_block_size"] = {128, 128};
        q["activation_scheme"] = "dynamic";
        j["quantization_config"] = q;
    }
    return j.dump(1) + "\n";
}

SyntheticSummary write_synthetic_checkpoint(const ModelConfig& config, const SyntheticOptions& options,
                                            const std::string& dir) {
    check_writable(config);
    DSV4_CHECK(options.shards >= 1, "synthetic checkpoint: need at least one shard, got {}", options.shards);
    const fs::path target(dir);
    std::error_code ec;
    DSV4_CHECK(!fs::exists(target) || (fs::is_directory(target) && fs::is_empty(target)),
               "{} already exists and is not an empty directory: remove it or choose another output directory", dir);
    const std::string config_text = hub_config_json(config);  // before any file is written: it may refuse

    std::vector<Planned> plan = Planner(config).plan();

    // Shards: contiguous runs of the plan with about equal bytes; a tensor goes where its middle byte falls.
    uint64_t total = 0;
    for (const auto& p : plan) total += stored_bytes(p);
    std::vector<int> shard_of(plan.size());
    uint64_t before = 0;
    for (size_t i = 0; i < plan.size(); ++i) {
        const uint64_t b = stored_bytes(plan[i]);
        const long double middle = (long double)before + (long double)b / 2;
        shard_of[i] = std::min(options.shards - 1, int(middle * options.shards / std::max<long double>(total, 1)));
        before += b;
    }
    std::vector<int> used = shard_of;
    used.erase(std::unique(used.begin(), used.end()), used.end());  // non-decreasing: the distinct shards in order
    const int n_files = int(used.size());

    const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
    const fs::path staging = parent / (target.filename().string() + ".partial-" + std::to_string(::getpid()));
    fs::remove_all(staging, ec);
    fs::create_directories(staging, ec);
    DSV4_CHECK(!ec, "cannot create {}: {}", staging.string(), ec.message());

    SyntheticSummary summary;
    ThreadPool pool(options.threads);
    Generator generator(options.seed, pool);
    nlohmann::json weight_map = nlohmann::json::object();
    try {
        size_t next = 0;
        for (int f = 0; f < n_files; ++f) {
            const std::string file =
                n_files == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", f + 1, n_files);
            std::vector<Stored> stored;
            for (; next < plan.size() && shard_of[next] == used[size_t(f)]; ++next)
                for (auto& s : generator.generate(plan[next])) stored.push_back(std::move(s));
            std::vector<TensorToWrite> tensors;
            for (const auto& s : stored) {
                tensors.push_back({s.name, s.dtype, s.shape, s.bytes.data(), s.bytes.size()});
                weight_map[s.name] = file;
                summary.bytes += s.bytes.size();
            }
            summary.tensors += int64_t(stored.size());
            write_safetensors((staging / file).string(), tensors, {{"format", "pt"}});
            summary.files.push_back(file);
        }
        if (n_files > 1) {
            nlohmann::json index = {{"metadata", {{"total_size", summary.bytes}}}, {"weight_map", weight_map}};
            write_file_bytes((staging / "model.safetensors.index.json").string(), index.dump(1) + "\n");
        }
        write_file_bytes((staging / "config.json").string(), config_text);
        if (fs::exists(target)) fs::remove(target);  // the empty directory checked above
        fs::rename(staging, target);
    } catch (const fs::filesystem_error& e) {
        fs::remove_all(staging, ec);
        fail("cannot write the checkpoint to {}: {}", dir, e.what());
    } catch (...) {
        fs::remove_all(staging, ec);
        throw;
    }
    return summary;
}

}  // namespace dsv4
