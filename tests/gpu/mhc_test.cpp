// mHC kernels (kernels/cuda/mhc) against the CPU reference on random streams, odd token counts: n_hc 2 and 4 (the
// specialised kernels) and 1, 3, 8 (the generic kernels, which must also give the specialised kernels' bits at 2
// and 4).
// hc_pre / hc_head are checked in stages, each as tight as its arithmetic allows:
//   logits    vs a double evaluation: |err| <= rho * g * sum|f v| + |l| (g / 2 + 5u), g = (ceil(W / kHcThreads) + 10) u
//             (the f32 chain of each thread plus the 8-level tree, the rsqrt steps and the final product);
//   mix       vs the CPU's formulas (sigmoid, cpu::sinkhorn) applied to the device logits: they differ only by
//             CUDA expf (2 ulp) against glibc (< 1 ulp): 8u relative for pre/post; Sinkhorn's diagonal scalings do
//             not expand relative errors (Hilbert metric), each iteration adds a few roundings: (16 + 8 iters) u;
//   x_out     bitwise against the CPU collapse of the device pre (the same f32 operations in the same order);
//   end to end against cpu::hc_pre / hc_head: x_out must be a bf16 rounding within the propagated pre difference.
// hc_post is checked bitwise against cpu::hc_post + bf16 for a given mix. The hc_pre / hc_head paths (a CTA per
// token, per 4 tokens, a cluster per token, the generic kernel) are compared with each other bitwise: logits, mix and
// x_out; so is hc_pre with its Sinkhorn deferred to hc_sinkhorn, and hc_pre_norm with hc_pre then rms_norm.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/cpu/mhc.h"
#include "kernels/cuda/mhc/mhc.h"
#include "moe_combine_inputs.h"

using namespace dsv4;
using namespace dsv4::gpu_test;

