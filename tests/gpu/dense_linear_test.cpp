// dense_linear (kernels/cuda/dense_linear) on random bf16 rows, for f32 and bf16 weights and odd shapes (K not a
// multiple of the 32-column tile, N not a multiple of the 32-output tile, strided operands): chunk invariance
// bitwise (the 37 rows computed one call per row equal the 37 rows in one call) and bitwise equality with
// cpu::linear, whose column-order f32 sum the kernel reproduces.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "gpu_test_util.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/dense_linear/dense_linear.h"

using namespace dsv4;
using namespace dsv4::gpu_test;

namespace {

struct Case {
    cuda::DenseType type;
    int64_t n, k, ldx, ldy;  // ldw = k
};

// Counts the elements of `a` and `b` whose bits differ; prints the first.
int64_t bit_differences(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
    int64_t count = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (float_bits(a[i]) == float_bits(b[i])) continue;
        if (count++ == 0) std::printf("    %s: first difference at %zu: %.9g vs %.9g\n", what, i, a[i], b[i]);
    }
    return count;
}

}  // namespace

TEST(GpuDenseLinear, RowCountInvariantAndEqualToCpuLinear) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    ThreadPool pool(4);
    constexpr int64_t M = 37;
    for (const Case& c :
         {Case{cuda::DenseType::kF32, 45, 100, 100, 45}, Case{cuda::DenseType::kF32, 64, 256, 300, 70},
          Case{cuda::DenseType::kBF16, 33, 7168 / 16, 448, 33}, Case{cuda::DenseType::kBF16, 256, 1024, 1030, 260},
          Case{cuda::DenseType::kBF16, 100, 1000, 1000, 100},  // partial last stage, 16-byte x
          Case{cuda::DenseType::kBF16, 40, 100, 104, 40}}) {   // 200-byte W rows: tiled path
        const bool f32 = c.type == cuda::DenseType::kF32;
        std::vector<uint16_t> x = random_bf16(rng, M * c.ldx);
        std::vector<float> w_values = rng.normal_bf16(c.n * c.k, 0.05f);
        if (f32)  // f32 weights with full mantissas, as transformers saves them
            for (float& v : w_values) v += rng.normal(1e-4f);
        std::vector<uint8_t> w_bytes(size_t(c.n * c.k) * (f32 ? 4 : 2));
        if (f32) {
            std::memcpy(w_bytes.data(), w_values.data(), w_bytes.size());
        } else {
            const std::vector<uint16_t> raw = to_bf16(w_values);
            std::memcpy(w_bytes.data(), raw.data(), w_bytes.size());
        }
        auto d_x = to_device(x);
        auto d_w = to_device(w_bytes);
        cuda::DenseLinearParams p;
        p.type = c.type;
        p.x = reinterpret_cast<const __nv_bfloat16*>(d_x.get());
        p.w = d_w.get();
        p.n = c.n;
        p.k = c.k;
        p.ldx = c.ldx;
        p.ldw = c.k;
        p.ldy = c.ldy;

        auto all = poisoned<float>(size_t(M * c.ldy));
        p.y = all.get();
        p.m = M;
        cuda::dense_linear(p, nullptr);
        auto rows = poisoned<float>(size_t(M * c.ldy));
        for (int64_t t = 0; t < M; ++t) {  // M = 1 on each row
            p.x = reinterpret_cast<const __nv_bfloat16*>(d_x.get()) + t * c.ldx;
            p.y = rows.get() + t * c.ldy;
            p.m = 1;
            cuda::dense_linear(p, nullptr);
        }
        const std::vector<float> got_all = to_host(all), got_rows = to_host(rows);

        // cpu::linear on the same values: x dense [M, k] f32, W as a QuantizedMatrix of the same format.
        std::vector<float> x_dense(size_t(M * c.k));
        for (int64_t t = 0; t < M; ++t)
            for (int64_t i = 0; i < c.k; ++i) x_dense[size_t(t * c.k + i)] = bf16_to_f32(x[size_t(t * c.ldx + i)]);
        QuantizedMatrix qm;
        qm.name = "w";
        qm.format = f32 ? WeightFormat::kF32 : WeightFormat::kBF16;
        qm.rows = c.n;
        qm.cols = c.k;
        qm.data = w_bytes.data();
        std::vector<float> want_dense(size_t(M * c.n));
        cpu::linear(pool, x_dense.data(), M, qm, want_dense.data());

        std::vector<float> a, b, cpu_values;
        for (int64_t t = 0; t < M; ++t)
            for (int64_t j = 0; j < c.n; ++j) {
                a.push_back(got_all[size_t(t * c.ldy + j)]);
                b.push_back(got_rows[size_t(t * c.ldy + j)]);
                cpu_values.push_back(want_dense[size_t(t * c.n + j)]);
            }
        const int64_t chunk_diff = bit_differences(a, b, "M=37 vs M=1");
        const int64_t cpu_diff = bit_differences(a, cpu_values, "GPU vs cpu::linear");
        int64_t nan = 0;
        for (float v : a) nan += std::isnan(v);
        std::printf("[ dense    ] %s n %lld k %lld: %lld of %zu differ M=37 vs M=1, %lld differ from cpu::linear\n",
                    f32 ? "f32 " : "bf16", (long long)c.n, (long long)c.k, (long long)chunk_diff, a.size(),
                    (long long)cpu_diff);
        EXPECT_EQ(nan, 0);
        EXPECT_EQ(chunk_diff, 0) << "n " << c.n << " k " << c.k;
        EXPECT_EQ(cpu_diff, 0) << "n " << c.n << " k " << c.k;
    }
}

