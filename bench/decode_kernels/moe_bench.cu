// The MoE benches: moe_gemm's grids at one token, the routed experts on the tensor cores (decode batches, row tiles,
// prefill pieces, MXFP4 and NVFP4), and moe_combine.
#include "common.cuh"

namespace dsv4::bench {

// Routed experts at one token: 6 of 256 MXFP4 experts [n, k], 8 routings rotated (> L2), slot bound 1 or 6.
void bench_moe(const char* name, int64_t n, int64_t k, int slot_bound) {
    const int64_t experts = 256, active = 6;
    constexpr int kRoutings = 8;
    DeviceBuffer<uint8_t> w{size_t(experts * n * k / 2)}, scale{size_t(experts * n * k / 32)};
    fill_bytes<<<1024, 256>>>(w.get(), w.size(), 5, 0, 1);
    fill_bytes<<<1024, 256>>>(scale.get(), scale.size(), 6, 0xFF, 0xFF);  // no 0xFF (E8M0 NaN)
    DeviceBuffer<uint8_t> a{size_t(k)};
    fill_bytes<<<64, 256>>>(a.get(), a.size(), 7, 0x7F, 0x7F);  // no e4m3 NaN
    DeviceBuffer<float> a_scale{size_t((k + 127) / 128)};
    std::vector<float> ones(a_scale.size(), 1.0f / 64);
    a_scale.upload(ones.data(), ones.size());
    std::vector<DeviceBuffer<int32_t>> offsets;
    for (int v = 0; v < kRoutings; ++v) {  // experts spread over the whole range, as a router picks them
        std::vector<int32_t> o(size_t(experts + 1), 0);
        for (int64_t e = 0; e < experts; ++e)
            o[size_t(e + 1)] = o[size_t(e)] + ((e * 7 + v * 5) % 43 == 0 && o[size_t(e)] < active ? 1 : 0);
        offsets.emplace_back(o.size());
        offsets.back().upload(o.data(), o.size());
    }
    std::vector<int32_t> rows(size_t(active), 0);
    DeviceBuffer<int32_t> row_index{rows.size()};
    row_index.upload(rows.data(), rows.size());
    DeviceBuffer<__nv_bfloat16> y_new{size_t(active * n)}, y_old{size_t(active * n)};
    check_launch(0);
    auto params = [&](int i, __nv_bfloat16* y, MoeGemmPath path = MoeGemmPath::kCudaCore) {
        MoeGemmParams p;
        p.path = path;
        p.a = a.get();
        p.a_scale = a_scale.get();
        p.row_index = row_index.get();
        p.expert_offsets = offsets[size_t(i % kRoutings)].get();
        p.w = w.get();
        p.w_scale = scale.get();
        p.y = y;
        p.experts = experts;
        p.n = n;
        p.k = k;
        p.max_slots_per_expert = slot_bound;
        return p;
    };
    const MoeGemmConfig config = moe_gemm_config(experts, n, k, slot_bound);
    const double compact = graph_us([&](int i, cudaStream_t s) { moe_gemm(params(i, y_new.get()), s); });
    const double strided = graph_us([&](int i, cudaStream_t s) {
        DSV4_CUDA_CHECK(detail::launch_moe_gemm_strided(params(i, y_old.get()), config, s));
    });
    const double mma = graph_us([&](int i, cudaStream_t s) { moe_gemm(params(i, y_new.get(), MoeGemmPath::kMma), s); });
    bool same = true;
    for (int i = 0; i < kRoutings; ++i) {
        moe_gemm(params(i, y_new.get()), nullptr);
        DSV4_CUDA_CHECK(detail::launch_moe_gemm_strided(params(i, y_old.get()), config, nullptr));
        DSV4_CUDA_CHECK(cudaDeviceSynchronize());
        same = same && same_bits(y_new, y_old);
    }
    const double bytes = double(active) * double(n * k / 2 + n * k / 32) + double(k) + 2.0 * double(active * n);
    std::printf("%-8s %6lld %6lld %5d %12.2f %12.2f %8.1fx %9.0f   %s   tensor cores %.2f us (%.0f GB/s)\n", name,
                (long long)n, (long long)k, config.m_tile, strided, compact, strided / compact,
                bytes / (compact * 1e-6) / 1e9, verdict(same), mma, bytes / (mma * 1e-6) / 1e9);
}

// The tensor-core routed experts at a batch: `tokens` tokens each routed to 6 distinct experts of 256 (a fixed hash,
// 8 routings rotated so no routing's weights stay in L2), w1 and w3 in one pair launch ([2048, 4096] each) and w2
// ([4096, 2048]) as the executor launches them. Bytes: the active experts' weights and scales (each read once), the
// gathered activations and the outputs. `hash`: FNV-1a of routing 0's outputs, to compare two builds' bits.
// variants: the prefill kernels side by side; row_tiles: the warp-MMA kernel's row tiles side by side (decode
// passes); topk: experts per token (3 of 256: one of two expert-parallel GPUs' share of a V4-Flash token's 6 of 256).
// variants: the warp-MMA kernel against the launcher's choice; single_slot: the kernel's passes for any slots against
// its single-slot passes (batch 1); row_tiles: its row tiles. nvfp4: the experts as NVIDIA's NVFP4 release holds them
// (e4m3 scales a 16 columns, powers of two as its lossless cast from MXFP4 gives, and a power-of-two global).
void bench_moe_mma(int64_t tokens, bool variants, bool row_tiles, int64_t topk, bool single_slot, bool nvfp4) {
    const int64_t experts = 256, dim = 4096, inter = 2048, block = nvfp4 ? 16 : 32;
    constexpr int kRoutings = 8;
    DeviceBuffer<uint8_t> w1{size_t(experts * inter * dim / 2)}, w3{w1.size()}, w2{w1.size()};
    DeviceBuffer<uint8_t> s1{size_t(experts * inter * dim / block)}, s3{s1.size()}, s2{s1.size()};
    uint32_t seed = 20;
    for (DeviceBuffer<uint8_t>* b : {&w1, &w3, &w2}) fill_bytes<<<1024, 256>>>(b->get(), b->size(), seed++, 0, 1);
    // Checkpoint-like block scales, 2^-9 .. 2^-3 (codes 118-124, as tests/gpu's random_fp4_weight draws them; dsv4
    // bench's experts have one code a matrix, ~120): until 2026-12-04 these were random bytes, whose codes above 240
    // sent ~38 % of the warpgroup kernel's scale words down its slow path and kept its wide passes from ever folding.
    // NVFP4: e4m3 2^-3 .. 2^3 (exponent fields 4-10) under a global of 2^-6, the same products.
    for (DeviceBuffer<uint8_t>* b : {&s1, &s3, &s2}) {
        if (nvfp4)
            fill_codes<<<1024, 256>>>(b->get(), b->size(), seed++, 4, 7, 3);
        else
            fill_codes<<<1024, 256>>>(b->get(), b->size(), seed++, 118, 7);
    }
    std::vector<float> globals(size_t(experts), 0x1p-6f);
    DeviceBuffer<float> global{globals.size()};
    global.upload(globals.data(), globals.size());
    DeviceBuffer<uint8_t> x{size_t(tokens * dim)}, h{size_t(tokens * topk * inter)};
    fill_bytes<<<256, 256>>>(x.get(), x.size(), seed++, 0x7F, 0x7F);
    fill_bytes<<<256, 256>>>(h.get(), h.size(), seed++, 0x7F, 0x7F);
    DeviceBuffer<float> x_scale{size_t(tokens * dim / 128)}, h_scale{size_t(tokens * topk * inter / 128)};
    std::vector<float> sixty_fourth(x_scale.size() + h_scale.size(), 1.0f / 64);
    x_scale.upload(sixty_fourth.data(), x_scale.size());
    h_scale.upload(sixty_fourth.data(), h_scale.size());
    std::vector<DeviceBuffer<int32_t>> offsets, row_index;
    std::vector<int64_t> active(kRoutings, 0);
    int max_slots = 1;
    for (int v = 0; v < kRoutings; ++v) {
        std::vector<std::vector<int32_t>> by_expert(static_cast<size_t>(experts));
        for (int64_t t = 0; t < tokens; ++t)
            for (int64_t j = 0, picked = 0; picked < topk; ++j) {
                const uint32_t e = uint32_t(uint64_t(t * 7919 + j * 104729 + v * 15485863) * 2654435761u) >> 24;
                if (!by_expert[e].empty() && by_expert[e].back() == int32_t(t)) continue;  // picked already
                by_expert[e].push_back(int32_t(t));
                ++picked;
            }
        std::vector<int32_t> o{0}, r;
        for (const auto& rows : by_expert) {
            r.insert(r.end(), rows.begin(), rows.end());
            o.push_back(int32_t(r.size()));
            active[size_t(v)] += rows.empty() ? 0 : 1;
            max_slots = std::max(max_slots, int(rows.size()));
        }
        offsets.emplace_back(o.size());
        offsets.back().upload(o.data(), o.size());
        row_index.emplace_back(r.size());
        row_index.back().upload(r.data(), r.size());
    }
    double mean_active = 0;
    for (int64_t a : active) mean_active += double(a) / kRoutings;
    const int64_t slots = tokens * topk;
    DeviceBuffer<__nv_bfloat16> y1{size_t(slots * inter)}, y3{y1.size()}, y2{size_t(slots * dim)};
    check_launch(0);
    auto params = [&](int i, bool down, bool tensor_copies = true) {
        MoeGemmParams p;
        p.a = down ? h.get() : x.get();
        p.a_scale = down ? h_scale.get() : x_scale.get();
        p.row_index = down ? nullptr : row_index[size_t(i % kRoutings)].get();
        p.expert_offsets = offsets[size_t(i % kRoutings)].get();
        p.w = down ? w2.get() : w1.get();
        p.w_scale = down ? s2.get() : s1.get();
        p.y = down ? y2.get() : y1.get();
        p.format = nvfp4 ? ExpertFormat::kNvfp4 : ExpertFormat::kMxfp4;
        p.w_global = nvfp4 ? global.get() : nullptr;
        if (!down) p.second = {w3.get(), s3.get(), nvfp4 ? global.get() : nullptr, y3.get()};
        p.tensor_copies = tensor_copies;
        p.experts = experts;
        p.n = down ? dim : inter;
        p.k = down ? inter : dim;
        p.max_slots_per_expert = int(tokens);
        p.expected_slots_per_expert = int((2 * slots + experts - 1) / experts);
        p.expected_active_experts = int(std::lround(mean_active));
        return p;
    };
    const double matrix_bytes = double(inter * dim / 2 + inter * dim / block);
    auto outputs_hash = [&](bool down) { return down ? device_bytes_hash({&y2}) : device_bytes_hash({&y1, &y3}); };
    for (bool down : {false, true}) {
        const double bytes = mean_active * matrix_bytes * (down ? 1 : 2) +
                             double(slots) * double(down ? inter + dim * 2 : dim + 2 * inter * 2);
        if (row_tiles) {
            uint64_t reference = 0;
            for (int row_groups : {4, 2, 1}) {
                auto launch = [&](int i, cudaStream_t s) {
                    DSV4_CUDA_CHECK(
                        detail::launch_moe_mma(params(i, down), detail::MoeMmaVariant::kWarpMma, s, row_groups));
                };
                const double us = graph_us(launch);
                launch(0, nullptr);
                const uint64_t hash = outputs_hash(down);
                if (row_groups == 4)
                    reference = hash;
                else if (hash != reference)
                    ++failures;
                std::printf("%-8s %6lld %4lld %8.1f %5d rows %10.2f %9.0f   %016llx %s\n", down ? "w2" : "w1+w3",
                            (long long)tokens, (long long)topk, mean_active, 16 * row_groups, us,
                            bytes / (us * 1e-6) / 1e9, (unsigned long long)hash, hash == reference ? "" : "DIFFERS");
            }
            continue;
        }
        if (!variants) {
            const double us = graph_us([&](int i, cudaStream_t s) { moe_gemm(params(i, down), s); });
            moe_gemm(params(0, down), nullptr);
            const uint64_t hash = outputs_hash(down);
            std::printf("%-8s %6lld %8.1f %8d %10.2f %9.0f   %016llx\n", down ? "w2" : "w1+w3", (long long)tokens,
                        mean_active, max_slots, us, bytes / (us * 1e-6) / 1e9, (unsigned long long)hash);
            continue;
        }
        // Prefill passes: the warp-MMA kernel against the launcher's choice (the warpgroup kernel on sm_90), outputs
        // compared bitwise (hashes of routing 0's outputs).
        const double flops = 2.0 * double(slots) * double(inter) * double(dim) * (down ? 1 : 2);
        uint64_t reference = 0;
        using V = detail::MoeMmaVariant;
        // (variant, tensor copies for the single-slot passes); the first is the reference
        const std::vector<std::pair<V, bool>> runs =
            single_slot
                ? std::vector<std::pair<V, bool>>{{V::kAllSlots, true}, {V::kWarpMma, false}, {V::kWarpMma, true}}
            : g_chosen_only ? std::vector<std::pair<V, bool>>{{V::kChosen, true}}
                            : std::vector<std::pair<V, bool>>{{V::kWarpMma, true}, {V::kChosen, true}};
        for (auto [v, tensor] : runs) {
            const double us = graph_us(
                [&](int i, cudaStream_t s) { DSV4_CUDA_CHECK(detail::launch_moe_mma(params(i, down, tensor), v, s)); });
            DSV4_CUDA_CHECK(detail::launch_moe_mma(params(0, down, tensor), v, nullptr));
            const uint64_t hash = outputs_hash(down);
            if (v == runs.front().first)
                reference = hash;
            else if (hash != reference)
                ++failures;
            const bool tensor_taken = single_slot && tensor && detail::moe_mma_tensor_copies(params(0, down));
            const char* name = v == V::kAllSlots                              ? "any-slot passes"
                               : tensor_taken                                 ? "single-slot passes, tensor copies"
                               : single_slot                                  ? "single-slot passes, 16-byte copies"
                               : v == V::kWarpMma                             ? "warp mma"
                               : detail::moe_mma_takes_wgmma(params(0, down)) ? "wgmma"
                                                                              : "chosen (warp mma)";
            std::printf("%-8s %6lld %8.1f %8d %10.2f %9.0f %9.1f   %016llx %s %s\n", down ? "w2" : "w1+w3",
                        (long long)tokens, mean_active, max_slots, us, bytes / (us * 1e-6) / 1e9,
                        flops / (us * 1e-6) / 1e12, (unsigned long long)hash, name, hash == reference ? "" : "DIFFERS");
        }
    }
}

void bench_combine() {
    const int64_t dim = 4096, k = 6;
    DeviceBuffer<__nv_bfloat16> routed{size_t(k * dim)}, shared{size_t(dim)}, out{size_t(dim)};
    fill_bf16<<<64, 256>>>(routed.get(), routed.size(), 9);
    fill_bf16<<<64, 256>>>(shared.get(), shared.size(), 10);
    const std::vector<int32_t> experts = {200, 3, 77, 150, 9, 31}, slots = {5, 0, 3, 4, 1, 2};
    DeviceBuffer<int32_t> d_experts{experts.size()}, d_slots{slots.size()};
    d_experts.upload(experts.data(), experts.size());
    d_slots.upload(slots.data(), slots.size());
    check_launch(0);
    const MoeCombineParams p = combine_params(routed, d_experts, d_slots, shared, out, 1, dim, k);
    const double us = graph_us([&](int, cudaStream_t s) { moe_combine(p, s); });
    std::printf("moe_combine, 1 token, dim 4096, k 6: %.2f us (CPU-reference check: tests/gpu/moe_expert_test)\n", us);
}

}  // namespace dsv4::bench
