// Lightning-indexer scores and top-k on the device vs a transcription of indexer_scores and top_k in
// src/model/attention.cpp (model numerics). The queries and keys are FP4 values times power-of-two block scales,
// so every q.k dot product is exact in f32 whatever the summation order (checked below on the test data): the
// scores must then be bitwise equal, and the top-k (ties to the lower index, best first) identical. Both score
// paths are covered: tensor cores (dim 32 .. 128, <= 64 heads) and the generic kernel (other power-of-two dims, more
// heads); top-k beyond 1024 (its candidates in dynamic shared memory) too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "gpu_test_util.h"
#include "kernels/cpu/quant_sim.h"
#include "kernels/cuda/attention_slots/attention_slots.h"
#include "kernels/cuda/compressor/kv_entry_layout.h"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/quant/quant.h"

namespace dsv4 {
namespace {

using gpu_test::Rng;

// FP4 round trip per 32-block; a dim below 32 is one partial block (Precision::indexer_rotate_fp4).
void fp4_blocks(float* x, int dim) {
    for (int b = 0; b < dim; b += 32) cpu::fp4_round_trip(x + b, std::min(32, dim - b), std::min(32, dim - b));
}

// Hadamard -> bf16 -> FP4 round trip (Precision::indexer_rotate_fp4) of a normal vector.
std::vector<float> rotated_fp4(Rng& rng, int dim, float stddev) {
    std::vector<float> x = rng.normal_bf16(dim, stddev);
    cpu::hadamard_transform(x.data(), dim);
    cpu::round_bf16(x.data(), dim);
    fp4_blocks(x.data(), dim);
    return x;
}

// Packs FP4-round-tripped values (kv_entry_layout.h): the block scale is the one fp4_round_trip chose.
std::vector<uint8_t> pack_index_entry(const std::vector<float>& x, const std::vector<float>& pre) {
    const int dim = int(x.size());
    const cuda::IndexEntryLayout L{dim};
    std::vector<uint8_t> b(size_t(L.bytes()), 0);
    for (int blk = 0; blk < L.scales(); ++blk) {
        const int end = std::min(dim, blk * 32 + 32);
        float amax = 0.0f;
        for (int i = blk * 32; i < end; ++i) amax = std::max(amax, std::fabs(pre[size_t(i)]));
        const float s = ue8m0_ceil_pow2(std::max(amax, kE2M1Max * std::ldexp(1.0f, -126)) * (1.0f / kE2M1Max));
        b[size_t(L.scale_offset() + blk)] = uint8_t((float_bits(s) >> 23) & 0xFF);
        for (int i = blk * 32; i < end; ++i) {
            const uint8_t nib = f32_to_e2m1(x[size_t(i)] / s);
            EXPECT_EQ(e2m1_to_f32(nib) * s, x[size_t(i)]) << "test packer";
            b[size_t(i / 2)] |= uint8_t(nib << (4 * (i % 2)));
        }
    }
    return b;
}

// indexer_scores (src/model/attention.cpp), model numerics.
void cpu_scores(const float* q, const float* hw, const std::vector<std::vector<float>>& keys, int visible, int heads,
                int dim, float* scores, int64_t* inexact_dots) {
    for (int w = 0; w < visible; ++w) {
        const float* k = keys[size_t(w)].data();
        float total = 0.0f;
        for (int h = 0; h < heads; ++h) {
            const float* qh = q + h * dim;
            float dot = 0.0f;
            double exact = 0.0;
            for (int i = 0; i < dim; ++i) {
                dot += qh[i] * k[i];
                exact += double(qh[i]) * double(k[i]);
            }
            *inexact_dots += double(dot) != exact;
            total += round_bf16(std::max(round_bf16(dot), 0.0f) * hw[h]);
        }
        scores[w] = round_bf16(total);
    }
}

// top_k (src/model/attention.cpp): highest first, ties to the lower index.
std::vector<int32_t> cpu_top_k(const float* scores, int count, int k) {
    std::vector<int32_t> order(static_cast<size_t>(count));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
    });
    order.resize(size_t(k));
    return order;
}

// The top-k's parameters over device buffers (no key list).
cuda::IndexerTopkParams topk_params(const uint16_t* scores, const int32_t* positions, int32_t* selected, int tokens,
                                    int ratio, int max_visible, int topk) {
    cuda::IndexerTopkParams tp;
    tp.scores = scores;
    tp.token_position = positions;
    tp.selected = selected;
    tp.tokens = tokens;
    tp.ratio = ratio;
    tp.max_visible = max_visible;
    tp.topk = topk;
    return tp;
}

