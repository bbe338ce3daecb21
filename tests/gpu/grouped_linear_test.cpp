// grouped_linear (wo_a) against Precision::grouped_linear (reference numerics = the same f32 sums before the bf16
// rounding) on bf16 activations and FP8 weights; outputs poisoned with NaN before each launch. The generic path
// (in % 16 != 0: small models) sums in the reference's order, so it is held to the bf16 rounding of the reference
// bit for bit.
#include <gtest/gtest.h>

#include "gemm_test_common.h"
#include "kernels/cuda/grouped_linear/grouped_linear.h"
#include "model/numerics.h"

namespace dsv4::gpu_test {
namespace {

void run_case(Rng& rng, int64_t m, int64_t groups, int64_t in, int64_t out) {
    const HostWeight w = random_fp8_weight(rng, groups * out, in);
    const std::vector<float> x = random_activations(rng, m, groups * in);
    const Precision f32(Numerics::kReference, test_pool());
    std::vector<float> ref(size_t(m * groups * out)), absdot(ref.size());
    f32.grouped_linear(x.data(), m, w.view, groups, ref.data());
    const std::vector<float> xabs = abs_values(x);
    f32.grouped_linear(xabs.data(), m, w.abs_view, groups, absdot.data());

    auto xd = to_device(to_bf16(x));
    auto wd = to_device(w.data);
    auto sd = to_device(std::vector<float>(reinterpret_cast<const float*>(w.scale.data()),
                                           reinterpret_cast<const float*>(w.scale.data()) + w.scale.size() / 4));
    auto y = poisoned<uint16_t>(ref.size());
    int sms = 0;
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const cuda::Fp8GemmConfig config = cuda::grouped_linear_config(m, groups, in, out, sms);
    cuda::DeviceBuffer<uint8_t> ws(std::max<size_t>(256, cuda::grouped_linear_workspace_bytes(config, m, groups, out)));
    cuda::GroupedLinearParams p;
    p.x = reinterpret_cast<const __nv_bfloat16*>(xd.get());
    p.w = wd.get();
    p.w_scale = sd.get();
    p.y = reinterpret_cast<__nv_bfloat16*>(y.get());
    p.m = m;
    p.groups = groups;
    p.in = in;
    p.out = out;
    p.workspace = ws.get();
    p.workspace_bytes = ws.bytes();
    cuda::grouped_linear(p, nullptr);
    char what[160];
    std::snprintf(what, sizeof what, "grouped_linear M=%lld groups=%lld in=%lld out=%lld splits=%d", (long long)m,
                  (long long)groups, (long long)in, (long long)out, config.splits);
    if (cuda::grouped_linear_path(p) == cuda::GroupedLinearPath::kGeneric) {
        expect_bitwise_bf16(std::string(what) + " (generic)", to_host(y), to_bf16(ref));
        return;
    }
    expect_bf16_close(what, to_host(y), ref, absdot, in);
}

TEST(GroupedLinear, MatchesCpuGroupedLinear) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    run_case(rng, 1, 8, 4096, 1024);  // V4-Flash wo_a
    run_case(rng, 3, 8, 4096, 1024);
    run_case(rng, 17, 4, 400, 100);
    run_case(rng, 200, 2, 256, 48);
    run_case(rng, 5, 3, 16, 7);
}

TEST(GroupedLinear, GenericPathMatchesCpuBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    run_case(rng, 1, 2, 40, 32);     // H 4 x head_dim 20 over 2 groups
    run_case(rng, 7, 2, 66, 48);     // head_dim 33
    run_case(rng, 37, 4, 200, 130);  // partial 128-blocks along K and N
    run_case(rng, 3, 1, 8, 5);
}

}  // namespace
}  // namespace dsv4::gpu_test
