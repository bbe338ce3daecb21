// ThreadPool covers every index exactly once, for sizes around the chunking boundaries.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "core/thread_pool.h"

TEST(ThreadPool, CoversEveryIndexOnce) {
    dsv4::ThreadPool pool(3);
    for (int64_t n : {0, 1, 2, 7, 64, 1000, 4097}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        for (int repeat = 0; repeat < 3; ++repeat)
            pool.parallel_for(n, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
            });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 3) << "n=" << n << " i=" << i;
    }
}
