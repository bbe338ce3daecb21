// expert_range: the ranks' ranges tile [0, E) in rank order, their sizes differing by at most one.
#include "model/expert_range.h"

#include <gtest/gtest.h>

namespace dsv4 {
namespace {

TEST(ExpertRange, ContiguousAndBalanced) {
    for (int ranks : {1, 2, 3, 4, 8, 7}) {
        int64_t next = 0;
        for (int r = 0; r < ranks; ++r) {
            const ExpertRange e = expert_range(256, r, ranks);
            EXPECT_EQ(e.first, next);
            EXPECT_TRUE(e.count == 256 / ranks || e.count == 256 / ranks + 1) << ranks << " " << r;
            next += e.count;
        }
        EXPECT_EQ(next, 256);
    }
}

}  // namespace
}  // namespace dsv4
