// BenchWeights (bench_weights.h): the tables, the walk over the model and each format's tensor.
#include "model/bench_weights.h"

#include <algorithm>
#include <cmath>

#include "core/number_formats.h"

namespace dsv4 {

BenchWeights::BenchWeights(uint64_t seed, ThreadPool& pool) : seed_(seed), pool_(pool) {
    normal_.resize(kTable);
    const uint64_t key = mix64(seed ^ 0x6E6F726D616C73ull);
    for (int64_t i = 0; i < kTable; i += 2) {  // Box-Muller, a pair of samples per hash
        const uint64_t h = mix64(key + uint64_t(i));
        const double u1 = (double(h >> 32) + 0.5) * 0x1p-32, u2 = (double(h & 0xFFFFFFFFu) + 0.5) * 0x1p-32;
        const double r = std::sqrt(-2.0 * std::log(u1)), t = 6.283185307179586 * u2;
        normal_[size_t(i)] = float(r * std::cos(t));
        normal_[size_t(i + 1)] = float(r * std::sin(t));
    }
    fp8_.resize(kTable);
    fp4_.resize(kTable);
    for (int64_t i = 0; i < kTable; ++i) {
        fp8_[size_t(i)] = f32_to_e4m3(std::clamp(normal_[size_t(i)] * kFp8CodeStd, -448.0f, 448.0f));
        const float hi = normal_[size_t((i * 40503 + 12345) & (kTable - 1))];
        fp4_[size_t(i)] = uint8_t(f32_to_e2m1(normal_[size_t(i)] * kFp4CodeStd) | (f32_to_e2m1(hi * kFp4CodeStd) << 4));
    }
}

ModelWeights BenchWeights::build(const ModelConfig& c, ExpertRange held, ExpertBytes where) {
    counter_ = 0;
    ModelWeights w;
    const int64_t D = c.hidden_size, n = c.hc_mult;
    w.embed = bf16("embed.weight", c.vocab_size, D, 1.0);
    w.head = bf16("head.weight", c.vocab_size, D, 1.0 / std::sqrt(double(D)));
    w.norm = norm(D);
    w.hc_head = hc(n, 1, c);
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const std::string p = "layers." + std::to_string(l);
        const int64_t ratio = c.compress_ratios[size_t(l)];
        BlockWeights b;
        b.attn_norm = norm(D);
        b.ffn_norm = norm(D);
        b.hc_attn = hc((2 + n) * n, 3, c);
        b.hc_ffn = hc((2 + n) * n, 3, c);
        AttentionWeights& a = b.attn;
        const int64_t H = c.num_heads, d = c.head_dim, g = c.o_groups;
        a.attn_sink = normals(H, 0.5);
        a.wq_a = fp8(p + ".attn.wq_a", c.q_lora_rank, D);
        a.q_norm = norm(c.q_lora_rank);
        a.wq_b = fp8(p + ".attn.wq_b", H * d, c.q_lora_rank);
        a.wkv = fp8(p + ".attn.wkv", d, D);
        a.kv_norm = norm(d);
        a.wo_a = fp8(p + ".attn.wo_a", g * c.o_lora_rank, H * d / g);
        a.wo_b = fp8(p + ".attn.wo_b", D, g * c.o_lora_rank);
        if (ratio > 0) a.compressor = compressor(p + ".attn.compressor", ratio, d, c);
        if (ratio == 4) {
            IndexerWeights ix;
            ix.wq_b = fp8(p + ".attn.indexer.wq_b", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
            ix.weights_proj =
                bf16(p + ".attn.indexer.weights_proj.weight", c.index_n_heads, D, 1.0 / std::sqrt(double(D)));
            ix.compressor = compressor(p + ".attn.indexer.compressor", ratio, c.index_head_dim, c);
            a.indexer = std::move(ix);
        }
        MoeWeights& m = b.ffn;
        const int64_t E = c.n_routed_experts, I = c.moe_intermediate_size, k = c.num_experts_per_tok;
        m.gate = bf16(p + ".ffn.gate.weight", E, D, 1.0 / std::sqrt(double(D)));
        if (c.mlp_types[size_t(l)] == MlpType::kHashMoe)
            m.tid2eid = tid2eid(c.vocab_size, k, E);
        else
            m.gate_bias = normals(E, 0.1);
        for (int64_t e = 0; e < E; ++e) {
            const std::string x = p + ".ffn.experts." + std::to_string(e);
            const bool bytes = where == ExpertBytes::kHost && e >= held.first && e < held.first + held.count;
            auto key = [&](int projection) {
                return bytes ? std::optional(expert_key(seed_, l, e, projection)) : std::nullopt;
            };
            m.experts.push_back(
                {fp4(x + ".w1", I, D, key(0)), fp4(x + ".w2", D, I, key(1)), fp4(x + ".w3", I, D, key(2))});
        }
        m.shared = {fp8(p + ".ffn.shared_experts.w1", I, D), fp8(p + ".ffn.shared_experts.w2", D, I),
                    fp8(p + ".ffn.shared_experts.w3", I, D)};
        w.layers.push_back(std::move(b));
    }
    return w;
}

uint64_t BenchWeights::expert_key(uint64_t seed, int64_t layer, int64_t expert, int projection) {
    const uint64_t experts = mix64(seed ^ 0x6578706572747321ull);  // "experts!": apart from the counter's keys
    return mix64(mix64(experts + uint64_t(layer)) + 3 * uint64_t(expert) + uint64_t(projection));
}

uint8_t BenchWeights::expert_scale_byte(int64_t cols) {
    return e8m0_for(kFp4CodeStd, cols);
}

template <typename T>
void BenchWeights::fill(T* out, int64_t count, const std::vector<T>& table, uint64_t key) {
    constexpr int64_t kChunk = 1 << 16;  // a multiple of 4: every chunk starts at a hash boundary
    pool_.parallel_for((count + kChunk - 1) / kChunk, [&](int64_t c0, int64_t c1) {
        for (int64_t i = c0 * kChunk, end = std::min(count, c1 * kChunk); i < end; i += 4) {
            const uint64_t h = mix64(key + uint64_t(i));
            for (int64_t j = 0; j < 4 && i + j < end; ++j) out[i + j] = table[size_t((h >> (16 * j)) & 0xFFFF)];
        }
    });
}
template void BenchWeights::fill(uint8_t*, int64_t, const std::vector<uint8_t>&, uint64_t);
template void BenchWeights::fill(uint16_t*, int64_t, const std::vector<uint16_t>&, uint64_t);

uint64_t BenchWeights::next_key() {
    return mix64(seed_ * 0x100000001B3ull + 0x9E3779B97F4A7C15ull * ++counter_);
}

uint8_t* BenchWeights::take(size_t bytes) {
    owned_.push_back(std::make_unique_for_overwrite<uint8_t[]>(bytes));
    host_bytes_ += bytes;
    return owned_.back().get();
}

// Power-of-two scale so that code_std * scale is about 1/sqrt(fan_in); as an E8M0 byte.
uint8_t BenchWeights::e8m0_for(double code_std, int64_t fan_in) {
    const int e = int(std::lround(std::log2(1.0 / (code_std * std::sqrt(double(fan_in))))));
    return uint8_t(127 + e);
}

QuantizedMatrix BenchWeights::fp8(const std::string& name, int64_t rows, int64_t cols) {
    QuantizedMatrix m;
    m.name = name + ".weight";
    m.format = WeightFormat::kFp8Block;
    m.rows = rows;
    m.cols = cols;
    uint8_t* data = take(size_t(rows * cols));
    fill(data, rows * cols, fp8_, next_key());
    const int64_t bn = (rows + 127) / 128, bk = (cols + 127) / 128;
    uint8_t* scale = take(size_t(bn * bk));
    std::fill(scale, scale + bn * bk, e8m0_for(kFp8CodeStd, cols));
    m.data = data;
    m.scale = scale;
    m.scale_dtype = DType::kF8E8M0;
    m.scale_cols = bk;
    m.block_rows = m.block_cols = 128;
    return m;
}

QuantizedMatrix BenchWeights::fp4(const std::string& name, int64_t rows, int64_t cols, std::optional<uint64_t> key) {
    QuantizedMatrix m;
    m.name = name + ".weight";
    m.format = WeightFormat::kFp4Mx;
    m.rows = rows;
    m.cols = cols;
    m.scale_dtype = DType::kF8E8M0;
    m.scale_cols = cols / 32;
    m.block_rows = 1;
    m.block_cols = 32;
    if (!key) return m;
    uint8_t* data = take(size_t(rows * cols / 2));
    fill(data, rows * cols / 2, fp4_, *key);
    uint8_t* scale = take(size_t(rows * cols / 32));
    std::fill(scale, scale + rows * cols / 32, expert_scale_byte(cols));
    m.data = data;
    m.scale = scale;
    return m;
}

QuantizedMatrix BenchWeights::bf16(const std::string& name, int64_t rows, int64_t cols, double std) {
    std::vector<uint16_t> table(kTable);
    for (int64_t i = 0; i < kTable; ++i) table[size_t(i)] = f32_to_bf16(float(normal_[size_t(i)] * std));
    QuantizedMatrix m;
    m.name = name;
    m.format = WeightFormat::kBF16;
    m.rows = rows;
    m.cols = cols;
    auto* data = reinterpret_cast<uint16_t*>(take(size_t(rows * cols) * 2));
    fill(data, rows * cols, table, next_key());
    m.data = reinterpret_cast<const uint8_t*>(data);
    return m;
}

Vec BenchWeights::normals(int64_t count, double std) {
    Vec v(static_cast<size_t>(count));
    const uint64_t key = next_key();
    for (int64_t i = 0; i < count; ++i) v[size_t(i)] = float(normal_[mix64(key + uint64_t(i)) & 0xFFFF] * std);
    return v;
}

Vec BenchWeights::uniform(int64_t count, double lo, double hi) {
    Vec v(static_cast<size_t>(count));
    const uint64_t key = next_key();
    for (int64_t i = 0; i < count; ++i)
        v[size_t(i)] = float(lo + (hi - lo) * (double(mix64(key + uint64_t(i)) >> 11) * 0x1p-53));
    return v;
}

Vec BenchWeights::norm(int64_t count) {  // stored as BF16 by the Hub, decoded to f32 at load
    Vec v = uniform(count, 0.9, 1.1);
    for (float& x : v) x = round_bf16(x);
    return v;
}

HcWeights BenchWeights::hc(int64_t rows, int64_t scales, const ModelConfig& c) {
    const int64_t width = c.hc_mult * c.hidden_size;
    return {normals(rows * width, 1.0 / std::sqrt(double(width))), normals(rows, 0.5), uniform(scales, 0.5, 1.5)};
}

CompressorWeights BenchWeights::compressor(const std::string& p, int64_t ratio, int64_t head_dim,
                                           const ModelConfig& c) {
    CompressorWeights cw;
    cw.ratio = ratio;
    cw.head_dim = head_dim;
    cw.overlap = ratio == 4;
    const int64_t width = (cw.overlap ? 2 : 1) * head_dim, D = c.hidden_size;
    cw.wkv = bf16(p + ".wkv.weight", width, D, 1.0 / std::sqrt(double(D)));
    cw.wgate = bf16(p + ".wgate.weight", width, D, 1.0 / std::sqrt(double(D)));
    cw.ape = normals(ratio * width, 0.5);
    cw.norm = norm(head_dim);
    return cw;
}

// k distinct experts per vocabulary row.
std::vector<int32_t> BenchWeights::tid2eid(int64_t vocab, int64_t k, int64_t experts) {
    std::vector<int32_t> t(size_t(vocab * k));
    const uint64_t key = next_key();
    pool_.parallel_for(vocab, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            uint64_t draw = 0;
            for (int64_t j = 0; j < k; ++j) {
                int32_t e;
                do {
                    e = int32_t(mix64(key + uint64_t(r) * 1024 + draw++) % uint64_t(experts));
                } while (std::find(&t[size_t(r * k)], &t[size_t(r * k + j)], e) != &t[size_t(r * k + j)]);
                t[size_t(r * k + j)] = e;
            }
        }
    });
    return t;
}

}  // namespace dsv4