namespace {

constexpr int64_t kIters = 20;
constexpr float kHcEps = 1e-6f, kNormEps = 1e-6f;
constexpr double kU = kF32Unit;

float sigmoid_cpu(float z) {
    return 1.0f / (1.0f + std::exp(-z));
}  // as kernels/cpu/mhc.cpp

struct Inputs {
    std::vector<float> streams, fn, base, scale;
};

Inputs make_inputs(Rng& rng, int64_t tokens, int64_t n, int64_t dim, int64_t rows, int64_t n_scale) {
    Inputs in;
    in.streams.resize(size_t(tokens * n * dim));
    for (int64_t t = 0; t < tokens; ++t) {
        const float s = std::ldexp(1.0f, int(rng.uniform(-4.0f, 4.0f)));
        for (int64_t i = 0; i < n * dim; ++i) in.streams[size_t(t * n * dim + i)] = round_bf16(rng.normal(s));
    }
    const float fn_std = 2.0f / std::sqrt(float(n * dim));
    for (int64_t i = 0; i < rows * n * dim; ++i) in.fn.push_back(rng.normal(fn_std));
    for (int64_t i = 0; i < rows; ++i) in.base.push_back(rng.normal(0.5f));
    for (int64_t i = 0; i < n_scale; ++i) in.scale.push_back(rng.uniform(0.5f, 2.0f));
    return in;
}

struct DeviceResult {
    std::vector<float> x_out, mix, logits;
};

// The mix parameters of the tests' device buffers (streams as bf16 bits), with the tests' iterations and epsilons.
cuda::HcMixParams mix_params(const cuda::DeviceBuffer<uint16_t>& streams, const cuda::DeviceBuffer<float>& fn,
                             const cuda::DeviceBuffer<float>& base, const cuda::DeviceBuffer<float>& scale,
                             __nv_bfloat16* x_out, cuda::DeviceBuffer<float>& mix, cuda::DeviceBuffer<float>& logits,
                             int64_t tokens, int64_t n, int64_t dim) {
    return {reinterpret_cast<const __nv_bfloat16*>(streams.get()),
            fn.get(),
            base.get(),
            scale.get(),
            x_out,
            mix.get(),
            logits.get(),
            tokens,
            n,
            dim,
            kIters,
            kHcEps,
            kNormEps};
}

// defer: hc_pre with defer_sinkhorn, then hc_sinkhorn on the same params.
DeviceResult run_mix(const Inputs& in, int64_t tokens, int64_t n, int64_t dim, int64_t rows, bool head,
                     cuda::detail::HcMixPath path = cuda::detail::HcMixPath::kAuto, bool defer = false) {
    auto d_streams = to_device(to_bf16(in.streams));
    auto d_fn = to_device(in.fn);
    auto d_base = to_device(in.base);
    auto d_scale = to_device(in.scale);
    auto d_x = poisoned<uint16_t>(size_t(tokens * dim));
    auto d_mix = poisoned<float>(size_t(tokens * rows));
    auto d_logits = poisoned<float>(size_t(tokens * rows));
    cuda::HcMixParams p = mix_params(d_streams, d_fn, d_base, d_scale, reinterpret_cast<__nv_bfloat16*>(d_x.get()),
                                     d_mix, d_logits, tokens, n, dim);
    p.defer_sinkhorn = defer;
    if (path != cuda::detail::HcMixPath::kAuto)
        cuda::detail::launch_hc_mix(p, head, nullptr, path);
    else if (head)
        cuda::hc_head(p, nullptr);
    else
        cuda::hc_pre(p, nullptr);
    if (defer) cuda::hc_sinkhorn(p, nullptr);
    return {from_bf16(to_host(d_x)), to_host(d_mix), to_host(d_logits)};
}

// All four stages of the header comment for hc_pre (head = false) or hc_head (head = true).
void check_mix_op(bool head) {
    Rng rng;
    struct Shape {
        int64_t n, dim;
    };
    for (int64_t tokens : {1, 7, 33})
        for (Shape sh : {Shape{4, 7168}, Shape{2, 320}, Shape{4, 64}, Shape{2, 4096 + 40}, Shape{1, 200}, Shape{3, 64},
                         Shape{3, 1000 + 3}, Shape{8, 128}}) {
            const int64_t n = sh.n, dim = sh.dim, W = n * dim, rows = head ? n : cuda::hc_pre_mix_size(n);
            const Inputs in = make_inputs(rng, tokens, n, dim, rows, head ? 1 : 3);
            const DeviceResult got = run_mix(in, tokens, n, dim, rows, head);
            const std::string what = std::string(head ? "hc_head" : "hc_pre") + " tokens " + std::to_string(tokens) +
                                     " n_hc " + std::to_string(n) + " dim " + std::to_string(dim);
            const double g = double((W + cuda::kHcThreads - 1) / cuda::kHcThreads + 10) * kU;
            Worst logits(what + " logits vs double"), pre_post(what + " pre/post vs cpu formulas on device logits"),
                comb(what + " comb vs cpu::sinkhorn on device logits"), pre_vs_cpu(what + " pre vs cpu::hc_pre");
            Bf16Bracket end_to_end(what + " x_out vs cpu reference");
            std::vector<float> x_collapse(static_cast<size_t>(tokens * dim));
            const cpu::HcParams hp{n, dim, kIters, kHcEps, kNormEps};
            for (int64_t t = 0; t < tokens; ++t) {
                const float* X = in.streams.data() + t * W;
                const float* l = got.logits.data() + t * rows;
                const float* mix = got.mix.data() + t * rows;
                // Stage 1: logits.
                double ss = 0.0;
                for (int64_t i = 0; i < W; ++i) ss += double(X[i]) * X[i];
                const double rho = 1.0 / std::sqrt(ss / double(W) + double(kNormEps));
                std::vector<double> logit_tol(static_cast<size_t>(rows));
                for (int64_t m = 0; m < rows; ++m) {
                    double dot = 0.0, abs_sum = 0.0;
                    for (int64_t i = 0; i < W; ++i) {
                        const double fv = double(in.fn[size_t(m * W + i)]) * X[i];
                        dot += fv;
                        abs_sum += std::fabs(fv);
                    }
                    const double want = dot * rho;
                    logit_tol[size_t(m)] = rho * g * abs_sum + std::fabs(want) * (g / 2 + 5 * kU);
                    logits.add(t * rows + m, l[m], want, logit_tol[size_t(m)]);
                }
                // Stage 2: pre/post/comb from the device logits with the CPU's formulas.
                std::vector<float> want_mix(static_cast<size_t>(rows));
                for (int64_t j = 0; j < n; ++j)
                    want_mix[size_t(j)] = sigmoid_cpu(l[j] * in.scale[0] + in.base[size_t(j)]) + kHcEps;
                if (!head) {
                    for (int64_t j = 0; j < n; ++j)
                        want_mix[size_t(n + j)] = 2.0f * sigmoid_cpu(l[n + j] * in.scale[1] + in.base[size_t(n + j)]);
                    for (int64_t jk = 0; jk < n * n; ++jk)
                        want_mix[size_t(2 * n + jk)] = l[2 * n + jk] * in.scale[2] + in.base[size_t(2 * n + jk)];
                    cpu::sinkhorn(want_mix.data() + 2 * n, n, kIters, kHcEps);
                }
                for (int64_t m = 0; m < rows; ++m) {
                    const double w = want_mix[size_t(m)];
                    if (m < 2 * n)
                        pre_post.add(t * rows + m, mix[m], w, 8 * kU * std::fabs(w));
                    else
                        comb.add(t * rows + m, mix[m], w, double(16 + 8 * kIters) * kU * std::fabs(w));
                }
                // Stage 3: the collapse of the device pre, as cpu::hc_pre does it.
                for (int64_t d = 0; d < dim; ++d) {
                    float acc = 0.0f;
                    for (int64_t j = 0; j < n; ++j) acc += mix[j] * X[j * dim + d];
                    x_collapse[size_t(t * dim + d)] = round_bf16(acc);
                }
                // Stage 4: end to end against the CPU op. pre = sigmoid(l s0 + b) + eps moves by at most
                // |s0| / 4 times the logit error plus the sigmoid ulps.
                std::vector<float> ref(static_cast<size_t>(dim));
                std::vector<double> dpre(static_cast<size_t>(n));
                for (int64_t j = 0; j < n; ++j)
                    dpre[size_t(j)] = 0.25 * std::fabs(in.scale[0]) * logit_tol[size_t(j)] + 8 * kU * std::fabs(mix[j]);
                if (head) {
                    cpu::hc_head(X, in.fn.data(), in.base.data(), in.scale.data(), hp, ref.data());
                } else {
                    cpu::HcMix cm;
                    cpu::hc_pre(X, in.fn.data(), in.base.data(), in.scale.data(), hp, ref.data(), cm);
                    for (int64_t j = 0; j < n; ++j)
                        pre_vs_cpu.add(t * n + j, mix[j], cm.pre[size_t(j)], dpre[size_t(j)]);
                }
                for (int64_t d = 0; d < dim; ++d) {
                    double dpre_x = 0.0, mag = 0.0;
                    for (int64_t j = 0; j < n; ++j) {
                        const double xj = std::fabs(X[j * dim + d]);
                        dpre_x += dpre[size_t(j)] * xj;
                        mag += std::fabs(double(mix[j])) * xj;
                    }
                    end_to_end.add(t * dim + d, got.x_out[size_t(t * dim + d)], ref[size_t(d)],
                                   dpre_x + 2 * double(n) * kU * mag);
                }
            }
            logits.expect_ok();
            pre_post.expect_ok();
            if (!head) {
                comb.expect_ok();
                pre_vs_cpu.expect_ok();
            }
            expect_bitwise_f32(what + " x_out vs collapse of the device pre",
                               std::vector<float>(got.x_out.begin(), got.x_out.end()), x_collapse);
            end_to_end.expect_ok();
        }
}

}  // namespace

