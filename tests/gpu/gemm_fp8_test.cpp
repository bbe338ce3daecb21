// gemm_fp8 (both paths) against cpu::linear on the same FP8-quantized activations (act_quant_fp8 on the device,
// cpu::fp8_round_trip on the host) and the same FP8 weights; bf16 outputs poisoned with NaN before each launch.
// Skinny path: exact products and f32 sums, tolerance of the f32 reduction only. cuBLASLt path: Hopper's FP8 MMA
// adds each 128-K block's products in a reduced-precision accumulator before the f32 promotion (about 14 bits,
// DeepSeek-V3 report §3.3.2), so it gets 2^-12 of sum |x w| on top: a stated hardware allowance.
#include <gtest/gtest.h>

#include <tuple>

#include "core/error.h"
#include "gemm_test_common.h"
#include "kernels/cuda/gemm_fp8/gemm_fp8.h"

namespace dsv4::gpu_test {
namespace {

constexpr double kTensorCoreFp8Rel = 0x1p-12;

struct Case {
    int64_t m, n, k;
    cuda::Fp8GemmPath path;
    bool pow2_scales = true;
};

void run_case(Rng& rng, const cuda::CublasLt& lt, const Case& c) {
    const HostWeight w = random_fp8_weight(rng, c.n, c.k, c.pow2_scales);
    const std::vector<float> x = random_activations(rng, c.m, c.k);
    const std::vector<float> xq = fp8_quantized_reference(x, c.m, c.k);
    std::vector<float> ref(size_t(c.m * c.n)), absdot(size_t(c.m * c.n));
    cpu::linear(test_pool(), xq.data(), c.m, w.view, ref.data());
    const std::vector<float> xq_abs = abs_values(xq);
    cpu::linear(test_pool(), xq_abs.data(), c.m, w.abs_view, absdot.data());

    DeviceFp8Act a = quantize_on_device(x, c.m, c.k);
    auto wd = to_device(w.data);
    auto sd = to_device(std::vector<float>(reinterpret_cast<const float*>(w.scale.data()),
                                           reinterpret_cast<const float*>(w.scale.data()) + w.scale.size() / 4));
    auto y = poisoned<uint16_t>(size_t(c.m * c.n));
    int sms = 0;
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const cuda::Fp8GemmConfig config = cuda::fp8_gemm_config(c.m, c.n, c.k, sms, c.path);
    cuda::DeviceBuffer<uint8_t> ws(std::max<size_t>(256, cuda::fp8_gemm_workspace_bytes(config, c.m, c.n, c.k)));

    cuda::Fp8GemmParams p;
    p.a = a.q.get();
    p.a_scale = a.scale.get();
    p.w = wd.get();
    p.w_scale = sd.get();
    p.y = reinterpret_cast<__nv_bfloat16*>(y.get());
    p.m = c.m;
    p.n = c.n;
    p.k = c.k;
    p.workspace = ws.get();
    p.workspace_bytes = ws.bytes();
    p.path = c.path;
    cuda::fp8_gemm(lt, p, nullptr);
    const std::vector<uint16_t> got = to_host(y);

    char what[160];
    std::snprintf(what, sizeof what, "gemm_fp8 %s M=%lld N=%lld K=%lld splits=%d m_tile=%d%s",
                  cuda::fp8_gemm_path_name(config.path), (long long)c.m, (long long)c.n, (long long)c.k, config.splits,
                  config.m_tile, c.pow2_scales ? "" : " f32-scales");
    expect_bf16_close(what, got, ref, absdot, c.k,
                      config.path == cuda::Fp8GemmPath::kCublasLt ? kTensorCoreFp8Rel : 0.0);
}

TEST(GemmFp8, SkinnyMatchesCpuLinear) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    cuda::CublasLt lt;
    const auto S = cuda::Fp8GemmPath::kSkinny;
    for (const Case& c : {Case{1, 4096, 8192, S}, Case{1, 200, 400, S}, Case{3, 333, 1024, S},
                          Case{5, 1000, 4096, S}, Case{16, 512, 2048, S}, Case{17, 130, 272, S},
                          Case{200, 96, 528, S}, Case{9, 300, 1536, S, false}, Case{1, 37, 16, S}})
        run_case(rng, lt, c);
}

TEST(GemmFp8, CublasLtMatchesCpuLinear) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    cuda::CublasLt lt;
    const auto L = cuda::Fp8GemmPath::kCublasLt;
    for (const Case& c : {Case{16, 512, 1024, L}, Case{20, 512, 1024, L}, Case{200, 400, 1024, L},
                          Case{256, 1024, 4096, L}, Case{20, 128, 640, L}, Case{64, 272, 384, L, false},
                          Case{4, 256, 512, L}})
        run_case(rng, lt, c);
}