struct Case {
    int heads, dim, topk;
    std::vector<int32_t> positions;  // one per query token
};

void run_case(const Case& c) {
    Rng rng;
    const int tokens = int(c.positions.size()), ratio = 4;
    int max_visible = 0;
    for (int32_t pos : c.positions) max_visible = std::max(max_visible, (pos + 1) / ratio);
    const int entries = std::max(1, max_visible), page_size = 64;
    const int max_pages = (entries + page_size - 1) / page_size;
    const int64_t eb = cuda::IndexEntryLayout{c.dim}.bytes();

    // Keys in a paged pool (pages in reverse order), with magnitudes varying from key to key.
    std::vector<int32_t> pages(static_cast<size_t>(max_pages));
    std::iota(pages.begin(), pages.end(), 0);
    std::reverse(pages.begin(), pages.end());
    std::vector<uint8_t> pool(size_t(max_pages) * page_size * eb, 0);
    std::vector<std::vector<float>> keys(static_cast<size_t>(entries));
    for (int e = 0; e < entries; ++e) {
        Rng* r = &rng;
        std::vector<float> pre = r->normal_bf16(c.dim, std::exp(rng.normal(0.5f)));
        std::vector<float> x = pre;
        cpu::hadamard_transform(x.data(), c.dim);
        cpu::round_bf16(x.data(), c.dim);
        const std::vector<float> rotated = x;
        fp4_blocks(x.data(), c.dim);
        keys[size_t(e)] = x;
        const auto bytes = pack_index_entry(x, rotated);
        const int64_t row = int64_t(pages[size_t(e / page_size)]) * page_size + e % page_size;
        std::copy(bytes.begin(), bytes.end(), pool.begin() + row * eb);
    }
    std::vector<float> q, hw;
    for (int t = 0; t < tokens; ++t)
        for (int h = 0; h < c.heads; ++h) {
            const auto v = rotated_fp4(rng, c.dim, 1.0f);
            q.insert(q.end(), v.begin(), v.end());
            hw.push_back(round_bf16(rng.normal(1.0f) * float(std::pow(c.dim, -0.5) * std::pow(c.heads, -0.5))));
        }
    std::vector<int32_t> state(size_t(tokens), 0);

    auto d_q = gpu_test::to_device(gpu_test::to_bf16(q));
    auto d_hw = gpu_test::to_device(gpu_test::to_bf16(hw));
    auto d_pool = gpu_test::to_device(pool);
    auto d_pages = gpu_test::to_device(pages);
    auto d_state = gpu_test::to_device(state);
    auto d_pos = gpu_test::to_device(c.positions);
    auto d_scores = gpu_test::poisoned<uint16_t>(size_t(tokens) * max_visible);
    auto d_sel = gpu_test::poisoned<int32_t>(size_t(tokens) * c.topk);
    cuda::IndexerScoresParams sp;
    sp.q = d_q.get();
    sp.head_weights = d_hw.get();
    sp.keys = d_pool.get();
    sp.page_table = d_pages.get();
    sp.token_state = d_state.get();
    sp.token_position = d_pos.get();
    sp.scores = d_scores.get();
    sp.tokens = tokens;
    sp.heads = c.heads;
    sp.dim = c.dim;
    sp.ratio = ratio;
    sp.max_visible = max_visible;
    sp.max_pages = max_pages;
    sp.page_size = page_size;
    const cuda::IndexerTopkParams tp =
        topk_params(d_scores.get(), d_pos.get(), d_sel.get(), tokens, ratio, max_visible, c.topk);
    cuda::Event start, mid, stop;
    start.record(nullptr);
    cuda::indexer_scores(sp, nullptr);
    mid.record(nullptr);
    cuda::indexer_topk(tp, nullptr);
    stop.record(nullptr);
    const float ms_scores = mid.elapsed_since(start), ms_topk = stop.elapsed_since(mid);
    const std::vector<uint16_t> got_scores = gpu_test::to_host(d_scores);
    const std::vector<int32_t> got_sel = gpu_test::to_host(d_sel);
    {  // CTAs of 8 tokens gathering a sequence's keys once (prefill pieces): the same scores, the same unwritten
        auto d_runs = gpu_test::poisoned<uint16_t>(size_t(tokens) * max_visible);
        cuda::IndexerScoresParams runs = sp;
        runs.scores = d_runs.get();
        runs.sequence_runs = true;
        cuda::indexer_scores(runs, nullptr);
        gpu_test::expect_bitwise_bf16("indexer scores in runs of 8 tokens against one token a CTA",
                                      gpu_test::to_host(d_runs), got_scores);
    }

    char what[160];
    const bool generic = cuda::indexer_scores_path(c.heads, c.dim) == cuda::IndexerScoresPath::kGeneric;
    std::snprintf(what, sizeof what, "indexer heads %d dim %d topk %d tokens %d max_visible %d (%s scores)", c.heads,
                  c.dim, c.topk, tokens, max_visible, generic ? "generic" : "tensor-core");
    std::printf("[ time     ] %s: scores %.1f us, top-k %.1f us (first launches)\n", what, ms_scores * 1e3,
                ms_topk * 1e3);
    int64_t inexact = 0, mismatched_tokens = 0;
    std::vector<uint16_t> want_bits, got_bits;
    std::vector<float> scores(static_cast<size_t>(max_visible));
    for (int t = 0; t < tokens; ++t) {
        const int visible = (c.positions[size_t(t)] + 1) / ratio;
        cpu_scores(q.data() + int64_t(t) * c.heads * c.dim, hw.data() + int64_t(t) * c.heads, keys, visible, c.heads,
                   c.dim, scores.data(), &inexact);
        for (int w = 0; w < visible; ++w) {
            want_bits.push_back(f32_to_bf16(scores[size_t(w)]));
            got_bits.push_back(got_scores[size_t(int64_t(t) * max_visible + w)]);
        }
        const int k = std::min(c.topk, visible);
        std::vector<int32_t> want = cpu_top_k(scores.data(), visible, k);
        want.resize(size_t(c.topk), -1);
        const std::vector<int32_t> got(got_sel.begin() + int64_t(t) * c.topk, got_sel.begin() + int64_t(t + 1) * c.topk);
        if (got != want) {
            if (++mismatched_tokens <= 3) {
                size_t j = 0;
                while (got[j] == want[j]) ++j;
                ADD_FAILURE() << what << ": token " << t << " top-k differs first at rank " << j << ": got " << got[j]
                              << " want " << want[j];
            }
        }
    }
    // The generic path sums each dot in the CPU's order, so its bits never depend on exactness; the tensor cores'
    // order differs, so there the test data must make every dot exact.
    if (!generic) {
        ASSERT_EQ(inexact, 0) << "test data: some q.k dot products are not exact in f32, bitwise scores not implied";
    }
    gpu_test::expect_bitwise_bf16(std::string(what) + " scores", got_bits, want_bits);
    EXPECT_EQ(mismatched_tokens, 0) << what;
    std::printf("[ top-k    ] %s: %d tokens, %lld with a different selection\n", what, tokens,
                (long long)mismatched_tokens);
}