TEST(GpuMhc, HcPreMatchesCpu) {
    DSV4_REQUIRE_GPU();
    check_mix_op(false);
}

TEST(GpuMhc, HcHeadMatchesCpu) {
    DSV4_REQUIRE_GPU();
    check_mix_op(true);
}

TEST(GpuMhc, SplitTiledAndRowGroupPathsMatchPerTokenBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    struct Shape {
        int64_t n, dim;
    };
    using cuda::detail::HcMixPath;
    for (bool head : {false, true})
        // The row groups' tiles: 1 token up to 32, 2 up to 128, 4 up to 1,024, then 8 (517 and 1,030: prefill-sized
        // pieces, last tiles of 1 and 6); group-major below 2,048 tokens, tile-major from there (2,051: last tile 3).
        for (int64_t tokens : {1, 3, 19, 8, 47, 130, 517, 1030, 2051})
            for (Shape sh : {Shape{4, 4096}, Shape{4, 7168}, Shape{2, 320}, Shape{4, 64}, Shape{2, 4096 + 40},
                             Shape{4, 1000 + 3}}) {
                const int64_t n = sh.n, dim = sh.dim, rows = head ? n : cuda::hc_pre_mix_size(n);
                const Inputs in = make_inputs(rng, tokens, n, dim, rows, head ? 1 : 3);
                const DeviceResult per_token = run_mix(in, tokens, n, dim, rows, head, HcMixPath::kPerToken);
                for (HcMixPath path : {HcMixPath::kSplit, HcMixPath::kTiled, HcMixPath::kRowGroups}) {
                    if (head && path == HcMixPath::kRowGroups) continue;  // hc_pre only
                    const DeviceResult other = run_mix(in, tokens, n, dim, rows, head, path);
                    const char* name = path == HcMixPath::kSplit   ? "split"
                                       : path == HcMixPath::kTiled ? "tiled"
                                                                   : "row groups";
                    const std::string what = std::string(head ? "hc_head " : "hc_pre ") + name +
                                             " vs per-token tokens " + std::to_string(tokens) + " n_hc " +
                                             std::to_string(n) + " dim " + std::to_string(dim);
                    expect_bitwise_f32(what + " logits", other.logits, per_token.logits);
                    expect_bitwise_f32(what + " mix", other.mix, per_token.mix);
                    expect_bitwise_f32(what + " x_out", other.x_out, per_token.x_out);
                }
            }
}

