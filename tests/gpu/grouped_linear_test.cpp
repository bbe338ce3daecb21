// grouped_linear (wo_a) against Precision::grouped_linear (reference numerics = the same f32 sums before the bf16
// rounding) on bf16 activations and FP8 weights (every e4m3 code but NaN, subnormals included); outputs poisoned
// with NaN before each launch. The generic path (in % 16 != 0 or out % 8 != 0: small models) sums in the
// reference's order, so it is held to the bf16 rounding of the reference bit for bit; the tensor-core path to the
// f32 chain's bound plus gemm_fp8_test's tensor-core allowance (kTensorCoreFp8Rel there: the same f32 accumulation
// on the same HMMA instructions, bf16 instead of f16 operands). Rows must not depend on the batch: a row alone, in
// every tile gives the same bits.
#include <gtest/gtest.h>

#include "gemm_test_common.h"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/grouped_linear/grouped_linear.h"
#include "kernels/cuda/grouped_linear/grouped_linear_kernels.h"
#include "model/numerics.h"

namespace dsv4::gpu_test {
namespace {

constexpr double kTensorCoreRel = 0x1p-12;

struct Case {
    int64_t m, groups, in, out;
    bool pow2_scales = true;
};

int num_sms() {
    int sms = 0;
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    return sms;
}

// Device operands of one case and the launch over `m` of its rows starting at row `first`.
struct Operands {
    cuda::DeviceBuffer<uint16_t> x;
    cuda::DeviceBuffer<uint8_t> w;
    cuda::DeviceBuffer<float> scale;
    Case c;

