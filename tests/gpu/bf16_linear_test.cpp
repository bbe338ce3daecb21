// bf16_linear (the head on the tensor cores) against cpu::linear on bf16 weights: every product exact, so the two
// differ only in how the f32 sum is taken; held to the f32 chain's bound plus gemm_fp8_test's tensor-core allowance
// (the same HMMA f32 accumulation), on random rows and on the head's shape. A row's bits depend on neither the
// batch nor the tile: rows alone and the batch under every tile give the same bits. Outputs poisoned with NaN.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "gemm_test_common.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/bf16_linear/bf16_linear.h"
#include "kernels/cuda/bf16_linear/bf16_linear_kernels.h"

namespace dsv4::gpu_test {
namespace {

constexpr double kTensorCoreRel = 0x1p-12;

struct Case {
    int64_t m, n, k, ldx, ldy;
};

int num_sms() {
    int sms = 0;
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    return sms;
}

struct Operands {
    Case c;
    std::vector<uint16_t> x, w;  // bf16 bits: x [m, ldx], w [n, k]
    cuda::DeviceBuffer<uint16_t> dx, dw;

    Operands(Rng& rng, const Case& cs) : c(cs) {
        x = to_bf16(random_activations(rng, c.m, c.ldx));
        w = to_bf16(rng.normal_bf16(c.n * c.k, 0.02f));
        dx = to_device(x);
        dw = to_device(w);
    }

    // Rows first .. first + m - 1 in one call, outputs [m, ldy].
    std::vector<float> run(int64_t first, int64_t m) const {
        auto y = poisoned<float>(size_t(m * c.ldy));
        cuda::Bf16LinearParams p;
        p.x = reinterpret_cast<const __nv_bfloat16*>(dx.get()) + first * c.ldx;
        p.w = reinterpret_cast<const __nv_bfloat16*>(dw.get());
        p.y = y.get();
        p.m = m;
        p.n = c.n;
        p.k = c.k;
        p.ldx = c.ldx;
        p.ldy = c.ldy;
        cuda::bf16_linear(p, nullptr);
        return to_host(y);
    }

    // cpu::linear of rows [0, m) and of their absolute values (for the bound).
    void reference(std::vector<float>& want, std::vector<float>& absdot) const {
        ThreadPool pool(8);
        std::vector<float> xd(size_t(c.m * c.k)), xa(xd.size());
        for (int64_t t = 0; t < c.m; ++t)
            for (int64_t i = 0; i < c.k; ++i) {
                xd[size_t(t * c.k + i)] = bf16_to_f32(x[size_t(t * c.ldx + i)]);
                xa[size_t(t * c.k + i)] = std::fabs(xd[size_t(t * c.k + i)]);
            }
        std::vector<uint16_t> wa = w;
        for (auto& v : wa) v &= 0x7FFF;
        QuantizedMatrix qm;
        qm.name = "w";
        qm.format = WeightFormat::kBF16;
        qm.rows = c.n;
        qm.cols = c.k;
        qm.data = reinterpret_cast<const uint8_t*>(w.data());
        want.assign(size_t(c.m * c.n), 0.0f);
        absdot.assign(want.size(), 0.0f);
        cpu::linear(pool, xd.data(), c.m, qm, want.data());
        qm.data = reinterpret_cast<const uint8_t*>(wa.data());
        cpu::linear(pool, xa.data(), c.m, qm, absdot.data());
    }
};

void expect_close(const Operands& d, const std::vector<float>& got, const std::string& what) {
    std::vector<float> want, absdot;
    d.reference(want, absdot);
    Worst worst(what);
    for (int64_t t = 0; t < d.c.m; ++t)
        for (int64_t j = 0; j < d.c.n; ++j) {
            const size_t i = size_t(t * d.c.n + j);
            worst.add(int64_t(i), got[size_t(t * d.c.ldy + j)], want[i],
                      f32_sum_tolerance(d.c.k, absdot[i]) + kTensorCoreRel * absdot[i] + 1e-30);
        }
    EXPECT_TRUE(worst.ok()) << worst.describe();
    std::printf("[ bf16_lin ] %s\n", worst.describe().c_str());
}

TEST(Bf16Linear, MatchesCpuLinear) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    for (const Case& c : {Case{1, 1024, 4096, 4096, 1024}, Case{37, 264, 1000 - 8, 1000, 270},  // partial K block
                          Case{64, 2048, 512, 512, 2048},                                       // 64-row tiles
                          Case{200, 520, 256, 264, 520}, Case{5, 8, 16, 16, 8},
                          // V4-Flash's router (256 experts) and a CSA layer's stacked f32 projections (compressor
                          // wkv | wgate, the indexer's, weights_proj), which linear_f32 runs here
                          Case{1, 256, 4096, 4096, 256}, Case{16, 2624, 4096, 4096, 2624}}) {
        const Operands d(rng, c);
        const cuda::bf16_act_mma::Tiles t = cuda::bf16_linear_tiles(c.m, c.n, c.k, num_sms());
        expect_close(d, d.run(0, c.m),
                     "m " + std::to_string(c.m) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k) + " tile " +
                         std::to_string(t.block_m) + "x" + std::to_string(t.block_n));
    }
}