TEST(GpuMhc, GenericPathMatchesSpecialisedBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    struct Shape {
        int64_t n, dim;
    };
    using cuda::detail::HcMixPath;
    for (bool head : {false, true})
        for (int64_t tokens : {1, 19})
            for (Shape sh : {Shape{4, 4096}, Shape{2, 320}, Shape{4, 1000 + 3}}) {
                const int64_t n = sh.n, dim = sh.dim, rows = head ? n : cuda::hc_pre_mix_size(n);
                const Inputs in = make_inputs(rng, tokens, n, dim, rows, head ? 1 : 3);
                const DeviceResult generic = run_mix(in, tokens, n, dim, rows, head, HcMixPath::kGeneric);
                const DeviceResult per_token = run_mix(in, tokens, n, dim, rows, head, HcMixPath::kPerToken);
                const std::string what = std::string(head ? "hc_head" : "hc_pre") + " generic vs per-token tokens " +
                                         std::to_string(tokens) + " n_hc " + std::to_string(n) + " dim " +
                                         std::to_string(dim);
                expect_bitwise_f32(what + " logits", generic.logits, per_token.logits);
                expect_bitwise_f32(what + " mix", generic.mix, per_token.mix);
                expect_bitwise_f32(what + " x_out", generic.x_out, per_token.x_out);
            }
}

