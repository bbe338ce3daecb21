// random_table_fill (kernels/cuda/random_fill) against the host's rule BenchWeights::table_index, bitwise: counts
// 0, 1, 3, 4, 5, 4099 and ~4M (a ragged end), each at an aligned base and one byte past it (byte stores only),
// with guard bytes either side that must stay untouched. The table is random bytes, so a wrong index shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/random_fill/random_fill.h"
#include "model/bench_weights.h"

using namespace dsv4;
using namespace dsv4::gpu_test;

TEST(GpuRandomFill, EqualsTheHostRule) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    std::vector<uint8_t> table(BenchWeights::kTable);
    for (auto& t : table) t = uint8_t(rng.engine()());
    const auto d_table = to_device(table);
    const uint64_t key = (uint64_t(rng.engine()()) << 32) | rng.engine()();
    constexpr uint8_t kGuard = 0xA5;
    constexpr int64_t kSlack = 8;  // guard bytes either side
    for (int64_t count :
         {int64_t(0), int64_t(1), int64_t(3), int64_t(4), int64_t(5), int64_t(4096 + 3), int64_t(4 << 20) + 3})
        for (int64_t offset : {int64_t(0), int64_t(1)}) {
            auto d_out = poisoned<uint8_t>(size_t(count + 2 * kSlack), kGuard);
            cuda::random_table_fill({d_table.get(), key, d_out.get() + kSlack + offset, count}, nullptr);
            std::vector<uint8_t> want(size_t(count + 2 * kSlack), kGuard);
            for (int64_t i = 0; i < count; ++i)
                want[size_t(kSlack + offset + i)] = table[size_t(BenchWeights::table_index(key, i))];
            expect_bitwise_bytes(
                "random_table_fill count " + std::to_string(count) + " offset " + std::to_string(offset),
                to_host(d_out), want);
        }
}

TEST(GpuRandomFill, Throughput) {
    DSV4_REQUIRE_GPU();
    const int64_t count = int64_t(256) << 20;  // 64 routed-expert projections of V4-Flash (4 MiB each)
    const auto d_table = to_device(std::vector<uint8_t>(BenchWeights::kTable, 1));
    cuda::DeviceBuffer<uint8_t> d_out{size_t(count)};
    cuda::Event e0, e1;
    cuda::random_table_fill({d_table.get(), 1, d_out.get(), count}, nullptr);  // warm-up
    e0.record(nullptr);
    cuda::random_table_fill({d_table.get(), 2, d_out.get(), count}, nullptr);
    e1.record(nullptr);
    const float ms = e1.elapsed_since(e0);
    std::printf("[ perf     ] random_table_fill of 256 MiB: %.2f ms = %.0f GB/s written\n", ms,
                double(count) / (ms * 1e-3) / 1e9);
    const std::vector<uint8_t> out = to_host(d_out);
    EXPECT_EQ(std::count(out.begin(), out.end(), uint8_t(1)), count);  // the table's only value, everywhere
}