// The V4-Flash head, [129280 x 4096] bf16, at 8 tokens (the CPU reference of more takes long) and one of them alone.
TEST(Bf16Linear, HeadShape) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    const Operands d(rng, Case{8, 129280, 4096, 4096, 129280});
    const std::vector<float> all = d.run(0, 8), one = d.run(5, 1);
    expect_close(d, all, "head, 8 rows");
    int64_t differing = 0;
    for (int64_t j = 0; j < d.c.n; ++j)
        differing += float_bits(one[size_t(j)]) != float_bits(all[size_t(5 * d.c.n + j)]);
    EXPECT_EQ(differing, 0) << "row 5 alone vs among 8";
}

TEST(Bf16Linear, RowsIndependentOfBatchAndTile) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    const Operands d(rng, Case{256, 4096, 1024, 1024, 4096});
    const std::vector<float> all = d.run(0, 256);
    for (int64_t m : {int64_t(1), int64_t(3), int64_t(16), int64_t(40), int64_t(100)}) {
        const int64_t first = 256 - m - 7;
        const std::vector<float> some = d.run(first, m);
        int64_t differing = 0;
        for (int64_t i = 0; i < m * d.c.n; ++i)
            differing += float_bits(some[size_t(i)]) != float_bits(all[size_t(first * d.c.n + i)]);
        const cuda::bf16_act_mma::Tiles t = cuda::bf16_linear_tiles(m, 4096, 1024, num_sms());
        EXPECT_EQ(differing, 0) << m << " rows from " << first << " (tile " << t.block_m << "x" << t.block_n
                                << ") vs the same rows among 256";
    }
    for (const cuda::bf16_act_mma::Tiles t :
         {cuda::bf16_act_mma::Tiles{16, 8}, {16, 16}, {16, 32}, {64, 64}, {64, 128}}) {
        auto y = poisoned<float>(size_t(256 * d.c.ldy));
        cuda::Bf16LinearParams p;
        p.x = reinterpret_cast<const __nv_bfloat16*>(d.dx.get());
        p.w = reinterpret_cast<const __nv_bfloat16*>(d.dw.get());
        p.y = y.get();
        p.m = 256;
        p.n = d.c.n;
        p.k = d.c.k;
        p.ldx = d.c.ldx;
        p.ldy = d.c.ldy;
        ASSERT_EQ(cuda::bf16_act_mma::tiles_can_run(t, p.m, p.n, p.k, p.n), "");
        DSV4_CUDA_CHECK(cuda::launch_bf16_linear(p, t, nullptr));
        const std::vector<float> got = to_host(y);
        int64_t differing = 0;
        for (size_t i = 0; i < got.size(); ++i) differing += float_bits(got[i]) != float_bits(all[i]);
        EXPECT_EQ(differing, 0) << "under tile " << t.block_m << "x" << t.block_n;
    }
}

TEST(Bf16Linear, RefusesShapesItCannotRun) {
    DSV4_REQUIRE_GPU();
    cuda::Bf16LinearParams p;
    auto x = poisoned<uint16_t>(64), w = poisoned<uint16_t>(64 * 16);
    auto y = poisoned<float>(64);
    p.x = reinterpret_cast<const __nv_bfloat16*>(x.get());
    p.w = reinterpret_cast<const __nv_bfloat16*>(w.get());
    p.y = y.get();
    p.m = 1;
    p.k = 16;
    p.ldx = 16;
    p.n = p.ldy = 60;  // not a multiple of 8
    EXPECT_NE(cuda::bf16_linear_can_run(p), "");
    EXPECT_THROW(cuda::bf16_linear(p, nullptr), dsv4::Error);
    p.n = p.ldy = 64;
    EXPECT_EQ(cuda::bf16_linear_can_run(p), "");
}

}  // namespace
}  // namespace dsv4::gpu_test