// hc_pre with the Sinkhorn normalization deferred and run by hc_sinkhorn afterwards (as the model does, on its side
// lane) gives the same logits, mix and x_out as hc_pre whole, on every path (n_hc 3: the generic kernels).
TEST(GpuMhc, DeferredSinkhornEqualsWholeHcPreBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    struct Shape {
        int64_t n, dim;
    };
    using cuda::detail::HcMixPath;
    for (int64_t tokens : {1, 3, 19, 300})
        for (Shape sh : {Shape{4, 4096}, Shape{2, 320}, Shape{3, 64}})
            for (HcMixPath path : {HcMixPath::kAuto, HcMixPath::kSplit, HcMixPath::kPerToken, HcMixPath::kTiled,
                                   HcMixPath::kRowGroups, HcMixPath::kGeneric}) {
                if (sh.n == 3 && path != HcMixPath::kAuto && path != HcMixPath::kGeneric) continue;
                const int64_t n = sh.n, dim = sh.dim, rows = cuda::hc_pre_mix_size(n);
                const Inputs in = make_inputs(rng, tokens, n, dim, rows, 3);
                const DeviceResult whole = run_mix(in, tokens, n, dim, rows, false, path);
                const DeviceResult deferred = run_mix(in, tokens, n, dim, rows, false, path, true);
                const std::string what = "hc_pre deferred Sinkhorn, path " + std::to_string(int(path)) + " tokens " +
                                         std::to_string(tokens) + " n_hc " + std::to_string(n);
                expect_bitwise_f32(what + " logits", deferred.logits, whole.logits);
                expect_bitwise_f32(what + " mix", deferred.mix, whole.mix);
                expect_bitwise_f32(what + " x_out", deferred.x_out, whole.x_out);
            }
}

// hc_pre_norm (hc_pre then the sub-layer's rms_norm of x in place, quantized for the FP8 GEMMs) against the two
// launches: x, its FP8 codes and scales, mix and logits bitwise. Decode batches (tokens <= 16: the split kernel's
// wide and 8-CTA clusters, the norm inside it), the split kernel forced at more tokens, the paths that keep two
// launches (17 and 40 tokens, n_hc 3), unweighted and unquantized norms, and widths that are not whole 128-column
// blocks or 256-column chunks.
TEST(GpuMhc, HcPreNormEqualsHcPreThenRmsNormBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    struct Shape {
        int64_t n, dim;
    };
    using cuda::detail::HcMixPath;
    for (int64_t tokens : {1, 3, 8, 9, 16, 17, 40})
        for (Shape sh : {Shape{4, 4096}, Shape{4, 7168}, Shape{2, 320}, Shape{4, 1000 + 3}, Shape{3, 64}})
            for (int variant = 0; variant < 3; ++variant) {  // weighted + quantized, weighted, neither
                const bool weighted = variant < 2, quantized = variant == 0;
                const int64_t n = sh.n, dim = sh.dim, rows = cuda::hc_pre_mix_size(n);
                const Inputs in = make_inputs(rng, tokens, n, dim, rows, 3);
                std::vector<float> weight;
                for (int64_t i = 0; i < dim; ++i) weight.push_back(rng.uniform(0.5f, 1.5f));
                auto d_streams = to_device(to_bf16(in.streams));
                auto d_fn = to_device(in.fn);
                auto d_base = to_device(in.base);
                auto d_scale = to_device(in.scale);
                auto d_weight = to_device(weight);
                const int64_t blocks = (dim + 127) / 128;
                struct Out {
                    std::vector<uint16_t> x;
                    std::vector<uint8_t> q;
                    std::vector<float> scales, mix, logits;
                };
                // path: kAuto through hc_pre_norm, else detail::launch_hc_mix with that path and the norm.
                auto run = [&](bool one_call, HcMixPath path) {
                    auto d_x = poisoned<uint16_t>(size_t(tokens * dim));
                    auto d_q = poisoned<uint8_t>(size_t(tokens * dim));
                    auto d_scales = poisoned<float>(size_t(tokens * blocks));
                    auto d_mix = poisoned<float>(size_t(tokens * rows));
                    auto d_logits = poisoned<float>(size_t(tokens * rows));
                    auto* x = reinterpret_cast<__nv_bfloat16*>(d_x.get());
                    const cuda::HcMixParams p =
                        mix_params(d_streams, d_fn, d_base, d_scale, x, d_mix, d_logits, tokens, n, dim);
                    const cuda::RmsNormParams norm{x,
                                                   weighted ? d_weight.get() : nullptr,
                                                   x,
                                                   tokens,
                                                   dim,
                                                   dim,
                                                   dim,
                                                   1e-6f,
                                                   quantized ? d_q.get() : nullptr,
                                                   quantized ? d_scales.get() : nullptr};
                    if (!one_call) {
                        cuda::hc_pre(p, nullptr);
                        cuda::rms_norm(norm, nullptr);
                    } else if (path == HcMixPath::kAuto) {
                        cuda::hc_pre_norm(p, norm, nullptr);
                    } else {
                        cuda::detail::launch_hc_mix(p, false, nullptr, path, &norm);
                    }
                    return Out{to_host(d_x), quantized ? to_host(d_q) : std::vector<uint8_t>{},
                               quantized ? to_host(d_scales) : std::vector<float>{}, to_host(d_mix), to_host(d_logits)};
                };
                const Out two = run(false, HcMixPath::kAuto);
                for (HcMixPath path : {HcMixPath::kAuto, HcMixPath::kSplit}) {
                    if (path == HcMixPath::kSplit && !cuda::detail::hc_specialised(n)) continue;
                    const Out one = run(true, path);
                    const std::string what = std::string("hc_pre_norm ") + (path == HcMixPath::kSplit ? "split " : "") +
                                             "tokens " + std::to_string(tokens) + " n_hc " + std::to_string(n) +
                                             " dim " + std::to_string(dim) + " variant " + std::to_string(variant);
                    expect_bitwise_bf16(what + " x", one.x, two.x);
                    expect_bitwise_bytes(what + " q", one.q, two.q);
                    expect_bitwise_f32(what + " scales", one.scales, two.scales);
                    expect_bitwise_f32(what + " mix", one.mix, two.mix);
                    expect_bitwise_f32(what + " logits", one.logits, two.logits);
                }
            }
    // The decode shapes take the one-kernel path (the comparison above is between two different launches there).
    cuda::HcMixParams v4{};
    v4.n_hc = 4, v4.dim = 7168, v4.tokens = 16;
    EXPECT_TRUE(cuda::detail::hc_pre_norm_fused(v4));
    v4.tokens = 17;
    EXPECT_FALSE(cuda::detail::hc_pre_norm_fused(v4));
    EXPECT_TRUE(cuda::detail::hc_pre_norm_fused(v4, HcMixPath::kSplit));
    v4.n_hc = 3, v4.tokens = 1;
    EXPECT_FALSE(cuda::detail::hc_pre_norm_fused(v4));
}

