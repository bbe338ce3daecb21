// The mHC benches: hc_pre / hc_head by path over token counts, and the post-mix.
#include "common.cuh"

namespace dsv4::bench {
namespace {

const char* path_name(detail::HcMixPath path) {
    switch (path) {
        case detail::HcMixPath::kSplit:
            return "split";
        case detail::HcMixPath::kTiled:
            return "tiled";
        case detail::HcMixPath::kRowGroups:
            return "rows";
        default:
            return "token";
    }
}

}  // namespace

// hc_pre (head = false) or hc_head at n_hc = 4, dim = 4096, `tokens` tokens.
void bench_hc(bool head, int64_t tokens) {
    const FlashMixer mixer(tokens, head);
    const int64_t dim = mixer.kDim, width = mixer.kWidth, rows = mixer.rows;
    DeviceBuffer<__nv_bfloat16> x_split{size_t(tokens * dim)}, x_token(size_t(tokens * dim)),
        x_tiled(size_t(tokens * dim)), x_rows(size_t(tokens * dim));
    DeviceBuffer<float> mix_split{size_t(tokens * rows)}, mix_token{size_t(tokens * rows)},
        mix_tiled{size_t(tokens * rows)}, mix_rows{size_t(tokens * rows)};
    auto params = [&](int i, __nv_bfloat16* x, float* mix) { return mixer.params(i, x, mix); };
    const double split = graph_us([&](int i, cudaStream_t s) {
        detail::launch_hc_mix(params(i, x_split.get(), mix_split.get()), head, s, detail::HcMixPath::kSplit);
    });
    const double per_token = graph_us([&](int i, cudaStream_t s) {
        detail::launch_hc_mix(params(i, x_token.get(), mix_token.get()), head, s, detail::HcMixPath::kPerToken);
    });
    const double tiled = graph_us([&](int i, cudaStream_t s) {
        detail::launch_hc_mix(params(i, x_tiled.get(), mix_tiled.get()), head, s, detail::HcMixPath::kTiled);
    });
    // The row groups (hc_pre only).
    const double row_groups = head ? 0.0 : graph_us([&](int i, cudaStream_t s) {
        detail::launch_hc_mix(params(i, x_rows.get(), mix_rows.get()), head, s, detail::HcMixPath::kRowGroups);
    });
    // hc_pre_norm where the split kernel runs the norm too (hc_pre of up to 16 tokens): the fused launch as the model
    // makes it (weighted, quantized for the FP8 GEMMs), beside hc_pre then rms_norm, the two launches it replaces.
    const bool fused = !head && tokens <= 16;
    DeviceBuffer<float> norm_weight{size_t(dim)}, mix_norm{size_t(tokens * rows)}, mix_two{size_t(tokens * rows)},
        scales_norm{size_t(tokens * dim / 128)}, scales_two{size_t(tokens * dim / 128)};
    DeviceBuffer<__nv_bfloat16> x_norm(size_t(tokens * dim)), x_two(size_t(tokens * dim));
    DeviceBuffer<uint8_t> q_norm{size_t(tokens * dim)}, q_two{size_t(tokens * dim)};
    fill_f32<<<16, 256>>>(norm_weight.get(), norm_weight.size(), 5, 1.0f);
    auto norm_of = [&](__nv_bfloat16* x, uint8_t* q, float* q_scales) {
        return RmsNormParams{x, norm_weight.get(), x, tokens, dim, dim, dim, 1e-6f, q, q_scales};
    };
    const RmsNormParams fused_norm = norm_of(x_norm.get(), q_norm.get(), scales_norm.get()),
                        two_norm = norm_of(x_two.get(), q_two.get(), scales_two.get());
    const double norm_fused = !fused ? 0.0 : graph_us([&](int i, cudaStream_t s) {
        detail::launch_hc_mix(params(i, x_norm.get(), mix_norm.get()), false, s, detail::HcMixPath::kSplit,
                              &fused_norm);
    });
    const double norm_two = !fused ? 0.0 : graph_us([&](int i, cudaStream_t s) {
        detail::launch_hc_mix(params(i, x_two.get(), mix_two.get()), false, s, detail::HcMixPath::kSplit);
        rms_norm(two_norm, s);
    });
    bool same = true;
    for (int i = 0; i < 3; ++i) {
        if (fused) {
            detail::launch_hc_mix(params(i, x_norm.get(), mix_norm.get()), false, nullptr, detail::HcMixPath::kSplit,
                                  &fused_norm);
            detail::launch_hc_mix(params(i, x_two.get(), mix_two.get()), false, nullptr, detail::HcMixPath::kSplit);
            rms_norm(two_norm, nullptr);
        }
        detail::launch_hc_mix(params(i, x_split.get(), mix_split.get()), head, nullptr, detail::HcMixPath::kSplit);
        detail::launch_hc_mix(params(i, x_token.get(), mix_token.get()), head, nullptr, detail::HcMixPath::kPerToken);
        detail::launch_hc_mix(params(i, x_tiled.get(), mix_tiled.get()), head, nullptr, detail::HcMixPath::kTiled);
        if (!head)
            detail::launch_hc_mix(params(i, x_rows.get(), mix_rows.get()), head, nullptr,
                                  detail::HcMixPath::kRowGroups);
        DSV4_CUDA_CHECK(cudaDeviceSynchronize());
        same = same && same_bits(x_split, x_token) && same_bits(mix_split, mix_token) && same_bits(x_tiled, x_token) &&
               same_bits(mix_tiled, mix_token) &&
               (head || (same_bits(x_rows, x_token) && same_bits(mix_rows, mix_token))) &&
               (!fused || (same_bits(x_norm, x_two) && same_bits(mix_norm, mix_two) && same_bits(q_norm, q_two) &&
                           same_bits(scales_norm, scales_two)));
    }
    const double bytes = double(rows * width * 4) + double(tokens) * double(width * 2 + dim * 2 + rows * 4);
    std::printf("%-8s %6lld %12.2f %12.2f %10.2f %10.2f %10.2f %10.2f %8.1fx %9.0f   %-8s %s\n",
                head ? "hc_head" : "hc_pre", (long long)tokens, per_token, split, tiled, row_groups, norm_fused,
                norm_two, per_token / split, bytes / (split * 1e-6) / 1e9,
                path_name(detail::hc_mix_auto_path(tokens, head)), verdict(same));
}

// The MoE's mHC post-mix (hc_post_of_moe: the combine of 6 routed rows and the shared row, then the post-mix of 4
// streams) at V4-Flash's width, us per launch and GB/s over the bytes it must move; the hash of the streams out and the
// combined rows tells two builds' bits apart (bench only: tests/gpu/mhc_test.cpp checks them).
void bench_hc_post(int64_t tokens) {
    const int64_t n = 4, dim = 4096, k = 6, mix_size = hc_pre_mix_size(n), slots = tokens * k;
    DeviceBuffer<__nv_bfloat16> streams{size_t(tokens * n * dim)}, out{size_t(tokens * n * dim)},
        routed{size_t(slots * dim)}, shared{size_t(tokens * dim)}, combined{size_t(tokens * dim)};
    fill_bf16<<<256, 256>>>(streams.get(), streams.size(), 11);
    fill_bf16<<<256, 256>>>(routed.get(), routed.size(), 12);
    fill_bf16<<<256, 256>>>(shared.get(), shared.size(), 13);
    DeviceBuffer<float> mix{size_t(tokens * mix_size)};
    fill_f32<<<64, 256>>>(mix.get(), mix.size(), 14, 1.0f);
    std::vector<int32_t> experts(static_cast<size_t>(slots)), assigned(static_cast<size_t>(slots));
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t j = 0; j < k; ++j) {  // distinct experts a token, not in ascending order; slot = t k + j
            experts[size_t(t * k + j)] = int32_t((t * 7 + (k - j) * 37) % 256);
            assigned[size_t(t * k + j)] = int32_t(t * k + j);
        }
    DeviceBuffer<int32_t> experts_d{experts.size()}, assigned_d{assigned.size()};
    experts_d.upload(experts.data(), experts.size());
    assigned_d.upload(assigned.data(), assigned.size());
    check_launch(0);
    const HcPostParams post{nullptr, streams.get(), mix.get(), out.get(), tokens, n, dim};
    const MoeCombineParams combine = combine_params(routed, experts_d, assigned_d, shared, combined, tokens, dim, k);
    const double us = graph_us([&](int, cudaStream_t s) { hc_post_of_moe(post, combine, s); });
    hc_post_of_moe(post, combine, nullptr);
    const uint64_t hash = device_bytes_hash({&out, &combined});
    // Streams in and out, the routed and shared rows in, the combined row out (bf16); mix and routing are small.
    const double bytes = double(tokens) * double(dim) * 2.0 * double(2 * n + k + 2);
    std::printf("%-8s %6lld %10.2f %9.0f   %016llx\n", "hc_post", (long long)tokens, us, bytes / (us * 1e-6) / 1e9,
                (unsigned long long)hash);
}

}  // namespace dsv4::bench
