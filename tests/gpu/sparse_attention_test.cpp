// Sparse attention on the device vs cpu::sparse_attention_head on the dequantized entries (model numerics:
// probabilities rounded to bf16). Decode (1 token, 128 + 512 slots, split over CTAs) and prefill shapes, Flash and
// Pro head counts, the tiny test dims, -1 slots, a single valid slot, no valid slot; the generic path on the shapes
// the tensor-core kernels are not built for (head_dim 32, 64, 256, odd nope parts, rope dims not multiples of 4).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/compressor/kv_entry_layout.h"
#include "kernels/cuda/rope/rope.h"
#include "kernels/cuda/sparse_attention/sparse_attention.h"

namespace dsv4 {
namespace {

using gpu_test::Rng;

// A model-like entry: bf16 normal values, nope FP8 round trip in 64-blocks (docs/numerics.md), packed as in
// kv_entry_layout.h; `value` gets the dequantized entry (what the CPU reference attends to).
std::vector<uint8_t> pack_entry(Rng& rng, int64_t d, int64_t rope, float* value) {
    const cuda::MainEntryLayout layout = cuda::main_entry_layout(d, rope);
    std::vector<uint8_t> bytes(size_t(layout.bytes()), 0);
    std::vector<float> x = rng.normal_bf16(d);
    for (int64_t b = 0; b < layout.scales(); ++b) {
        const int64_t lo = b * 64, hi = std::min<int64_t>(lo + 64, layout.nope);
        float amax = 0.0f;
        for (int64_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(x[size_t(i)]));
        const float s = ue8m0_ceil_pow2(std::max(amax, 1e-4f) * (1.0f / kE4M3Max));
        bytes[size_t(layout.scale_offset() + b)] = uint8_t((float_bits(s) >> 23) & 0xFF);
        for (int64_t i = lo; i < hi; ++i) {
            bytes[size_t(i)] = f32_to_e4m3(x[size_t(i)] / s);
            value[i] = e4m3_to_f32(bytes[size_t(i)]) * s;
        }
    }
    for (int64_t i = 0; i < rope; ++i) {
        const uint16_t h = f32_to_bf16(x[size_t(layout.nope + i)]);
        bytes[size_t(layout.rope_offset() + 2 * i)] = uint8_t(h & 0xFF);
        bytes[size_t(layout.rope_offset() + 2 * i + 1)] = uint8_t(h >> 8);
        value[layout.nope + i] = bf16_to_f32(h);
    }
    return bytes;
}

// Half-way points between adjacent bf16 values are where a tiny difference of P flips its rounding.
bool near_bf16_midpoint(float p, double band) {
    if (p == 0.0f) return false;
    const double ulp = std::ldexp(1.0, std::ilogb(p) - 7);  // bf16 ulp in p's binade
    return std::fabs(std::fabs(double(p) - double(round_bf16(p))) - ulp / 2) <= band;
}

// A launch of `tokens` tokens of heads x d (the last `rope` dims rotary) over `slots` slots each in `splits` splits,
// with head_dim^-0.5 as the scale.
cuda::SparseAttentionParams launch_params(int tokens, int heads, int d, int rope, int slots, int splits, const uint16_t* q,
                                          const uint8_t* kv, const int32_t* indices, const float* sink, uint16_t* out,
                                          float* workspace = nullptr, int64_t workspace_floats = 0) {
    cuda::SparseAttentionParams p;
    p.q = q;
    p.kv = kv;
    p.indices = indices;
    p.sink = sink;
    p.out = out;
    p.workspace = workspace;
    p.workspace_floats = workspace_floats;
    p.tokens = tokens;
    p.heads = heads;
    p.head_dim = d;
    p.rope_dim = rope;
    p.slots = slots;
    p.splits = splits;
    p.scale = float(std::pow(double(d), -0.5));
    return p;
}

struct Case {
    int tokens, heads, d, rope, slots;
    double empty_fraction;  // of slots set to -1
    int valid_only = -1;    // >= 0: every slot empty except this one; -2: all empty
};

// Runs a case and checks it against the CPU reference; with kCluster or kSequential, also the same inputs through the
// three kernels (kKernels), which must give the same bits.
void run_case(const Case& c, int forced_splits = 0,
              cuda::SparseAttentionCombine combine = cuda::SparseAttentionCombine::kAuto) {
    Rng rng;
    const int entries = std::max(1, c.slots + 17);
    const int64_t stride = cuda::main_entry_layout(c.d, c.rope).bytes();
    std::vector<uint8_t> kv(static_cast<size_t>(entries * stride));
    std::vector<float> kv_value(size_t(entries) * c.d);
    for (int e = 0; e < entries; ++e) {
        auto b = pack_entry(rng, c.d, c.rope, kv_value.data() + int64_t(e) * c.d);
        std::copy(b.begin(), b.end(), kv.begin() + int64_t(e) * stride);
    }
    std::vector<int32_t> idx(size_t(c.tokens) * c.slots);
    for (int t = 0; t < c.tokens; ++t)
        for (int j = 0; j < c.slots; ++j) {
            int32_t v = int32_t(rng.engine()() % uint32_t(entries));
            if (rng.uniform(0.0f, 1.0f) < c.empty_fraction) v = -1;
            if (c.valid_only == -2 || (c.valid_only >= 0 && j != c.valid_only)) v = -1;
            idx[size_t(t) * c.slots + j] = v;
        }
    const std::vector<float> q = rng.normal_bf16(int64_t(c.tokens) * c.heads * c.d, 2.0f);
    std::vector<float> sink(static_cast<size_t>(c.heads));
    for (float& s : sink) s = rng.normal(1.0f);
    const float scale = float(std::pow(double(c.d), -0.5));

    cuda::SparseAttentionPlan plan = cuda::plan_sparse_attention(c.heads, c.d, c.slots);
    if (forced_splits) {
        plan.splits = forced_splits;
        plan.workspace_floats_per_token = cuda::sparse_attention_workspace_per_token(c.heads, c.d, forced_splits);
    }
    const int64_t workspace_floats = int64_t(c.tokens) * plan.workspace_floats_per_token;
    auto d_q = gpu_test::to_device(gpu_test::to_bf16(q));
    auto d_kv = gpu_test::to_device(kv);
    auto d_idx = gpu_test::to_device(idx);
    auto d_sink = gpu_test::to_device(sink);
    auto d_out = gpu_test::poisoned<uint16_t>(size_t(c.tokens) * c.heads * c.d);
    auto d_ws = gpu_test::poisoned<float>(size_t(workspace_floats));
    cuda::SparseAttentionParams p =
        launch_params(c.tokens, c.heads, c.d, c.rope, c.slots, plan.splits, d_q.get(), d_kv.get(), d_idx.get(),
                      d_sink.get(), d_out.get(), plan.splits > 1 ? d_ws.get() : nullptr, workspace_floats);
    p.combine = combine;
    cuda::Event start, stop;
    start.record(nullptr);
    cuda::sparse_attention(p, nullptr);
    stop.record(nullptr);
    const float ms = stop.elapsed_since(start);
    const std::vector<uint16_t> bits = gpu_test::to_host(d_out);
    const std::vector<float> got = gpu_test::from_bf16(bits);

    char what[200];
    const bool generic = cuda::sparse_attention_path(c.d, c.rope) == cuda::SparseAttentionPath::kGeneric;
    const char* combined = combine == cuda::SparseAttentionCombine::kCluster      ? ", cluster"
                           : combine == cuda::SparseAttentionCombine::kKernels    ? ", kernels"
                           : combine == cuda::SparseAttentionCombine::kSequential ? ", sequential"
                                                                                  : "";
    std::snprintf(what, sizeof what, "sparse_attention tokens %d heads %d d %d rope %d slots %d splits %d (%s%s)",
                  c.tokens, c.heads, c.d, c.rope, c.slots, plan.splits, generic ? "generic" : "tensor cores", combined);
    std::printf("[ time     ] %s: %.1f us (first launch, includes setup)\n", what, ms * 1e3);
    if (combine == cuda::SparseAttentionCombine::kSequential) {  // the same inputs through the three kernels
        auto d_other = gpu_test::poisoned<uint16_t>(size_t(c.tokens) * c.heads * c.d);
        cuda::SparseAttentionParams k = p;
        k.out = d_other.get();
        k.combine = cuda::SparseAttentionCombine::kKernels;
        cuda::sparse_attention(k, nullptr);
        EXPECT_EQ(bits, gpu_test::to_host(d_other)) << what << ": the sequential kernel and the three kernels differ";
    }
    if (combine == cuda::SparseAttentionCombine::kCluster) {
        // The same inputs through the three kernels, and through the cluster of 64 heads per CTA (the launch above
        // took 16 where they are built): the same bits.
        auto d_other = gpu_test::poisoned<uint16_t>(size_t(c.tokens) * c.heads * c.d);
        cuda::SparseAttentionParams k = p;
        k.out = d_other.get();
        k.combine = cuda::SparseAttentionCombine::kKernels;
        cuda::sparse_attention(k, nullptr);
        EXPECT_EQ(bits, gpu_test::to_host(d_other)) << what << ": the cluster and the three kernels differ";
        if (cuda::detail::sparse_attention_resident_clusters(p, cuda::kNarrowClusterHeads) >= 1) {
            cuda::SparseAttentionParams wide = p;
            wide.out = d_other.get();
            wide.cluster_heads = 64;
            cuda::sparse_attention(wide, nullptr);
            EXPECT_EQ(bits, gpu_test::to_host(d_other)) << what << ": clusters of 16 and of 64 heads per CTA differ";
        }
    }
    gpu_test::Bf16Bracket check(what);
    std::vector<float> want(static_cast<size_t>(c.d));
    for (int t = 0; t < c.tokens; ++t) {
        std::vector<const float*> keys;
        for (int j = 0; j < c.slots; ++j) {
            const int32_t e = idx[size_t(t) * c.slots + j];
            if (e >= 0) keys.push_back(kv_value.data() + int64_t(e) * c.d);
        }
        const int64_t n = int64_t(keys.size());
        for (int h = 0; h < c.heads; ++h) {
            const float* qh = q.data() + (int64_t(t) * c.heads + h) * c.d;
            cpu::sparse_attention_head(qh, keys.data(), n, c.d, scale, sink[size_t(h)], true, want.data());
            // Tolerance from the arithmetic that may differ: each logit is an f32 dot (order differs; bound
            // d * u * sum|q k|, for both sides) and expf differs from glibc by <= 2 ulps; a relative change
            // delta of an unrounded P can flip its bf16 rounding only within delta * P of a midpoint (then it
            // moves one bf16 ulp <= 2^-7 P). Sums of n terms: n * 2^-23 relative (also covers tensor-core
            // truncation) for the P.V accumulation and for the denominator.
            std::vector<double> l(static_cast<size_t>(n)), bound(static_cast<size_t>(n));
            double M = -INFINITY, max_bound = 0.0;
            for (int64_t j = 0; j < n; ++j) {
                double abs = 0.0;
                float fdot = 0.0f;
                for (int i = 0; i < c.d; ++i) {
                    fdot += qh[i] * keys[size_t(j)][i];
                    abs += std::fabs(double(qh[i]) * keys[size_t(j)][i]);
                }
                l[size_t(j)] = double(fdot * scale);
                bound[size_t(j)] = 2.0 * c.d * 0x1p-24 * abs * scale;
                M = std::max(M, l[size_t(j)]);
                max_bound = std::max(max_bound, bound[size_t(j)]);
            }
            double Z = 0.0;
            std::vector<double> prob(static_cast<size_t>(n)), dprob(static_cast<size_t>(n));
            for (int64_t j = 0; j < n; ++j) {
                const float pj = std::exp(float(l[size_t(j)]) - float(M));
                const double delta = bound[size_t(j)] + max_bound + 4 * 0x1p-24;
                prob[size_t(j)] = round_bf16(pj);
                dprob[size_t(j)] = delta * pj + (near_bf16_midpoint(pj, delta * pj) ? std::ldexp(double(pj), -7) : 0.0);
                Z += pj;
            }
            Z += std::exp(double(sink[size_t(h)]) - M);
            const double den_rel = n * 0x1p-23 + max_bound * 2 + 4 * 0x1p-24;
            for (int i = 0; i < c.d; ++i) {
                double err = 0.0, mag = 0.0;
                for (int64_t j = 0; j < n; ++j) {
                    const double v = std::fabs(keys[size_t(j)][i]);
                    err += dprob[size_t(j)] * v;
                    mag += prob[size_t(j)] * v;
                }
                const double tol = n ? (err + n * 0x1p-23 * mag) / Z + std::fabs(want[size_t(i)]) * den_rel : 0.0;
                check.add((int64_t(t) * c.heads + h) * c.d + i, got[size_t((int64_t(t) * c.heads + h) * c.d + i)],
                          want[size_t(i)], tol);
            }
        }
    }
    check.expect_ok();
}

TEST(SparseAttentionGpu, DecodeFlashSplit) {
    DSV4_REQUIRE_GPU();
    run_case({1, 64, 512, 64, 128 + 512, 0.1});
}
TEST(SparseAttentionGpu, DecodeFlashUnsplitEqualsReference) {
    DSV4_REQUIRE_GPU();
    run_case({1, 64, 512, 64, 128 + 512, 0.1}, /*forced_splits=*/1);
}
TEST(SparseAttentionGpu, DecodeProHeads) {
    DSV4_REQUIRE_GPU();
    run_case({1, 128, 512, 64, 128 + 1024, 0.05});
}
TEST(SparseAttentionGpu, PrefillOddSizes) {
    DSV4_REQUIRE_GPU();
    run_case({5, 64, 512, 64, 200, 0.3});
    run_case({37, 64, 512, 64, 133, 0.2});
    run_case({37, 64, 512, 64, 133, 0.2}, /*forced_splits=*/3);
}
TEST(SparseAttentionGpu, TinyDims) {
    DSV4_REQUIRE_GPU();
    run_case({5, 4, 80, 16, 37, 0.2});
    run_case({37, 4, 96, 32, 24, 0.2});
    run_case({1, 4, 128, 64, 70, 0.0}, /*forced_splits=*/2);
}
TEST(SparseAttentionGpu, OneValidSlotAndNoValidSlot) {
    DSV4_REQUIRE_GPU();
    run_case({5, 64, 512, 64, 130, 0.0, /*valid_only=*/129});
    run_case({3, 64, 512, 64, 130, 0.0, /*valid_only=*/-2});
    run_case({3, 64, 512, 64, 130, 0.0, /*valid_only=*/-2}, /*forced_splits=*/3);
}

// The fused path (one cluster per token and head group) against the three kernels: the same bits, both checked
// against the CPU. Decode shapes (10 splits; 12 and 16, non-portable cluster sizes), Pro's two head groups, splits
// of several tiles (forced), the tiny dims, no valid slot, one valid slot, several tokens.
TEST(SparseAttentionGpu, ClusterCombineEqualsKernelsBitwise) {
    DSV4_REQUIRE_GPU();
    const std::pair<Case, int> cases[] = {
        {{1, 64, 512, 64, 128 + 512, 0.1}, 0}, {{2, 64, 512, 64, 128 + 640, 0.1}, 0},
        {{1, 64, 512, 64, 1024, 0.05}, 0},     {{1, 128, 512, 64, 128 + 512, 0.05}, 0},
        {{3, 64, 512, 64, 128 + 512, 0.1}, 3}, {{5, 4, 80, 16, 37, 0.2}, 0},
        {{3, 4, 96, 32, 150, 0.2}, 0},         {{1, 4, 128, 64, 70, 0.0}, 2},
        {{3, 64, 512, 64, 130, 0.0, -2}, 3},   {{2, 64, 512, 64, 300, 0.0, 129}, 0},
    };
    for (const auto& [c, splits] : cases) run_case(c, splits, cuda::SparseAttentionCombine::kCluster);
}

// The sequential kernel (one CTA walks a token's splits; prefill pieces) against the three kernels: the same bits,
// both checked against the CPU. Prefill and decode shapes, splits of several tiles (forced), a gap of empty tiles
// (HCA before its entries), Pro's two head groups, the tiny dims, no valid slot, one valid slot.
TEST(SparseAttentionGpu, SequentialCombineEqualsKernelsBitwise) {
    DSV4_REQUIRE_GPU();
    const std::pair<Case, int> cases[] = {
        {{37, 64, 512, 64, 128 + 512, 0.1}, 0}, {{2, 64, 512, 64, 128 + 640, 0.5}, 0},
        {{1, 64, 512, 64, 1024, 0.05}, 0},      {{3, 128, 512, 64, 128 + 512, 0.05}, 0},
        {{9, 64, 512, 64, 128 + 512, 0.1}, 3},  {{5, 4, 80, 16, 37, 0.2}, 2},
        {{7, 4, 96, 32, 150, 0.2}, 0},          {{4, 4, 128, 64, 70, 0.0}, 2},
        {{3, 64, 512, 64, 130, 0.0, -2}, 3},    {{2, 64, 512, 64, 300, 0.0, 129}, 0},
    };
    for (const auto& [c, splits] : cases) run_case(c, splits, cuda::SparseAttentionCombine::kSequential);
}

// The inverse RoPE asked of the attention (fused into the cluster's combine, apply_rope after the other paths)
// equals the attention without it followed by apply_rope, bit for bit: decode shapes on the cluster, a prefill
// shape on the kernels, a tiny dim, the generic path; YaRN's table and positions up to 2^20.
TEST(SparseAttentionGpu, InverseRopeEqualsApplyRopeAfter) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    const RopeParams yarn{160000.0, YarnParams{16.0, 65536, 32.0, 1.0}};
    struct RopeCase {
        int tokens, heads, d, rope, slots;
        cuda::SparseAttentionCombine combine;
    };
    const RopeCase cases[] = {{1, 64, 512, 64, 640, cuda::SparseAttentionCombine::kCluster},
                              {1, 64, 512, 64, 160, cuda::SparseAttentionCombine::kAuto},
                              {37, 64, 512, 64, 640, cuda::SparseAttentionCombine::kKernels},
                              {37, 64, 512, 64, 640, cuda::SparseAttentionCombine::kSequential},
                              {3, 4, 128, 64, 70, cuda::SparseAttentionCombine::kCluster},
                              {3, 4, 64, 32, 70, cuda::SparseAttentionCombine::kAuto}};
    for (const RopeCase& c : cases) {
        const int entries = c.slots + 17;
        const int64_t stride = cuda::main_entry_layout(c.d, c.rope).bytes();
        std::vector<uint8_t> kv(static_cast<size_t>(entries * stride));
        std::vector<float> scratch(static_cast<size_t>(c.d));
        for (int e = 0; e < entries; ++e) {
            auto b = pack_entry(rng, c.d, c.rope, scratch.data());
            std::copy(b.begin(), b.end(), kv.begin() + int64_t(e) * stride);
        }
        std::vector<int32_t> idx(size_t(c.tokens) * c.slots), positions(size_t(c.tokens));
        for (int32_t& v : idx) v = rng.uniform(0.0f, 1.0f) < 0.1f ? -1 : int32_t(rng.engine()() % uint32_t(entries));
        for (int32_t& v : positions) v = int32_t(rng.engine()() % (1u << 20));
        std::vector<float> sink(static_cast<size_t>(c.heads));
        for (float& v : sink) v = rng.normal(1.0f);
        const cpu::RopeTable table = cpu::make_rope_table(c.rope, yarn);
        auto d_q = gpu_test::to_device(gpu_test::to_bf16(rng.normal_bf16(int64_t(c.tokens) * c.heads * c.d, 2.0f)));
        auto d_kv = gpu_test::to_device(kv);
        auto d_idx = gpu_test::to_device(idx);
        auto d_sink = gpu_test::to_device(sink);
        auto d_pos = gpu_test::to_device(positions);
        auto d_freq = gpu_test::to_device(table.inv_freq);
        const cuda::SparseAttentionPlan plan = cuda::plan_sparse_attention(c.heads, c.d, c.slots);
        auto ws = gpu_test::poisoned<float>(size_t(std::max<int64_t>(1, c.tokens * plan.workspace_floats_per_token)));
        auto fused = gpu_test::poisoned<uint16_t>(size_t(c.tokens) * c.heads * c.d);
        auto after = gpu_test::poisoned<uint16_t>(size_t(c.tokens) * c.heads * c.d);
        cuda::SparseAttentionParams p =
            launch_params(c.tokens, c.heads, c.d, c.rope, c.slots, plan.splits, d_q.get(), d_kv.get(), d_idx.get(),
                          d_sink.get(), after.get(), ws.get(), c.tokens * plan.workspace_floats_per_token);
        p.combine = c.combine;
        cuda::sparse_attention(p, nullptr);
        cuda::ApplyRopeParams r;
        r.x = reinterpret_cast<__nv_bfloat16*>(after.get());
        r.inv_freq = d_freq.get();
        r.positions = d_pos.get();
        r.tokens = c.tokens;
        r.heads = c.heads;
        r.head_dim = c.d;
        r.rope_dim = c.rope;
        r.token_stride = int64_t(c.heads) * c.d;
        r.inverse = true;
        cuda::apply_rope(r, nullptr);
        p.out = fused.get();
        p.inverse_rope_inv_freq = d_freq.get();
        p.positions = d_pos.get();
        cuda::sparse_attention(p, nullptr);
        EXPECT_EQ(gpu_test::to_host(fused), gpu_test::to_host(after))
            << "tokens " << c.tokens << " heads " << c.heads << " d " << c.d << " slots " << c.slots;
    }
}

// The generic path: head_dims of small models (32, 64, 256), an odd nope part (33 = 17 + 16), a nope part that is
// not a multiple of 8 and a rope dim that is not a multiple of 4 (40 = 34 + 6), a head_dim above the largest
// built one (640), entries without a nope part (head_dim == rope_dim, also at a built head_dim); prefill and decode
// shapes, empty slots, one valid slot, none.
TEST(SparseAttentionGpu, GenericPathShapes) {
    DSV4_REQUIRE_GPU();
    EXPECT_EQ(cuda::sparse_attention_path(512, 64), cuda::SparseAttentionPath::kTensorCore);
    EXPECT_EQ(cuda::sparse_attention_path(96, 32), cuda::SparseAttentionPath::kTensorCore);
    EXPECT_EQ(cuda::sparse_attention_path(96, 30), cuda::SparseAttentionPath::kGeneric);
    for (const auto& [d, rope] : std::vector<std::pair<int, int>>{
             {32, 16}, {64, 32}, {256, 64}, {33, 16}, {40, 6}, {640, 64}, {32, 32}, {128, 128}}) {
        EXPECT_EQ(cuda::sparse_attention_path(d, rope), cuda::SparseAttentionPath::kGeneric) << d << " " << rope;
        run_case({5, 4, d, rope, 37, 0.2});
        run_case({1, 4, d, rope, 128 + 150, 0.1});
    }
    run_case({3, 2, 64, 32, 130, 0.0, /*valid_only=*/129});
    run_case({3, 2, 64, 32, 130, 0.0, /*valid_only=*/-2});
}

// The generic path computes each (token, head) alone: a token gets the same bits alone as among 19.
TEST(SparseAttentionGpu, GenericPathTokenResultIndependentOfLaunch) {
    DSV4_REQUIRE_GPU();
    const int T = 19, H = 4, d = 64, rope = 32, slots = 96;
    Rng rng;
    const int entries = 200;
    const int64_t stride = cuda::main_entry_layout(d, rope).bytes();
    std::vector<uint8_t> kv(static_cast<size_t>(entries * stride));
    std::vector<float> scratch(static_cast<size_t>(d));
    for (int e = 0; e < entries; ++e) {
        auto b = pack_entry(rng, d, rope, scratch.data());
        std::copy(b.begin(), b.end(), kv.begin() + int64_t(e) * stride);
    }
    std::vector<int32_t> idx(size_t(T) * slots);
    for (int32_t& v : idx) v = rng.uniform(0.0f, 1.0f) < 0.2f ? -1 : int32_t(rng.engine()() % uint32_t(entries));
    std::vector<float> sink(static_cast<size_t>(H));
    for (float& s : sink) s = rng.normal(1.0f);
    auto d_q = gpu_test::to_device(gpu_test::to_bf16(rng.normal_bf16(int64_t(T) * H * d, 2.0f)));
    auto d_kv = gpu_test::to_device(kv);
    auto d_idx = gpu_test::to_device(idx);
    auto d_sink = gpu_test::to_device(sink);
    auto run = [&](int t0, int n) {
        auto out = gpu_test::poisoned<uint16_t>(size_t(n) * H * d);
        cuda::sparse_attention(launch_params(n, H, d, rope, slots, 1, d_q.get() + int64_t(t0) * H * d, d_kv.get(),
                                             d_idx.get() + int64_t(t0) * slots, d_sink.get(), out.get()),
                               nullptr);
        return gpu_test::to_host(out);
    };
    const std::vector<uint16_t> all = run(0, T);
    for (int t : {0, 7, 18}) {
        const std::vector<uint16_t> alone = run(t, 1);
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + int64_t(t) * H * d))
            << "token " << t << " alone differs from the 19-token launch";
    }
}