    // Under the tiles the shape picks, or under `tiles` where given.
    std::vector<uint16_t> run(int64_t first, int64_t m, const cuda::bf16_act_mma::Tiles* tiles = nullptr) const {
        auto y = poisoned<uint16_t>(size_t(m * c.groups * c.out));
        cuda::GroupedLinearParams p;
        p.x = reinterpret_cast<const __nv_bfloat16*>(x.get()) + first * c.groups * c.in;
        p.w = w.get();
        p.w_scale = scale.get();
        p.y = reinterpret_cast<__nv_bfloat16*>(y.get());
        p.m = m;
        p.groups = c.groups;
        p.in = c.in;
        p.out = c.out;
        if (tiles) {
            EXPECT_EQ(cuda::grouped_linear_can_implement(p, *tiles), "");
            DSV4_CUDA_CHECK(cuda::launch_grouped_linear_mma(p, *tiles, nullptr));
        } else {
            cuda::grouped_linear(p, nullptr);
        }
        return to_host(y);
    }
    cuda::GroupedLinearPath path() const {
        cuda::GroupedLinearParams p;
        p.x = reinterpret_cast<const __nv_bfloat16*>(x.get());
        p.w = w.get();
        p.in = c.in;
        p.out = c.out;
        return cuda::grouped_linear_path(p);
    }
};

Operands upload(const Case& c, const std::vector<float>& x, const HostWeight& w) {
    return {to_device(to_bf16(x)), to_device(w.data),
            to_device(std::vector<float>(reinterpret_cast<const float*>(w.scale.data()),
                                         reinterpret_cast<const float*>(w.scale.data()) + w.scale.size() / 4)),
            c};
}

void run_case(Rng& rng, const Case& c, cuda::GroupedLinearPath expected) {
    const HostWeight w = random_fp8_weight(rng, c.groups * c.out, c.in, c.pow2_scales);
    const std::vector<float> x = random_activations(rng, c.m, c.groups * c.in);
    const Precision f32(Numerics::kReference, test_pool());
    std::vector<float> ref(size_t(c.m * c.groups * c.out)), absdot(ref.size());
    f32.grouped_linear(x.data(), c.m, w.view, c.groups, ref.data());
    const std::vector<float> xabs = abs_values(x);
    f32.grouped_linear(xabs.data(), c.m, w.abs_view, c.groups, absdot.data());

    const Operands d = upload(c, x, w);
    ASSERT_EQ(d.path(), expected) << "in=" << c.in << " out=" << c.out;
    const std::vector<uint16_t> y = d.run(0, c.m);
    const cuda::bf16_act_mma::Tiles config = cuda::grouped_linear_tiles(c.m, c.groups, c.in, c.out, num_sms());
    char what[200];
    std::snprintf(what, sizeof what, "grouped_linear M=%lld groups=%lld in=%lld out=%lld%s", (long long)c.m,
                  (long long)c.groups, (long long)c.in, (long long)c.out, c.pow2_scales ? "" : " f32-scales");
    if (expected == cuda::GroupedLinearPath::kGeneric) {
        expect_bitwise_bf16(std::string(what) + " (generic)", y, to_bf16(ref));
        return;
    }
    expect_bf16_close(
        std::string(what) + " tile " + std::to_string(config.block_m) + "x" + std::to_string(config.block_n), y, ref,
        absdot, c.in, kTensorCoreRel);
}

TEST(GroupedLinear, TensorCoresMatchCpuGroupedLinear) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    constexpr auto kMma = cuda::GroupedLinearPath::kMma;
    run_case(rng, {1, 8, 4096, 1024}, kMma);  // V4-Flash wo_a, decode
    run_case(rng, {3, 8, 4096, 1024}, kMma);
    run_case(rng, {64, 8, 4096, 1024}, kMma);          // batches: 64-row tiles
    run_case(rng, {130, 8, 4096, 1024, false}, kMma);  // a partial 64-row tile; scales not powers of two
    run_case(rng, {17, 4, 400, 104}, kMma);            // a partial last K block (400 = 3 x 128 + 16); 8-column tiles
    run_case(rng, {200, 2, 256, 48}, kMma);            // 16-column tiles at many rows (48 % 128 != 0)
    run_case(rng, {200, 2, 384, 256}, kMma);
    run_case(rng, {5, 3, 16, 8}, kMma);
    run_case(rng, {1024, 2, 512, 1024}, kMma);  // the 128 x 128 warpgroup tile where the device has it
}

TEST(GroupedLinear, GenericPathMatchesCpuBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    constexpr auto kGeneric = cuda::GroupedLinearPath::kGeneric;
    run_case(rng, {1, 2, 40, 32}, kGeneric);     // H 4 x head_dim 20 over 2 groups
    run_case(rng, {7, 2, 66, 48}, kGeneric);     // head_dim 33
    run_case(rng, {37, 4, 200, 130}, kGeneric);  // partial 128-blocks along K and N
    run_case(rng, {17, 4, 400, 100}, kGeneric);  // out % 8 != 0
    run_case(rng, {5, 3, 16, 7}, kGeneric);
    run_case(rng, {3, 1, 8, 5}, kGeneric);
}

// The tile a row lands in and the rows beside it change nothing: rows alone (the tiles the shape picks for them)
// and the whole batch under every tile the kernel has give the same bits as the batch under its own pick.
TEST(GroupedLinear, RowsIndependentOfBatchAndTile) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    for (const Case c : {Case{256, 8, 4096, 1024}, Case{70, 2, 384, 256}}) {
        const HostWeight w = random_fp8_weight(rng, c.groups * c.out, c.in);
        const std::vector<float> x = random_activations(rng, c.m, c.groups * c.in);
        const Operands d = upload(c, x, w);
        const int64_t n = c.groups * c.out;
        const std::vector<uint16_t> all = d.run(0, c.m);
        for (int64_t m : {int64_t(1), int64_t(5), int64_t(16), int64_t(40)}) {
            const int64_t first = c.m - m - 3;
            const cuda::bf16_act_mma::Tiles t = cuda::grouped_linear_tiles(m, c.groups, c.in, c.out, num_sms());
            const std::vector<uint16_t> some = d.run(first, m);
            int64_t differing = 0;
            for (int64_t i = 0; i < m * n; ++i) differing += some[size_t(i)] != all[size_t(first * n + i)];
            EXPECT_EQ(differing, 0) << "rows " << first << ".." << first + m - 1 << " alone (tile " << t.block_m << "x"
                                    << t.block_n << ") vs among M=" << c.m << ", in=" << c.in;
        }
        // Every 16-row tile on both sides of the top-half tiles' edge (launches of at most 8 rows leave rows 8-15 of
        // the tile out).
        for (int64_t m : {int64_t(1), int64_t(7), int64_t(8), int64_t(9)})
            for (const cuda::bf16_act_mma::Tiles t : {cuda::bf16_act_mma::Tiles{16, 8}, {16, 16}, {16, 32}}) {
                const int64_t first = c.m - m - 1;
                const std::vector<uint16_t> some = d.run(first, m, &t);
                int64_t differing = 0;
                for (int64_t i = 0; i < m * n; ++i) differing += some[size_t(i)] != all[size_t(first * n + i)];
                EXPECT_EQ(differing, 0) << m << " rows from " << first << " under tile 16x" << t.block_n
                                        << " vs among M=" << c.m << ", in=" << c.in;
            }
        std::vector<cuda::bf16_act_mma::Tiles> tiles{{16, 8}, {16, 16}, {16, 32}, {64, 64}, {64, 128}};
        if (cuda::device_has_wgmma()) tiles.push_back({128, 128});  // the warpgroup tile
        for (const cuda::bf16_act_mma::Tiles t : tiles) {
            auto y = poisoned<uint16_t>(size_t(c.m * n));
            cuda::GroupedLinearParams p;
            p.x = reinterpret_cast<const __nv_bfloat16*>(d.x.get());
            p.w = d.w.get();
            p.w_scale = d.scale.get();
            p.y = reinterpret_cast<__nv_bfloat16*>(y.get());
            p.m = c.m;
            p.groups = c.groups;
            p.in = c.in;
            p.out = c.out;
            ASSERT_EQ(cuda::grouped_linear_can_implement(p, t), "");
            DSV4_CUDA_CHECK(cuda::launch_grouped_linear_mma(p, t, nullptr));
            const std::vector<uint16_t> got = to_host(y);
            int64_t differing = 0;
            for (size_t i = 0; i < got.size(); ++i) differing += got[i] != all[i];
            EXPECT_EQ(differing, 0) << "M=" << c.m << " in=" << c.in << " under tile " << t.block_m << "x" << t.block_n;
        }
    }
}

}  // namespace
}  // namespace dsv4::gpu_test