TEST(IndexerGpu, PrefillOddTokens) {
    DSV4_REQUIRE_GPU();
    std::vector<int32_t> pos(37);
    std::iota(pos.begin(), pos.end(), 90);  // visible 22..31: top-k 512 keeps all, in score order
    run_case({64, 128, 512, pos});
    run_case({64, 128, 16, pos});
    run_case({64, 128, 7, {0, 1, 2, 3, 4}});  // visible 0, 0, 0, 1, 1
}
TEST(IndexerGpu, DecodeLongContext) {
    DSV4_REQUIRE_GPU();
    run_case({64, 128, 512, {40001}});   // 10000 visible entries
    run_case({64, 128, 1024, {80003}});  // 20001 visible, Pro top-k
}
TEST(IndexerGpu, TinyDims) {
    DSV4_REQUIRE_GPU();
    run_case({8, 32, 8, {5, 17, 33, 63, 64}});
    run_case({8, 64, 12, {100, 101, 102, 103, 104}});
}

// The generic score path: index_head_dims of small models (2 .. 16, 256, 512) and more heads than the tensor-core
// kernel stages; the same bitwise criterion.
TEST(IndexerGpu, GenericPathDimsAndHeads) {
    DSV4_REQUIRE_GPU();
    EXPECT_EQ(cuda::indexer_scores_path(64, 128), cuda::IndexerScoresPath::kTensorCore);
    for (int dim : {2, 4, 16, 256, 512}) {
        EXPECT_EQ(cuda::indexer_scores_path(8, dim), cuda::IndexerScoresPath::kGeneric) << dim;
        run_case({8, dim, 8, {5, 17, 33, 63, 64, 200}});
    }
    run_case({72, 64, 16, {100, 101, 302, 303}});
    run_case({3, 16, 5, {0, 1, 2, 3, 4, 9, 41}});  // visible 0 .. 10
}