TEST(GemmFp8, AutoPicksByShape) {
    const auto auto_path = cuda::Fp8GemmPath::kAuto;
    EXPECT_EQ(cuda::fp8_gemm_config(1, 32768, 1024, 132, auto_path).path, cuda::Fp8GemmPath::kSkinny);
    EXPECT_EQ(cuda::fp8_gemm_config(16, 4096, 8192, 132, auto_path).path, cuda::Fp8GemmPath::kSkinny);
    EXPECT_EQ(cuda::fp8_gemm_config(20, 4096, 8192, 132, auto_path).path, cuda::Fp8GemmPath::kCublasLt);
    EXPECT_EQ(cuda::fp8_gemm_config(200, 96, 528, 132, auto_path).path, cuda::Fp8GemmPath::kSkinny);  // K % 128
    EXPECT_EQ(cuda::fp8_gemm_config(17, 512, 1024, 132, auto_path).path, cuda::Fp8GemmPath::kSkinny);  // M % 4
    const cuda::Fp8GemmConfig wo_b = cuda::fp8_gemm_config(1, 4096, 8192, 132, auto_path);
    EXPECT_EQ(wo_b.splits * wo_b.k_per_split >= 8192, true);
    EXPECT_EQ(wo_b.m_tile, 1);
}

// The skinny K ranges (the f32 summation order) never depend on M: a row's bits are the same in any batch.
TEST(GemmFp8, SkinnyKRangesIndependentOfRows) {
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{32768, 1024}, {4096, 8192}, {2048, 4096}, {96, 528}})
        for (int sms : {78, 132}) {
            const cuda::Fp8GemmConfig one = cuda::fp8_gemm_config(1, n, k, sms, cuda::Fp8GemmPath::kSkinny);
            for (int64_t m = 2; m <= 300; m += (m < 40 ? 1 : 37)) {
                const cuda::Fp8GemmConfig c = cuda::fp8_gemm_config(m, n, k, sms, cuda::Fp8GemmPath::kSkinny);
                EXPECT_EQ(c.splits, one.splits) << n << "x" << k << " M=" << m;
                EXPECT_EQ(c.k_per_split, one.k_per_split) << n << "x" << k << " M=" << m;
            }
        }
}

// On the device: 37 rows in one call equal each row computed alone (M = 1), bit for bit, at decode shapes.
TEST(GemmFp8, SkinnyRowsBitwiseIndependentOfM) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    cuda::CublasLt lt;
    int sms = 0;
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{4096, 8192}, {2048, 4096}, {96, 528}}) {
        const int64_t m = 37;
        const HostWeight w = random_fp8_weight(rng, n, k, true);
        const std::vector<float> x = random_activations(rng, m, k);
        DeviceFp8Act a = quantize_on_device(x, m, k);
        auto wd = to_device(w.data);
        auto sd = to_device(std::vector<float>(reinterpret_cast<const float*>(w.scale.data()),
                                               reinterpret_cast<const float*>(w.scale.data()) + w.scale.size() / 4));
        auto run = [&](int64_t row0, int64_t rows) {
            const cuda::Fp8GemmConfig config = cuda::fp8_gemm_config(rows, n, k, sms, cuda::Fp8GemmPath::kSkinny);
            cuda::DeviceBuffer<uint8_t> ws(std::max<size_t>(256, cuda::fp8_gemm_workspace_bytes(config, rows, n, k)));
            auto y = poisoned<uint16_t>(size_t(rows * n));
            cuda::Fp8GemmParams p;
            p.a = a.q.get() + row0 * k;
            p.a_scale = a.scale.get() + row0 * ((k + 127) / 128);
            p.w = wd.get();
            p.w_scale = sd.get();
            p.y = reinterpret_cast<__nv_bfloat16*>(y.get());
            p.m = rows;
            p.n = n;
            p.k = k;
            p.workspace = ws.get();
            p.workspace_bytes = ws.bytes();
            p.path = cuda::Fp8GemmPath::kSkinny;
            cuda::fp8_gemm(lt, p, nullptr);
            return to_host(y);
        };
        const std::vector<uint16_t> all = run(0, m);
        for (int64_t r : {int64_t(0), int64_t(5), int64_t(36)}) {
            const std::vector<uint16_t> alone = run(r, 1);
            EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + r * n))
                << n << "x" << k << " row " << r << " alone differs from the 37-row call";
        }
    }
}

TEST(GemmFp8, RejectsWhatItCannotRun) {
    DSV4_REQUIRE_GPU();
    cuda::CublasLt lt;
    cuda::DeviceBuffer<uint8_t> buf(1 << 20);
    cuda::Fp8GemmParams p;
    p.a = p.w = buf.get();
    p.a_scale = p.w_scale = reinterpret_cast<const float*>(buf.get());
    p.y = reinterpret_cast<__nv_bfloat16*>(buf.get());
    p.m = 32;
    p.n = 100;  // not a multiple of 16
    p.k = 256;
    p.path = cuda::Fp8GemmPath::kCublasLt;
    EXPECT_THROW(cuda::fp8_gemm(lt, p, nullptr), Error);
    p.n = 128;
    p.m = 17;  // cuBLASLt has no block-scaled algorithm for M % 4 != 0
    EXPECT_THROW(cuda::fp8_gemm(lt, p, nullptr), Error);
    p.path = cuda::Fp8GemmPath::kSkinny;
    p.k = 100;  // not a multiple of 16
    EXPECT_THROW(cuda::fp8_gemm(lt, p, nullptr), Error);
}

}  // namespace
}  // namespace dsv4::gpu_test
