// The device compressor vs the CPU reference: dsv4::CompressorState / compressor_step (src/model/compressor.cpp)
// plus the finishing steps of run_compressor (src/model/attention.cpp, model numerics), transcribed below.
// CSA (ratio 4, overlap) main and indexer, HCA (ratio 128) main, a tiny HCA; every split point of a short
// sequence gives bitwise identical packed entries and state; two sequences in one launch; kv and score read as
// column ranges of one wider buffer, as the executor stacks its projections. Shapes of small models
// too: an odd nope part (one pad byte in the entry), a head_dim above 1024, an entry that is all rope, indexer dims
// 4, 16 and 256, and an indexer whose keys are all rotary (index_head_dim == qk_rope_head_dim: no non-rotary part).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/cpu/norms.h"
#include "kernels/cpu/quant_sim.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/compressor/compressor.h"
#include "kernels/cuda/compressor/kv_entry_layout.h"
#include "model/compressor.h"

namespace dsv4 {
namespace {

using gpu_test::Rng;
constexpr float kEps = 1e-6f;

struct Setup {
    int d, rope, ratio;
    cuda::CompressorKind kind;
    int length;
};

struct Inputs {
    CompressorWeights w;
    cpu::RopeTable rope;
    std::vector<float> kv, score;  // [length, width]
    int width;
};

Inputs make_inputs(Rng& rng, const Setup& s) {
    Inputs in;
    in.w.ratio = s.ratio;
    in.w.head_dim = s.d;
    in.w.overlap = s.ratio == 4;
    in.width = (in.w.overlap ? 2 : 1) * s.d;
    in.w.ape.resize(size_t(s.ratio) * in.width);
    for (float& a : in.w.ape) a = rng.normal(0.5f);
    in.w.norm.resize(size_t(s.d));
    for (float& n : in.w.norm) n = 1.0f + rng.normal(0.2f);
    RopeParams rp;
    rp.theta = 160000.0;
    rp.yarn = YarnParams{16.0, 65536, 32.0, 1.0};
    in.rope = cpu::make_rope_table(s.rope, rp);
    in.kv.resize(size_t(s.length) * in.width);
    in.score.resize(in.kv.size());
    for (float& v : in.kv) v = rng.normal(1.0f);
    for (float& v : in.score) v = rng.normal(1.5f);
    return in;
}

// CPU: the token-by-token state machine and run_compressor's finishing steps in model numerics.
std::vector<std::vector<float>> cpu_entries(const Setup& s, const Inputs& in, CompressorState& state) {
    state.init(in.w);
    std::vector<std::vector<float>> out;
    std::vector<float> e(static_cast<size_t>(s.d));
    for (int t = 0; t < s.length; ++t) {
        if (!compressor_step(state, in.w, t, in.kv.data() + int64_t(t) * in.width,
                             in.score.data() + int64_t(t) * in.width, e.data()))
            continue;
        cpu::round_bf16(e.data(), s.d);
        cpu::rms_norm(e.data(), in.w.norm.data(), s.d, kEps, e.data());
        cpu::round_bf16(e.data(), s.d);
        cpu::apply_rope(e.data() + s.d - s.rope, in.rope, t + 1 - s.ratio);
        cpu::round_bf16(e.data() + s.d - s.rope, s.rope);
        if (s.kind == cuda::CompressorKind::kMain) {
            const int nope = s.d - s.rope;
            for (int b = 0; b < nope; b += 64) cpu::fp8_round_trip(e.data() + b, std::min(64, nope - b), std::min(64, nope - b));
        } else {
            cpu::hadamard_transform(e.data(), s.d);
            cpu::round_bf16(e.data(), s.d);
            for (int b = 0; b < s.d; b += 32) cpu::fp4_round_trip(e.data() + b, std::min(32, s.d - b), std::min(32, s.d - b));
        }
        out.push_back(e);
    }
    return out;
}

// Host decoding of a packed entry (kv_entry_layout.h); scale[i] gets the scale of value i (0 for bf16 values).
std::vector<float> decode(const Setup& s, const uint8_t* b, std::vector<float>* scale) {
    std::vector<float> v(static_cast<size_t>(s.d));
    scale->assign(size_t(s.d), 0.0f);
    if (s.kind == cuda::CompressorKind::kMain) {
        const auto L = cuda::main_entry_layout(s.d, s.rope);
        for (int i = 0; i < L.nope; ++i) {
            (*scale)[size_t(i)] = e8m0_to_f32(b[L.scale_offset() + i / 64]);
            v[size_t(i)] = e4m3_to_f32(b[i]) * (*scale)[size_t(i)];
        }
        for (int i = 0; i < L.rope; ++i)
            v[size_t(L.nope + i)] = bf16_to_f32(uint16_t(b[L.rope_offset() + 2 * i] | (b[L.rope_offset() + 2 * i + 1] << 8)));
    } else {
        const cuda::IndexEntryLayout L{s.d};
        for (int i = 0; i < s.d; ++i) {
            (*scale)[size_t(i)] = e8m0_to_f32(b[L.scale_offset() + i / 32]);
            v[size_t(i)] = e2m1_to_f32(uint8_t((b[i / 2] >> (4 * (i % 2))) & 0xF)) * (*scale)[size_t(i)];
        }
    }
    return v;
}

struct GpuResult {
    std::vector<std::vector<uint8_t>> entries;  // per sequence: entries in logical order, packed
    std::vector<float> state_kv, state_score;
};

// Feeds `seqs` sequences (same setup, own inputs) through the device compressor; chunk c of every sequence covers
// positions [cuts[c], cuts[c + 1]) and all sequences' chunks go into one launch.
GpuResult run_gpu(const Setup& s, const std::vector<const Inputs*>& seqs, const std::vector<int>& cuts) {
    const int n = int(seqs.size()), width = seqs[0]->width, slots = (s.ratio == 4 ? 2 : 1) * s.ratio;
    const int entries = s.length / s.ratio, page_size = 3, max_pages = std::max(1, (entries + page_size - 1) / page_size);
    const int64_t entry_bytes = s.kind == cuda::CompressorKind::kMain ? cuda::main_entry_layout(s.d, s.rope).bytes()
                                                                       : cuda::IndexEntryLayout{s.d}.bytes();
    // Pages of all sequences shuffled over one pool.
    std::vector<int32_t> pages(size_t(n) * max_pages);
    std::iota(pages.begin(), pages.end(), 0);
    std::reverse(pages.begin(), pages.end());
    auto d_pages = gpu_test::to_device(pages);
    auto d_pool = gpu_test::poisoned<uint8_t>(size_t(n) * max_pages * page_size * entry_bytes);
    std::vector<float> init_kv(size_t(n) * slots * width, 0.0f), init_score(init_kv.size(), -INFINITY);
    auto d_state_kv = gpu_test::to_device(init_kv);
    auto d_state_score = gpu_test::to_device(init_score);
    auto d_ape = gpu_test::to_device(seqs[0]->w.ape);
    auto d_norm = gpu_test::to_device(seqs[0]->w.norm);
    auto d_freq = gpu_test::to_device(seqs[0]->rope.inv_freq);

    // The chunk's projections as the executor lays them out: kv and score are column ranges of one buffer (columns
    // [0, width) and [width + 1, 2 width + 1) of rows of 2 width + 3 floats; the gaps hold NaN).
    const int64_t row_stride = 2 * int64_t(width) + 3, score_column = width + 1;
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
        const int begin = cuts[c], len = cuts[c + 1] - cuts[c];
        std::vector<float> projections;
        std::vector<int32_t> token_seq, first, tokens, start, state;
        for (int q = 0; q < n; ++q) {
            first.push_back(int32_t(token_seq.size()));
            tokens.push_back(len);
            start.push_back(begin);
            state.push_back(q);
            for (int t = begin; t < begin + len; ++t) {
                token_seq.push_back(q);
                const size_t row = projections.size();
                projections.resize(row + size_t(row_stride), NAN);
                std::copy_n(seqs[size_t(q)]->kv.begin() + int64_t(t) * width, width, projections.begin() + row);
                std::copy_n(seqs[size_t(q)]->score.begin() + int64_t(t) * width, width,
                            projections.begin() + row + score_column);
            }
        }
        auto d_projections = gpu_test::to_device(projections);
        auto d_token_seq = gpu_test::to_device(token_seq);
        auto d_first = gpu_test::to_device(first);
        auto d_tokens = gpu_test::to_device(tokens);
        auto d_start = gpu_test::to_device(start);
        auto d_state = gpu_test::to_device(state);
        cuda::CompressorParams p;
        p.kv = d_projections.get();
        p.score = d_projections.get() + score_column;
        p.row_stride = row_stride;
        p.token_seq = d_token_seq.get();
        p.seq_first_row = d_first.get();
        p.seq_tokens = d_tokens.get();
        p.seq_start_position = d_start.get();
        p.seq_state = d_state.get();
        p.ape = d_ape.get();
        p.norm_weight = d_norm.get();
        p.rope_inv_freq = d_freq.get();
        p.state_kv = d_state_kv.get();
        p.state_score = d_state_score.get();
        p.cache = d_pool.get();
        p.page_table = d_pages.get();
        p.max_pages = max_pages;
        p.page_size = page_size;
        p.tokens = int32_t(token_seq.size());
        p.seqs = n;
        p.head_dim = s.d;
        p.rope_dim = s.rope;
        p.ratio = s.ratio;
        p.eps = kEps;
        p.kind = s.kind;
        cuda::compressor(p, nullptr);
        DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    }
    GpuResult r;
    const std::vector<uint8_t> pool = gpu_test::to_host(d_pool);
    for (int q = 0; q < n; ++q) {
        std::vector<uint8_t> seq_entries;
        for (int e = 0; e < entries; ++e) {
            const int64_t row = int64_t(pages[size_t(q * max_pages + e / page_size)]) * page_size + e % page_size;
            seq_entries.insert(seq_entries.end(), pool.begin() + row * entry_bytes, pool.begin() + (row + 1) * entry_bytes);
        }
        r.entries.push_back(seq_entries);
    }
    r.state_kv = gpu_test::to_host(d_state_kv);
    r.state_score = gpu_test::to_host(d_state_score);
    return r;
}

// GPU entries vs the CPU reference. The only arithmetic that differs is libm (expf in the pooling, cos/sin in
// RoPE: a few f32 ulps). Such a difference survives a bf16 rounding only near a midpoint, and then moves the value
// one bf16 ulp; the FP8/FP4 rounding after it moves at most one quantum of the final grid (at the larger of the two
// block scales, which may itself flip). RoPE mixes two bf16 values that may each be one ulp off with cos/sin
// off by ulps: two bf16 ulps. Reports how many elements are bit-identical.
void compare_with_cpu(const Setup& s, const std::vector<std::vector<float>>& want, const std::vector<uint8_t>& got,
                      const char* what) {
    const int64_t entry_bytes = s.kind == cuda::CompressorKind::kMain ? cuda::main_entry_layout(s.d, s.rope).bytes()
                                                                       : cuda::IndexEntryLayout{s.d}.bytes();
    ASSERT_EQ(int64_t(want.size()) * entry_bytes, int64_t(got.size())) << what;
    gpu_test::Worst worst(what);
    int64_t identical = 0, total = 0;
    for (size_t e = 0; e < want.size(); ++e) {
        std::vector<float> scale;
        const std::vector<float> v = decode(s, got.data() + e * entry_bytes, &scale);
        for (int i = 0; i < s.d; ++i) {
            const float a = v[size_t(i)], b = want[e][size_t(i)];
            double tol;
            const bool rope = s.kind == cuda::CompressorKind::kMain && i >= s.d - s.rope;
            if (rope) {
                tol = 2.0 * std::ldexp(1.0, std::ilogb(std::max({std::fabs(a), std::fabs(b), 1e-30f})) - 7);
            } else {
                // Quantum of the final grid at the larger scale: e4m3 (3 mantissa bits, min exponent -6) or
                // e2m1 (1 mantissa bit, min exponent 0), relative to the block scale.
                const double sc = 2.0 * scale[size_t(i)];  // the CPU block's scale may be twice as large
                const double m = std::max(std::fabs(a), std::fabs(b)) / sc;
                const bool fp8 = s.kind == cuda::CompressorKind::kMain;
                const int ex = std::max(m > 0 ? std::ilogb(m) : -127, fp8 ? -6 : 0);
                tol = sc * std::ldexp(1.0, ex - (fp8 ? 3 : 1));
            }
            identical += float_bits(a) == float_bits(b);
            ++total;
            worst.add(int64_t(e) * s.d + i, a, b, tol);
        }
    }
    std::printf("[ identical] %s: %lld of %lld entry values bit-identical to the CPU reference\n", what,
                (long long)identical, (long long)total);
    worst.expect_ok();
}

void run_setup(const Setup& s) {
    Rng rng;
    const Inputs in = make_inputs(rng, s);
    CompressorState cpu_state;
    const auto want = cpu_entries(s, in, cpu_state);
    ASSERT_EQ(int(want.size()), s.length / s.ratio);

    const GpuResult whole = run_gpu(s, {&in}, {0, s.length});
    char what[128];
    std::snprintf(what, sizeof what, "compressor %s d %d ratio %d length %d",
                  s.kind == cuda::CompressorKind::kMain ? "main" : "indexer", s.d, s.ratio, s.length);
    compare_with_cpu(s, want, whole.entries[0], what);
    // The state holds copies and score + ape sums only: bitwise equal to the CPU's.
    gpu_test::expect_bitwise_f32(std::string(what) + " state kv", whole.state_kv, cpu_state.kv);
    gpu_test::expect_bitwise_f32(std::string(what) + " state score", whole.state_score, cpu_state.score);

    // Chunk invariance: every single split point, then a ragged split into many chunks (decode-like steps).
    const int step = s.length > 64 ? 7 : 1;
    int64_t splits = 0;
    for (int cut = 1; cut < s.length; cut += step) {
        const GpuResult split = run_gpu(s, {&in}, {0, cut, s.length});
        ASSERT_TRUE(split.entries[0] == whole.entries[0]) << what << ": split at " << cut << " changes the entries";
        ASSERT_TRUE(split.state_kv == whole.state_kv) << what << ": split at " << cut;
        ASSERT_TRUE(split.state_score == whole.state_score) << what << ": split at " << cut;
        ++splits;
    }
    std::vector<int> ragged = {0};
    while (ragged.back() < s.length) ragged.push_back(std::min(s.length, ragged.back() + 1 + int(rng.engine()() % 9)));
    const GpuResult many = run_gpu(s, {&in}, ragged);
    EXPECT_TRUE(many.entries[0] == whole.entries[0]) << what << ": ragged chunks change the entries";
    std::printf("[ bitwise  ] %s: %lld two-chunk splits and %zu ragged chunks give identical entries and state\n",
                what, (long long)splits, ragged.size() - 1);

    // Two sequences in one launch give each its own single-sequence result.
    Inputs other = make_inputs(rng, s);  // another sequence of the same layer: same weights, own projections
    other.w = in.w;
    other.rope = in.rope;
    const GpuResult pair = run_gpu(s, {&in, &other}, {0, s.length / 2 + 1, s.length});
    const GpuResult alone = run_gpu(s, {&other}, {0, s.length});
    EXPECT_TRUE(pair.entries[0] == whole.entries[0]) << what << ": batched with another sequence";
    EXPECT_TRUE(pair.entries[1] == alone.entries[0]) << what << ": the second sequence of the batch";
}

TEST(CompressorGpu, CsaMainEveryGapAndSplit) {
    DSV4_REQUIRE_GPU();
    run_setup({512, 64, 4, cuda::CompressorKind::kMain, 37});
}
TEST(CompressorGpu, CsaIndexerKeys) {
    DSV4_REQUIRE_GPU();
    run_setup({128, 64, 4, cuda::CompressorKind::kIndexer, 37});
    run_setup({32, 16, 4, cuda::CompressorKind::kIndexer, 23});
}
TEST(CompressorGpu, HcaMain) {
    DSV4_REQUIRE_GPU();
    run_setup({512, 64, 128, cuda::CompressorKind::kMain, 300});
}
TEST(CompressorGpu, TinyHca) {
    DSV4_REQUIRE_GPU();
    run_setup({96, 32, 16, cuda::CompressorKind::kMain, 53});
}
TEST(CompressorGpu, SmallModelShapes) {
    DSV4_REQUIRE_GPU();
    run_setup({33, 16, 4, cuda::CompressorKind::kMain, 37});
    run_setup({64, 32, 16, cuda::CompressorKind::kMain, 53});
    run_setup({1100, 64, 4, cuda::CompressorKind::kMain, 23});
    run_setup({32, 32, 16, cuda::CompressorKind::kMain, 53});  // head_dim == rope dim: no FP8 part
    run_setup({16, 16, 4, cuda::CompressorKind::kIndexer, 23});
    run_setup({4, 2, 4, cuda::CompressorKind::kIndexer, 23});
    run_setup({256, 64, 4, cuda::CompressorKind::kIndexer, 23});
}

}  // namespace
}  // namespace dsv4