TEST(GpuMhc, HcPostMatchesCpuBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    for (int64_t tokens : {1, 7, 33, 65})  // 65: the vector kernel where dim % 8 == 0
        for (int64_t n : {2, 4, 1, 3, 8})
            for (int64_t dim : {64, 320, 7168, 1000 + 3}) {
                const int64_t mix_size = cuda::hc_pre_mix_size(n);
                const std::vector<float> f = rng.normal_bf16(tokens * dim);
                const std::vector<float> X = rng.normal_bf16(tokens * n * dim, 3.0f);
                std::vector<float> mix(static_cast<size_t>(tokens * mix_size));
                for (int64_t t = 0; t < tokens; ++t)
                    for (int64_t m = 0; m < mix_size; ++m)
                        mix[size_t(t * mix_size + m)] = m < n       ? rng.uniform(0.0f, 1.0f)
                                                        : m < 2 * n ? rng.uniform(0.0f, 2.0f)
                                                                    : rng.uniform(0.0f, 0.6f);
                auto d_f = to_device(to_bf16(f));
                auto d_X = to_device(to_bf16(X));
                auto d_mix = to_device(mix);
                auto d_out = poisoned<uint16_t>(size_t(tokens * n * dim));
                const cuda::HcPostParams post{reinterpret_cast<const __nv_bfloat16*>(d_f.get()),
                                              reinterpret_cast<const __nv_bfloat16*>(d_X.get()),
                                              d_mix.get(),
                                              reinterpret_cast<__nv_bfloat16*>(d_out.get()),
                                              tokens,
                                              n,
                                              dim};
                cuda::hc_post(post, nullptr);
                const std::vector<uint16_t> got = to_host(d_out);
                // The generic kernel forced at 2 and 4 (it runs by itself for other n) gives the same bits.
                auto d_generic = poisoned<uint16_t>(size_t(tokens * n * dim));
                cuda::HcPostParams forced = post;
                forced.out = reinterpret_cast<__nv_bfloat16*>(d_generic.get());
                cuda::detail::launch_hc_post(forced, nullptr, /*generic=*/true);
                std::vector<float> want(static_cast<size_t>(tokens * n * dim));
                const cpu::HcParams hp{n, dim, kIters, kHcEps, kNormEps};
                for (int64_t t = 0; t < tokens; ++t) {
                    cpu::HcMix cm;
                    const float* m = mix.data() + t * mix_size;
                    cm.pre.assign(m, m + n);
                    cm.post.assign(m + n, m + 2 * n);
                    cm.comb.assign(m + 2 * n, m + mix_size);
                    cpu::hc_post(f.data() + t * dim, X.data() + t * n * dim, cm, hp, want.data() + t * n * dim);
                }
                const std::string what = "hc_post tokens " + std::to_string(tokens) + " n_hc " + std::to_string(n) +
                                         " dim " + std::to_string(dim);
                expect_bitwise_bf16(what, got, to_bf16(want));
                expect_bitwise_bf16(what + " generic kernel", to_host(d_generic), to_bf16(want));
            }
}