// Top-k alone on scores with heavy ties (few distinct values) over a long context, against cpu_top_k; the default
// top-k of V4-Pro (1024) and beyond it (candidates past 48 KiB of shared memory).
void topk_ties_long_context(int topk) {
    Rng rng;
    const int ratio = 4, max_visible = 150000;
    const std::vector<int32_t> pos = {4 * max_visible - 1, 4 * 777 + 2, 4 * 1024 + 3, 4 * 1025};
    std::vector<uint16_t> bits(size_t(pos.size()) * max_visible);
    for (auto& b : bits) b = f32_to_bf16(float(int(rng.engine()() % 41) - 20) * 0.25f);
    auto d_scores = gpu_test::to_device(bits);
    auto d_pos = gpu_test::to_device(pos);
    auto d_sel = gpu_test::poisoned<int32_t>(pos.size() * topk);
    const cuda::IndexerTopkParams tp =
        topk_params(d_scores.get(), d_pos.get(), d_sel.get(), int(pos.size()), ratio, max_visible, topk);
    cuda::Event start, stop;
    start.record(nullptr);
    cuda::indexer_topk(tp, nullptr);
    stop.record(nullptr);
    std::printf("[ time     ] top-k %d of up to %d (4 tokens): %.1f us\n", topk, max_visible,
                stop.elapsed_since(start) * 1e3);
    const std::vector<int32_t> got = gpu_test::to_host(d_sel);
    std::vector<float> scores(static_cast<size_t>(max_visible));
    for (size_t t = 0; t < pos.size(); ++t) {
        const int visible = (pos[t] + 1) / ratio;
        for (int w = 0; w < visible; ++w) scores[size_t(w)] = bf16_to_f32(bits[t * max_visible + size_t(w)]);
        std::vector<int32_t> want = cpu_top_k(scores.data(), visible, std::min(topk, visible));
        want.resize(size_t(topk), -1);
        EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + int64_t(t) * topk))
            << "top-k " << topk << " token " << t << " (visible " << visible << ")";
    }
}

TEST(IndexerGpu, TopkTiesLongContext) {
    DSV4_REQUIRE_GPU();
    for (int topk : {1024, 3000, 8192}) topk_ties_long_context(topk);
}

