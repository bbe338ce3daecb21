// moe_gemm against cpu::linear per expert on the same FP8-quantized activations (act_quant_fp8 on the device,
// cpu::fp8_round_trip on the host), MXFP4 and NVFP4 experts stacked [E, N, K/2], tokens gathered through a
// routing (row_index + expert offsets) with idle experts and an expert holding more than 16 slots; outputs
// poisoned with NaN before each launch.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "gemm_test_common.h"
#include "kernels/cuda/moe_gemm/moe_gemm.h"

namespace dsv4::gpu_test {
namespace {

void run_case(Rng& rng, int64_t tokens, int64_t experts, int64_t topk, int64_t n, int64_t k, bool nvfp4,
              bool skewed) {
    std::vector<HostWeight> w;
    for (int64_t e = 0; e < experts; ++e) w.push_back(random_fp4_weight(rng, n, k, nvfp4));
    const std::vector<float> x = random_activations(rng, tokens, k);
    const std::vector<float> xq = fp8_quantized_reference(x, tokens, k);

    // Routing: each token picks topk distinct experts (skewed: expert 0 always, when it exists).
    std::vector<std::vector<int32_t>> by_expert(static_cast<size_t>(experts));
    for (int64_t t = 0; t < tokens; ++t) {
        std::vector<int64_t> ids(static_cast<size_t>(experts));
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin() + (skewed ? 1 : 0), ids.end(), rng.engine());
        for (int64_t j = 0; j < topk; ++j) by_expert[size_t(ids[size_t(j)])].push_back(int32_t(t));
    }
    std::vector<int32_t> offsets{0}, row_index;
    int max_slots = 1;
    for (const auto& rows : by_expert) {
        row_index.insert(row_index.end(), rows.begin(), rows.end());
        offsets.push_back(int32_t(row_index.size()));
        max_slots = std::max(max_slots, int(rows.size()));
    }
    const int64_t slots = int64_t(row_index.size());

    std::vector<float> ref(size_t(slots * n)), absdot(ref.size());
    const std::vector<float> xq_abs = abs_values(xq);
    for (int64_t e = 0; e < experts; ++e)
        for (int32_t p = offsets[size_t(e)]; p < offsets[size_t(e) + 1]; ++p) {
            const int64_t row = row_index[size_t(p)];
            cpu::linear(test_pool(), xq.data() + row * k, 1, w[size_t(e)].view, ref.data() + p * n);
            cpu::linear(test_pool(), xq_abs.data() + row * k, 1, w[size_t(e)].abs_view, absdot.data() + p * n);
        }

    std::vector<uint8_t> data, scale;
    std::vector<float> global;
    for (const auto& we : w) {
        data.insert(data.end(), we.data.begin(), we.data.end());
        scale.insert(scale.end(), we.scale.begin(), we.scale.end());
        global.push_back(we.global_scale);
    }
    DeviceFp8Act a = quantize_on_device(x, tokens, k);
    auto wd = to_device(data);
    auto sd = to_device(scale);
    auto gd = to_device(global);
    auto od = to_device(offsets);
    auto rd = to_device(row_index);
    auto y = poisoned<uint16_t>(ref.size());
    cuda::MoeGemmParams p;
    p.a = a.q.get();
    p.a_scale = a.scale.get();
    p.row_index = rd.get();
    p.expert_offsets = od.get();
    p.format = nvfp4 ? cuda::ExpertFormat::kNvfp4 : cuda::ExpertFormat::kMxfp4;
    p.w = wd.get();
    p.w_scale = sd.get();
    p.w_global = nvfp4 ? gd.get() : nullptr;
    p.y = reinterpret_cast<__nv_bfloat16*>(y.get());
    p.experts = experts;
    p.n = n;
    p.k = k;
    p.max_slots_per_expert = max_slots;
    cuda::moe_gemm(p, nullptr);
    char what[192];
    std::snprintf(what, sizeof what, "moe_gemm %s tokens=%lld experts=%lld topk=%lld N=%lld K=%lld max_slots=%d",
                  nvfp4 ? "nvfp4" : "mxfp4", (long long)tokens, (long long)experts, (long long)topk, (long long)n,
                  (long long)k, max_slots);
    expect_bf16_close(what, to_host(y), ref, absdot, k);
}

TEST(MoeGemm, Mxfp4MatchesCpuLinear) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    run_case(rng, 1, 16, 6, 2048, 2048, false, false);  // V4-Flash w1/w3 decode
    run_case(rng, 3, 8, 2, 4096, 2048, false, false);   // V4-Flash w2 (stored [4096, 1024] packed)
    run_case(rng, 17, 4, 2, 200, 352, false, true);     // expert 0 holds 17 slots
    run_case(rng, 200, 8, 3, 96, 2080, false, true);
}

TEST(MoeGemm, Nvfp4MatchesCpuLinear) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    run_case(rng, 1, 16, 6, 2048, 2048, true, false);
    run_case(rng, 17, 4, 2, 200, 352, true, true);
    run_case(rng, 200, 8, 3, 96, 2080, true, true);
}

}  // namespace
}  // namespace dsv4::gpu_test
