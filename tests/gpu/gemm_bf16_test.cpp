// gemm_bf16 (cuBLASLt, f32 accumulation) against cpu::linear on the same bf16 values: bf16 output (indexer
// weights_proj) within the f32-reduction bracket of the rounded result, f32 output (router gate, compressor, head)
// within the f32-reduction tolerance itself. Outputs poisoned with NaN before each launch.
#include <gtest/gtest.h>

#include "gemm_test_common.h"
#include "kernels/cuda/gemm_bf16/gemm_bf16.h"

namespace dsv4::gpu_test {
namespace {

void run_case(Rng& rng, const cuda::CublasLt& lt, int64_t m, int64_t n, int64_t k, cuda::GemmOutType out) {
    const std::vector<float> x = random_activations(rng, m, k);
    const std::vector<float> wf = rng.normal_bf16(n * k, 0.05f);
    const std::vector<uint16_t> wb = to_bf16(wf);
    QuantizedMatrix wv{"bf16_weight", WeightFormat::kBF16, n, k, reinterpret_cast<const uint8_t*>(wb.data())};
    std::vector<uint16_t> wabs = wb;
    for (auto& v : wabs) v &= 0x7FFF;
    QuantizedMatrix wabs_v = wv;
    wabs_v.data = reinterpret_cast<const uint8_t*>(wabs.data());
    std::vector<float> ref(size_t(m * n)), absdot(size_t(m * n));
    cpu::linear(test_pool(), x.data(), m, wv, ref.data());
    const std::vector<float> xabs = abs_values(x);
    cpu::linear(test_pool(), xabs.data(), m, wabs_v, absdot.data());

    auto xd = to_device(to_bf16(x));
    auto wd = to_device(wb);
    cuda::DeviceBuffer<uint8_t> ws(cuda::kGemmBf16WorkspaceBytes);
    cuda::GemmBf16Params p;
    p.x = reinterpret_cast<const __nv_bfloat16*>(xd.get());
    p.w = reinterpret_cast<const __nv_bfloat16*>(wd.get());
    p.out_type = out;
    p.m = m;
    p.n = n;
    p.k = k;
    p.workspace = ws.get();
    p.workspace_bytes = ws.bytes();
    char what[128];
    std::snprintf(what, sizeof what, "gemm_bf16 %s M=%lld N=%lld K=%lld", out == cuda::GemmOutType::kBF16 ? "bf16" : "f32",
                  (long long)m, (long long)n, (long long)k);
    if (out == cuda::GemmOutType::kBF16) {
        auto y = poisoned<uint16_t>(size_t(m * n));
        p.y = y.get();
        cuda::gemm_bf16(lt, p, nullptr);
        expect_bf16_close(what, to_host(y), ref, absdot, k);
    } else {
        auto y = poisoned<float>(size_t(m * n));
        p.y = y.get();
        cuda::gemm_bf16(lt, p, nullptr);
        const std::vector<float> got = to_host(y);
        Worst worst(what);
        for (size_t i = 0; i < got.size(); ++i) worst.add(int64_t(i), got[i], ref[i], f32_sum_tolerance(k, absdot[i]));
        worst.expect_ok();
    }
}

TEST(GemmBf16, Bf16OutputMatchesCpuLinear) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    cuda::CublasLt lt;
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 4096}, {3, 64, 4096}, {17, 37, 200},
                           {200, 64, 1000}, {1, 5, 7}})
        run_case(rng, lt, m, n, k, cuda::GemmOutType::kBF16);
}

TEST(GemmBf16, F32OutputMatchesCpuLinear) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    cuda::CublasLt lt;
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 256, 4096}, {3, 512, 4096}, {17, 129, 300},
                           {200, 1024, 512}, {1, 1000, 64}})
        run_case(rng, lt, m, n, k, cuda::GemmOutType::kF32);
}

}  // namespace
}  // namespace dsv4::gpu_test
