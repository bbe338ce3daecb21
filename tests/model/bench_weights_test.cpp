// BenchWeights (model/bench_weights.h): the host fill against the scalar rule table[table_index(key, i)] (any count,
// across the fill's parallel chunks), routed experts against their pure keys and scale byte (what a GPU generates),
// the other tensors' bytes independent of which experts are held and where their bytes are made, and kDevice
// leaving the experts without host bytes. On the tiny preset with 2 layers.
#include "model/bench_weights.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "model/synthetic_checkpoint.h"

namespace dsv4 {
namespace {

constexpr uint64_t kSeed = 11;

std::vector<uint8_t> bytes_of(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    return std::vector<uint8_t>(b, b + n);
}

// Every byte of a matrix (data, then scales) in its stored format; empty without bytes.
std::vector<uint8_t> matrix_bytes(const QuantizedMatrix& m) {
    if (!m.data) return {};
    const size_t n = size_t(m.rows * m.cols);
    switch (m.format) {
        case WeightFormat::kBF16:
            return bytes_of(m.data, 2 * n);
        case WeightFormat::kFp8Block: {
            std::vector<uint8_t> b = bytes_of(m.data, n);
            const std::vector<uint8_t> s = bytes_of(m.scale, size_t((m.rows + 127) / 128 * m.scale_cols));
            b.insert(b.end(), s.begin(), s.end());
            return b;
        }
        case WeightFormat::kFp4Mx: {
            std::vector<uint8_t> b = bytes_of(m.data, n / 2);
            const std::vector<uint8_t> s = bytes_of(m.scale, size_t(m.rows * m.scale_cols));
            b.insert(b.end(), s.begin(), s.end());
            return b;
        }
        default:
            ADD_FAILURE() << m.name << ": a format BenchWeights does not make";
            return {};
    }
}

// Every tensor but the routed experts, in a fixed order, as bytes.
std::vector<std::vector<uint8_t>> non_expert_bytes(const ModelWeights& w) {
    std::vector<std::vector<uint8_t>> out;
    auto vec = [&](const Vec& v) { out.push_back(bytes_of(v.data(), v.size() * sizeof(float))); };
    auto mat = [&](const QuantizedMatrix& m) { out.push_back(matrix_bytes(m)); };
    auto hc = [&](const HcWeights& h) {
        for (const Vec* v : {&h.fn, &h.base, &h.scale}) vec(*v);
    };
    auto compressor = [&](const CompressorWeights& c) {
        mat(c.wkv);
        mat(c.wgate);
        vec(c.ape);
        vec(c.norm);
    };
    mat(w.embed);
    mat(w.head);
    vec(w.norm);
    hc(w.hc_head);
    for (const BlockWeights& b : w.layers) {
        for (const Vec* v :
             {&b.attn_norm, &b.ffn_norm, &b.attn.attn_sink, &b.attn.q_norm, &b.attn.kv_norm, &b.ffn.gate_bias})
            vec(*v);
        hc(b.hc_attn);
        hc(b.hc_ffn);
        const AttentionWeights& a = b.attn;
        for (const QuantizedMatrix* m : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_a, &a.wo_b, &b.ffn.gate, &b.ffn.shared.w1,
                                         &b.ffn.shared.w2, &b.ffn.shared.w3})
            mat(*m);
        if (a.compressor) compressor(*a.compressor);
        if (a.indexer) {
            mat(a.indexer->wq_b);
            mat(a.indexer->weights_proj);
            compressor(a.indexer->compressor);
        }
        out.push_back(bytes_of(b.ffn.tid2eid.data(), b.ffn.tid2eid.size() * sizeof(int32_t)));
    }
    return out;
}

const QuantizedMatrix& projection(const ExpertWeights& e, int p) {
    return p == 0 ? e.w1 : (p == 1 ? e.w2 : e.w3);
}

TEST(BenchWeights, HostFillIsTheScalarRule) {
    ThreadPool pool(2);
    BenchWeights bw(kSeed, pool);
    std::vector<uint16_t> identity(BenchWeights::kTable);  // the fill then writes table_index itself
    std::iota(identity.begin(), identity.end(), uint16_t(0));
    const std::vector<uint8_t>& fp4 = bw.fp4_table();
    ASSERT_EQ(int64_t(fp4.size()), BenchWeights::kTable);
    const uint64_t key = 0x0123456789ABCDEFull;
    for (int64_t count :
         {int64_t(0), int64_t(1), int64_t(3), int64_t(4), int64_t(5), int64_t(4099), int64_t(3 * 65536 + 7)}) {
        std::vector<uint16_t> index(static_cast<size_t>(count));
        std::vector<uint8_t> bytes(static_cast<size_t>(count));
        bw.fill(index.data(), count, identity, key);
        bw.fill(bytes.data(), count, fp4, key);
        int64_t bad = 0;
        for (int64_t i = 0; i < count; ++i) {
            const int64_t t = BenchWeights::table_index(key, i);
            bad += index[size_t(i)] != t || bytes[size_t(i)] != fp4[size_t(t)];
        }
        EXPECT_EQ(bad, 0) << "count " << count;
    }
}

TEST(BenchWeights, ExpertsFollowTheirKeys) {
    const ModelConfig c = synthetic_preset("tiny", 2);
    ThreadPool pool(2);
    BenchWeights bw(kSeed, pool);
    const ModelWeights w = bw.build(c, {0, c.n_routed_experts}, ExpertBytes::kHost);
    for (int64_t l = 0; l < c.num_layers; ++l)
        for (int64_t e = 0; e < c.n_routed_experts; ++e)
            for (int p = 0; p < 3; ++p) {
                const QuantizedMatrix& m = projection(w.layers[size_t(l)].ffn.experts[size_t(e)], p);
                ASSERT_EQ(m.format, WeightFormat::kFp4Mx);
                ASSERT_TRUE(m.data && m.scale) << m.name;
                const uint64_t key = BenchWeights::expert_key(kSeed, l, e, p);
                int64_t bad = 0;
                for (int64_t i = 0; i < m.rows * m.cols / 2; ++i)
                    bad += m.data[i] != bw.fp4_table()[size_t(BenchWeights::table_index(key, i))];
                for (int64_t i = 0; i < m.rows * m.scale_cols; ++i)
                    bad += m.scale[i] != BenchWeights::expert_scale_byte(m.cols);
                EXPECT_EQ(bad, 0) << m.name;
            }
}

TEST(BenchWeights, HeldExpertsIndependentOfTheShare) {
    const ModelConfig c = synthetic_preset("tiny", 2);
    ThreadPool pool(2);
    BenchWeights bw(kSeed, pool);
    const ModelWeights all = bw.build(c, {0, c.n_routed_experts}, ExpertBytes::kHost);
    const ExpertRange held = expert_range(c.n_routed_experts, 0, 2);
    const ModelWeights half = bw.build(c, held, ExpertBytes::kHost);
    for (int64_t l = 0; l < c.num_layers; ++l)
        for (int64_t e = 0; e < c.n_routed_experts; ++e)
            for (int p = 0; p < 3; ++p) {
                const QuantizedMatrix& one = projection(all.layers[size_t(l)].ffn.experts[size_t(e)], p);
                const QuantizedMatrix& rank = projection(half.layers[size_t(l)].ffn.experts[size_t(e)], p);
                if (e < held.first + held.count)
                    EXPECT_EQ(matrix_bytes(rank), matrix_bytes(one)) << rank.name;
                else
                    EXPECT_TRUE(rank.data == nullptr && rank.scale == nullptr) << rank.name << " is not held";
            }
}

TEST(BenchWeights, OtherTensorsIndependentOfHeldAndWhere) {
    const ModelConfig c = synthetic_preset("tiny", 2);
    ThreadPool pool(2);
    BenchWeights bw(kSeed, pool);
    const auto want = non_expert_bytes(bw.build(c, {0, c.n_routed_experts}, ExpertBytes::kHost));
    const ExpertRange second = expert_range(c.n_routed_experts, 1, 2);
    for (ExpertBytes where : {ExpertBytes::kHost, ExpertBytes::kDevice})
        for (ExpertRange held : {ExpertRange{0, c.n_routed_experts}, second}) {
            const auto got = non_expert_bytes(bw.build(c, held, where));
            ASSERT_EQ(got.size(), want.size());
            for (size_t i = 0; i < got.size(); ++i)
                EXPECT_EQ(got[i], want[i]) << "tensor " << i << ", experts from " << held.first
                                           << (where == ExpertBytes::kHost ? " (host)" : " (device)");
        }
    // A different seed changes them: the comparison sees values.
    BenchWeights other(kSeed + 1, pool);
    EXPECT_NE(non_expert_bytes(other.build(c, {0, c.n_routed_experts}, ExpertBytes::kHost)), want);
}

TEST(BenchWeights, DeviceLeavesExpertsWithoutBytes) {
    const ModelConfig c = synthetic_preset("tiny", 2);
    ThreadPool pool(2);
    BenchWeights host(kSeed, pool), device(kSeed, pool);
    const ModelWeights h = host.build(c, {0, c.n_routed_experts}, ExpertBytes::kHost);
    const ModelWeights d = device.build(c, {0, c.n_routed_experts}, ExpertBytes::kDevice);
    uint64_t expert_bytes = 0;
    for (int64_t l = 0; l < c.num_layers; ++l)
        for (int64_t e = 0; e < c.n_routed_experts; ++e)
            for (int p = 0; p < 3; ++p) {
                const QuantizedMatrix& want = projection(h.layers[size_t(l)].ffn.experts[size_t(e)], p);
                const QuantizedMatrix& got = projection(d.layers[size_t(l)].ffn.experts[size_t(e)], p);
                EXPECT_TRUE(got.data == nullptr && got.scale == nullptr) << got.name;
                EXPECT_EQ(got.name, want.name);
                EXPECT_EQ(got.format, WeightFormat::kFp4Mx);
                EXPECT_EQ(got.rows, want.rows);
                EXPECT_EQ(got.cols, want.cols);
                EXPECT_EQ(got.scale_cols, want.cols / 32);
                EXPECT_EQ(got.block_cols, 32);
                expert_bytes += matrix_bytes(want).size();
            }
    EXPECT_EQ(device.host_bytes() + expert_bytes, host.host_bytes());
}

}  // namespace
}  // namespace dsv4