// The attention's key list written by the top-k from its own selection equals the top-k's selection handed to
// attention_slots, bit for bit: a piece of three sequences (one starting at position 0, one mid-context, one where the
// window reaches back into the ring), a page table with pages out of order, top-k below, at and above what a token
// sees (so -1 entries), ties in the scores. `seq_start` places the sequences: the top-k's counting path (up to 4,096
// visible keys) or its radix path beyond.
void topk_key_list_equals_attention_slots(const std::vector<int32_t>& seq_start, int page_size) {
    Rng rng;
    const int ratio = 4, window = 8, seqs = 3;
    const std::vector<int32_t> seq_len = {5, 1, 6}, seq_state = {2, 0, 1};
    const int max_pages = (*std::max_element(seq_start.begin(), seq_start.end()) + 16) / ratio / page_size + 1;
    std::vector<int32_t> positions, token_seq, seq_first_row;
    for (int q = 0; q < seqs; ++q) {
        seq_first_row.push_back(int32_t(positions.size()));
        for (int i = 0; i < seq_len[size_t(q)]; ++i) {
            positions.push_back(seq_start[size_t(q)] + i);
            token_seq.push_back(q);
        }
    }
    const int tokens = int(positions.size());
    int max_visible = 0;
    for (int32_t p : positions) max_visible = std::max(max_visible, (p + 1) / ratio);
    std::vector<int32_t> page_table(size_t(seqs) * max_pages);
    std::iota(page_table.begin(), page_table.end(), 0);
    std::shuffle(page_table.begin(), page_table.end(), rng.engine());
    std::vector<uint16_t> bits(size_t(tokens) * max_visible);
    for (auto& b : bits) b = f32_to_bf16(float(int(rng.engine()() % 9) - 4) * 0.5f);
    auto d_scores = gpu_test::to_device(bits);
    auto d_positions = gpu_test::to_device(positions);
    auto d_token_seq = gpu_test::to_device(token_seq);
    auto d_first_row = gpu_test::to_device(seq_first_row);
    auto d_start = gpu_test::to_device(seq_start);
    auto d_state = gpu_test::to_device(seq_state);
    auto d_pages = gpu_test::to_device(page_table);
    for (int topk : {3, 16, 64}) {
        const int slots = window + topk;
        std::vector<std::vector<int32_t>> selected, indices;
        for (bool fused : {false, true}) {
            auto d_sel = gpu_test::poisoned<int32_t>(size_t(tokens) * topk, 0x7F);  // not -1 nor a row
            auto d_indices = gpu_test::poisoned<int32_t>(size_t(tokens) * slots, 0x7F);
            cuda::AttentionSlotsParams ap;
            ap.indices = d_indices.get();
            ap.selected = d_sel.get();
            ap.positions = d_positions.get();
            ap.token_seq = d_token_seq.get();
            ap.seq_first_row = d_first_row.get();
            ap.seq_start_position = d_start.get();
            ap.seq_state = d_state.get();
            ap.page_table = d_pages.get();
            ap.max_pages = max_pages;
            ap.page_size = page_size;
            ap.tokens = tokens;
            ap.slots = slots;
            ap.window = window;
            ap.topk = topk;
            ap.ring_row = 1000;
            ap.chunk_row = 5000;
            ap.compressed_row = 7000;
            cuda::IndexerTopkParams tp =
                topk_params(d_scores.get(), d_positions.get(), d_sel.get(), tokens, ratio, max_visible, topk);
            if (fused) tp.slots = ap;
            cuda::indexer_topk(tp, nullptr);
            if (!fused) cuda::attention_slots(ap, nullptr);
            selected.push_back(gpu_test::to_host(d_sel));
            indices.push_back(gpu_test::to_host(d_indices));
        }
        EXPECT_EQ(selected[0], selected[1]) << "top-k " << topk;
        EXPECT_EQ(indices[0], indices[1]) << "top-k " << topk;
        const int64_t rows_end = 7000 + int64_t(seqs) * max_pages * page_size;
        EXPECT_TRUE(
            std::all_of(indices[1].begin(), indices[1].end(), [&](int32_t r) { return r >= -1 && r < rows_end; }))
            << "top-k " << topk << ": an unwritten slot";
    }
}

TEST(IndexerGpu, TopkWritesTheAttentionsKeyListAsAttentionSlots) {
    DSV4_REQUIRE_GPU();
    topk_key_list_equals_attention_slots({0, 37, 190}, 4);        // up to 49 visible: the counting path
    topk_key_list_equals_attention_slots({0, 16420, 20001}, 64);  // 4,105 to 5,001 visible: the radix path
}