// The head's shape (V4-Flash lm_head, [129280 x 4096] bf16) at one token, the decode step's largest read: bitwise
// equal to cpu::linear on every one of the 129280 outputs.
TEST(GpuDenseLinear, HeadShapeAtOneTokenEqualToCpuLinear) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    ThreadPool pool(8);
    constexpr int64_t N = 129280, K = 4096;
    const std::vector<uint16_t> x = random_bf16(rng, K);
    const std::vector<uint16_t> w = random_bf16(rng, N * K, 0.02f);
    auto d_x = to_device(x);
    auto d_w = to_device(w);
    auto y = poisoned<float>(size_t(N));
    cuda::DenseLinearParams p;
    p.type = cuda::DenseType::kBF16;
    p.x = reinterpret_cast<const __nv_bfloat16*>(d_x.get());
    p.w = d_w.get();
    p.y = y.get();
    p.m = 1;
    p.n = N;
    p.k = K;
    p.ldx = p.ldw = K;
    p.ldy = N;
    cuda::dense_linear(p, nullptr);
    const std::vector<float> got = to_host(y);

    std::vector<float> x_dense(static_cast<size_t>(K));
    for (int64_t i = 0; i < K; ++i) x_dense[size_t(i)] = bf16_to_f32(x[size_t(i)]);
    QuantizedMatrix qm;
    qm.name = "head";
    qm.format = WeightFormat::kBF16;
    qm.rows = N;
    qm.cols = K;
    qm.data = reinterpret_cast<const uint8_t*>(w.data());
    std::vector<float> want(static_cast<size_t>(N));
    cpu::linear(pool, x_dense.data(), 1, qm, want.data());
    const int64_t diff = bit_differences(got, want, "GPU vs cpu::linear");
    int64_t nan = 0;
    for (float v : got) nan += std::isnan(v);
    std::printf("[ dense    ] bf16 n %lld k %lld m 1: %lld of %lld differ from cpu::linear\n", (long long)N,
                (long long)K, (long long)diff, (long long)N);
    EXPECT_EQ(nan, 0);
    EXPECT_EQ(diff, 0);
}