// hc_post_of_moe (f computed from the MoE's parts in hc_post's kernel) against moe_combine then hc_post, bit for bit:
// the streams out and f itself, with dropped assignments (expert or slot -1) and unsorted experts
// (moe_combine_inputs.h); n_hc 3 takes the two launches. From 64 tokens on, dims that are multiples of 8 take the
// kernel of 8 columns a thread; the rest take the kernel of one (hc_post's own test above covers both against the CPU).
TEST(GpuMhc, HcPostOfMoeEqualsCombineThenPostBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    struct Case {
        int64_t tokens, n, dim;
        int32_t k;
    };
    for (Case c : {Case{1, 4, 4096, 6}, Case{40, 4, 4096, 6}, Case{70, 4, 4096, 6}, Case{7, 4, 1003, 6},
                   Case{33, 2, 320, 2}, Case{3, 4, 64, 16}, Case{5, 3, 96, 6}}) {
        const int64_t mix_size = cuda::hc_pre_mix_size(c.n);
        const MoeCombineInputs moe = random_moe_combine_inputs(rng, c.tokens, c.dim, c.k, 64);
        const std::vector<float> X = rng.normal_bf16(c.tokens * c.n * c.dim, 3.0f);
        std::vector<float> mix(static_cast<size_t>(c.tokens * mix_size));
        for (float& m : mix) m = rng.uniform(0.0f, 1.0f);
        auto d_X = to_device(to_bf16(X));
        auto d_mix = to_device(mix);
        auto post = [&](const cuda::DeviceBuffer<uint16_t>& f, cuda::DeviceBuffer<uint16_t>& out) {
            return cuda::HcPostParams{reinterpret_cast<const __nv_bfloat16*>(f.get()),
                                      reinterpret_cast<const __nv_bfloat16*>(d_X.get()),
                                      d_mix.get(),
                                      reinterpret_cast<__nv_bfloat16*>(out.get()),
                                      c.tokens,
                                      c.n,
                                      c.dim};
        };
        auto f_want = poisoned<uint16_t>(size_t(c.tokens * c.dim));
        auto out_want = poisoned<uint16_t>(size_t(c.tokens * c.n * c.dim));
        cuda::moe_combine(moe.params(f_want), nullptr);
        cuda::hc_post(post(f_want, out_want), nullptr);
        auto f_got = poisoned<uint16_t>(size_t(c.tokens * c.dim));
        auto out_got = poisoned<uint16_t>(size_t(c.tokens * c.n * c.dim));
        auto unused = poisoned<uint16_t>(size_t(c.tokens * c.dim));  // p.f: never read
        cuda::hc_post_of_moe(post(unused, out_got), moe.params(f_got), nullptr);
        const std::string what = "hc_post_of_moe tokens " + std::to_string(c.tokens) + " n_hc " + std::to_string(c.n) +
                                 " dim " + std::to_string(c.dim) + " k " + std::to_string(c.k);
        expect_bitwise_bf16(what + ": streams", to_host(out_got), to_host(out_want));
        expect_bitwise_bf16(what + ": f", to_host(f_got), to_host(f_want));
    }
}