// A token's output must not depend on the launch: alone (T = 1) or among 37 tokens, in groups forced by a small
// workspace, or with 128 empty slots appended (a decode graph sized for the longest context) - bit for bit. This is
// what makes decode batches and prefill chunks give every sequence the same bits (batch and chunk invariance).
TEST(SparseAttentionGpu, TokenResultIndependentOfLaunch) {
    DSV4_REQUIRE_GPU();
    const int T = 37, H = 64, d = 512, rope = 64, slots = 128 + 512, extra = 128;
    Rng rng;
    const int entries = 900;
    const int64_t stride = cuda::main_entry_layout(d, rope).bytes();
    std::vector<uint8_t> kv(static_cast<size_t>(entries * stride));
    std::vector<float> scratch(static_cast<size_t>(d));
    for (int e = 0; e < entries; ++e) {
        auto b = pack_entry(rng, d, rope, scratch.data());
        std::copy(b.begin(), b.end(), kv.begin() + int64_t(e) * stride);
    }
    std::vector<int32_t> idx(size_t(T) * slots), wide(size_t(T) * (slots + extra), -1);
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < slots; ++j) {
            // Window-like head, a gap of empty slots in the middle, top-k-like tail.
            const bool empty = (j > 100 && j < 260) || rng.uniform(0.0f, 1.0f) < 0.1f;
            const int32_t v = empty ? -1 : int32_t(rng.engine()() % uint32_t(entries));
            idx[size_t(t) * slots + j] = v;
            wide[size_t(t) * (slots + extra) + j] = v;
        }
    std::vector<float> sink(static_cast<size_t>(H));
    for (float& s : sink) s = rng.normal(1.0f);
    auto d_q = gpu_test::to_device(gpu_test::to_bf16(rng.normal_bf16(int64_t(T) * H * d, 2.0f)));
    auto d_kv = gpu_test::to_device(kv);
    auto d_idx = gpu_test::to_device(idx);
    auto d_wide = gpu_test::to_device(wide);
    auto d_sink = gpu_test::to_device(sink);

    // tokens [t0, t0 + n) with the given slot list and workspace (in tokens' worth).
    auto run = [&](int t0, int n, bool widened, int64_t workspace_tokens) {
        const int s = widened ? slots + extra : slots;
        const cuda::SparseAttentionPlan plan = cuda::plan_sparse_attention(H, d, s);
        auto out = gpu_test::poisoned<uint16_t>(size_t(n) * H * d);
        auto ws = gpu_test::poisoned<float>(size_t(workspace_tokens * plan.workspace_floats_per_token));
        cuda::sparse_attention(launch_params(n, H, d, rope, s, plan.splits, d_q.get() + int64_t(t0) * H * d, d_kv.get(),
                                             (widened ? d_wide.get() : d_idx.get()) + int64_t(t0) * s, d_sink.get(),
                                             out.get(), ws.get(), workspace_tokens * plan.workspace_floats_per_token),
                               nullptr);
        return gpu_test::to_host(out);
    };
    const std::vector<uint16_t> all = run(0, T, false, T);
    const std::vector<uint16_t> grouped = run(0, T, false, 3);
    const std::vector<uint16_t> widened = run(0, T, true, 5);
    EXPECT_EQ(all, grouped) << "token groups of 3 changed bits";
    EXPECT_EQ(all, widened) << "appended empty slots changed bits";
    for (int t : {0, 17, 36}) {
        const std::vector<uint16_t> alone = run(t, 1, false, 1);
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + int64_t(t) * H * d))
            << "token " << t << " alone differs from the 37-token launch";
    }
    std::printf("[ bitwise  ] sparse attention: 37 tokens x 64 heads equal alone, in groups of 3, widened by %d slots\n",
                extra);

    // A prefill-sized launch (the 37 tokens repeated past a wave of the SMs), where the automatic choice is the
    // sequential kernel: every token's bits as in the 37-token launch of the three kernels.
    const int big = (cuda::multiprocessor_count() + T) / T * T;
    std::vector<int32_t> big_idx(size_t(big) * slots);
    for (int t = 0; t < big; ++t)
        std::copy_n(idx.begin() + int64_t(t % T) * slots, slots, big_idx.begin() + int64_t(t) * slots);
    auto d_big_q = gpu_test::poisoned<uint16_t>(size_t(big) * H * d);
    for (int t0 = 0; t0 < big; t0 += T)
        DSV4_CUDA_CHECK(cudaMemcpy(d_big_q.get() + int64_t(t0) * H * d, d_q.get(), size_t(T) * H * d * 2,
                                   cudaMemcpyDeviceToDevice));
    auto d_big_idx = gpu_test::to_device(big_idx);
    auto big_out = gpu_test::poisoned<uint16_t>(size_t(big) * H * d);
    const cuda::SparseAttentionPlan plan = cuda::plan_sparse_attention(H, d, slots);
    const cuda::SparseAttentionParams p = launch_params(
        big, H, d, rope, slots, plan.splits, d_big_q.get(), d_kv.get(),
        d_big_idx.get(), d_sink.get(), big_out.get(), nullptr, 0);
    ASSERT_TRUE(cuda::detail::sparse_attention_takes_sequential(p)) << big << " tokens";
    cuda::sparse_attention(p, nullptr);
    const std::vector<uint16_t> big_bits = gpu_test::to_host(big_out);
    for (int t = 0; t < big; ++t)
        ASSERT_TRUE(std::equal(all.begin() + int64_t(t % T) * H * d, all.begin() + int64_t(t % T + 1) * H * d,
                               big_bits.begin() + int64_t(t) * H * d))
            << "token " << t << " of " << big << " (sequential) differs from the 37-token launch";
    std::printf("[ bitwise  ] sparse attention: %d tokens on the sequential kernel equal the 37-token launch\n", big);
}

}  // namespace
}  // namespace dsv4
