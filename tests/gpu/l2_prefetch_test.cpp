// l2_prefetch (kernels/cuda/l2_prefetch): a hint with no result, so what can go wrong is the launch: an address or
// size the bulk prefetch refuses (it takes 16-byte-aligned ones only) or a byte outside a range. Ranges at every
// alignment and of every length class (inside one 16-byte block, across blocks, several MiB over many CTAs) must
// run without a CUDA error and leave the memory as it was; the parameter rules are checked on the host.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "core/error.h"
#include "gpu_test_util.h"
#include "kernels/cuda/l2_prefetch/l2_prefetch.h"

using namespace dsv4;
using namespace dsv4::gpu_test;

// Host-only (no CUDA call before the checks, none for an empty launch).
TEST(L2PrefetchContract, AtMostEightRangesEmptyOnesSkipped) {
    const auto* at = reinterpret_cast<const void*>(uintptr_t(4096));
    cuda::L2PrefetchParams p;
    EXPECT_TRUE(p.add(nullptr, 64)) << "a null range is skipped";
    EXPECT_TRUE(p.add(at, 0)) << "an empty range is skipped";
    EXPECT_EQ(p.count, 0);
    EXPECT_EQ(p.bytes(), 0u);
    cuda::l2_prefetch(p, nullptr);  // nothing to prefetch: no launch
    for (int i = 0; i < cuda::kMaxL2PrefetchRanges; ++i) EXPECT_TRUE(p.add(at, size_t(i + 1)));
    EXPECT_FALSE(p.add(at, 1)) << "a ninth range";
    EXPECT_EQ(p.count, cuda::kMaxL2PrefetchRanges);
    EXPECT_EQ(p.bytes(), size_t(36));

    cuda::L2PrefetchParams bad;
    bad.count = cuda::kMaxL2PrefetchRanges + 1;
    EXPECT_THROW(cuda::l2_prefetch(bad, nullptr), Error) << "more ranges than the params hold";
    bad.count = -1;
    EXPECT_THROW(cuda::l2_prefetch(bad, nullptr), Error) << "a negative count";
    bad = {};
    bad.count = 1;
    bad.ranges[0] = {nullptr, 64};
    EXPECT_THROW(cuda::l2_prefetch(bad, nullptr), Error) << "a range at null";
}

TEST(L2Prefetch, RangesAtAnyAlignmentRunAndLeaveTheirBytes) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    const size_t n = (size_t(9) << 20) + 77;
    std::vector<uint8_t> host(n);
    for (uint8_t& b : host) b = uint8_t(rng.engine()() >> 24);
    const cuda::DeviceBuffer<uint8_t> buffer = to_device(host);
    const uint8_t* base = buffer.get();
    // {offset, bytes}: inside one 16-byte block (no aligned interior), one byte past a block, unaligned at both ends
    // across blocks, a whole aligned chunk, an unaligned range of several chunks, ~9 MiB over many CTAs ending at the
    // buffer's last byte.
    const std::vector<std::pair<size_t, size_t>> cases = {{3, 9},           {15, 2},      {1, 45},
                                                          {4096, 16 << 10}, {17, 200003}, {5, n - 5}};
    cuda::L2PrefetchParams all;
    for (const auto& [offset, bytes] : cases) {
        cuda::L2PrefetchParams one;
        ASSERT_TRUE(one.add(base + offset, bytes));
        ASSERT_TRUE(all.add(base + offset, bytes));
        cuda::l2_prefetch(one, nullptr);
        DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    }
    cuda::l2_prefetch(all, nullptr);
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(to_host(buffer), host) << "a prefetch changed memory";
}
