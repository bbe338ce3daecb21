// Embedding gather (kernels/cuda/embed) against the CPU model's embedding (cpu::dequantize_row of a bf16 table,
// then the bf16 cast, copied into every stream), bitwise; both the 16-byte and the element path; an out-of-range
// id gives a NaN row rather than a read out of bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/cuda/embed/embed.h"

using namespace dsv4;
using namespace dsv4::gpu_test;

TEST(GpuEmbed, GathersRowsIntoEveryStream) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    const int64_t vocab = 1000;
    for (int64_t tokens : {1, 7, 33})
        for (int64_t dim : {64, 7168, 330})
            for (int64_t n_hc : {2, 4}) {
                const std::vector<uint16_t> table = random_bf16(rng, vocab * dim);
                std::vector<int32_t> ids(static_cast<size_t>(tokens));
                for (auto& id : ids) id = int32_t(rng.engine()() % vocab);
                ids[0] = int32_t(vocab - 1);
                auto d_table = to_device(table);
                auto d_ids = to_device(ids);
                auto d_out = poisoned<uint16_t>(size_t(tokens * n_hc * dim));
                cuda::embed({d_ids.get(), reinterpret_cast<const __nv_bfloat16*>(d_table.get()),
                             reinterpret_cast<__nv_bfloat16*>(d_out.get()), tokens, vocab, dim, n_hc},
                            nullptr);
                std::vector<uint16_t> want;
                for (int64_t t = 0; t < tokens; ++t)
                    for (int64_t j = 0; j < n_hc; ++j)
                        want.insert(want.end(), table.begin() + ids[size_t(t)] * dim,
                                    table.begin() + (ids[size_t(t)] + 1) * dim);
                expect_bitwise_bf16("embed tokens " + std::to_string(tokens) + " dim " + std::to_string(dim) +
                                        " n_hc " + std::to_string(n_hc),
                                    to_host(d_out), want);
            }
}

TEST(GpuEmbed, OutOfRangeIdWritesNaN) {
    DSV4_REQUIRE_GPU();
    const int64_t vocab = 16, dim = 64;
    auto d_table = to_device(std::vector<uint16_t>(size_t(vocab * dim), 0x3F80));  // 1.0
    auto d_ids = to_device(std::vector<int32_t>{3, int32_t(vocab), -1});
    auto d_out = poisoned<uint16_t>(size_t(3 * 2 * dim), 0x00);
    cuda::embed({d_ids.get(), reinterpret_cast<const __nv_bfloat16*>(d_table.get()),
                 reinterpret_cast<__nv_bfloat16*>(d_out.get()), 3, vocab, dim, 2},
                nullptr);
    const std::vector<float> out = from_bf16(to_host(d_out));
    for (int64_t i = 0; i < 2 * dim; ++i) ASSERT_EQ(out[size_t(i)], 1.0f) << i;
    for (int64_t i = 2 * dim; i < 6 * dim; ++i) ASSERT_TRUE(std::isnan(out[size_t(i)])) << i;
}