// The top-k's two paths at the counting path's edges (4,096 visible keys: below and at it counting sorts, above it the
// radix select), at a warp's and a CTA's sizes, for k below, at and above the visible count; scores with few distinct
// values (long runs of ties, one or two high bytes) and scores over many binades of both signs with +0 and -0.
TEST(IndexerGpu, TopkPathsAtTheirEdges) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    const int ratio = 4;
    const std::vector<int> visibles = {1, 2, 31, 32, 33, 511, 512, 513, 1023, 1024, 1025, 2049, 4095, 4096, 4097, 4500};
    std::vector<int32_t> pos;
    for (int v : visibles) pos.push_back(ratio * v - 1 + int(pos.size()) % ratio);  // (pos + 1) / ratio == v
    const int max_visible = visibles.back();
    for (int spread = 0; spread < 2; ++spread) {
        std::vector<uint16_t> bits(pos.size() * size_t(max_visible));
        for (auto& b : bits) {
            if (spread == 0) {
                b = f32_to_bf16(1.0f + float(rng.engine()() % 7) * 0.125f);  // 7 values, one binade
            } else {
                const uint32_t r = uint32_t(rng.engine()() % 64);  // 1 in 32: -0 or +0
                const float value = rng.normal(1.0f) * std::exp(rng.normal(3.0f));
                b = r == 0 ? uint16_t(0x8000) : r == 1 ? uint16_t(0) : f32_to_bf16(value);
            }
        }
        auto d_scores = gpu_test::to_device(bits);
        auto d_pos = gpu_test::to_device(pos);
        for (int topk : {1, 512, 5000}) {
            auto d_sel = gpu_test::poisoned<int32_t>(pos.size() * topk);
            cuda::indexer_topk(
                topk_params(d_scores.get(), d_pos.get(), d_sel.get(), int(pos.size()), ratio, max_visible, topk),
                nullptr);
            const std::vector<int32_t> got = gpu_test::to_host(d_sel);
            std::vector<float> scores(static_cast<size_t>(max_visible));
            for (size_t t = 0; t < pos.size(); ++t) {
                const int visible = (pos[t] + 1) / ratio;
                ASSERT_EQ(visible, visibles[t]) << "test positions";
                for (int w = 0; w < visible; ++w) scores[size_t(w)] = bf16_to_f32(bits[t * max_visible + size_t(w)]);
                std::vector<int32_t> want = cpu_top_k(scores.data(), visible, std::min(topk, visible));
                want.resize(size_t(topk), -1);
                EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + int64_t(t) * topk))
                    << "top-k " << topk << " of " << visible << " visible, " << (spread ? "spread" : "tied")
                    << " scores";
            }
        }
    }
}

// Host-only (the launchers check before any CUDA call): the indexer queries' RoPE and the top-k's key list refuse
// parameters that do not describe them.
TEST(IndexerLaunchContracts, RopeInTheRotationAndTheKeyListRefuseMismatches) {
    auto* x = reinterpret_cast<__nv_bfloat16*>(uintptr_t(64));
    const auto* inv_freq = reinterpret_cast<const float*>(uintptr_t(64));
    const auto* positions = reinterpret_cast<const int32_t*>(uintptr_t(64));
    cuda::IndexerRotateParams rq{x, 8, 128, 128};
    rq.rope_inv_freq = inv_freq;
    rq.positions = positions;
    rq.rope_dim = 64;
    rq.rope_heads = 4;
    cuda::IndexerRotateParams bad = rq;
    bad.positions = nullptr;
    EXPECT_THROW(cuda::indexer_rotate_fp4(bad, nullptr), Error) << "RoPE without positions";
    bad = rq;
    bad.rope_dim = 63;
    EXPECT_THROW(cuda::indexer_rotate_fp4(bad, nullptr), Error) << "an odd rope_dim";
    bad.rope_dim = 256;
    EXPECT_THROW(cuda::indexer_rotate_fp4(bad, nullptr), Error) << "rope_dim above dim";
    bad = rq;
    bad.rope_heads = 3;
    EXPECT_THROW(cuda::indexer_rotate_fp4(bad, nullptr), Error) << "8 rows are not whole tokens of 3 heads";

    auto* selected = reinterpret_cast<int32_t*>(uintptr_t(64));
    cuda::IndexerTopkParams tp =
        topk_params(reinterpret_cast<const uint16_t*>(uintptr_t(64)), positions, selected, 2, 4, 16, 8);
    tp.slots.indices = selected + 64;
    tp.slots.selected = selected;
    tp.slots.positions = positions;
    tp.slots.token_seq = tp.slots.seq_first_row = tp.slots.seq_start_position = tp.slots.seq_state = positions;
    tp.slots.page_table = positions;
    tp.slots.max_pages = tp.slots.page_size = 4;
    tp.slots.tokens = 2;
    tp.slots.window = 4;
    tp.slots.topk = 8;
    tp.slots.slots = 12;
    cuda::IndexerTopkParams other = tp;
    other.slots.selected = selected + 8;
    EXPECT_THROW(cuda::indexer_topk(other, nullptr), Error) << "a key list of another selection";
    other = tp;
    other.slots.topk = 4;
    other.slots.slots = 8;
    EXPECT_THROW(cuda::indexer_topk(other, nullptr), Error) << "a key list of another top-k";
    other = tp;
    other.slots.slots = 13;
    EXPECT_THROW(cuda::indexer_topk(other, nullptr), Error) << "slots != window + top-k";
    other = tp;
    other.slots.page_table = nullptr;
    EXPECT_THROW(cuda::indexer_topk(other, nullptr), Error) << "compressed slots without a page table";
}

}  // namespace
}  // namespace dsv4
