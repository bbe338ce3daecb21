// RankSlotPools (runtime/slot_pools.h): the host bookkeeping of the GPU state pools that data-parallel attention
// keeps for every rank. Every rank must decide alike, so the rules are checked here exactly: where a new sequence
// goes, that a step gets all its pages or none on every rank, and what comes back when a sequence goes.
#include "runtime/slot_pools.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace dsv4 {
namespace {

constexpr int64_t kPagePositions = 256;

TEST(RankSlotPools, NewSequencesGoToTheRankWithTheFewestLowestFirst) {
    RankSlotPools pools(3, 4, 8, kPagePositions, 4);
    std::vector<int> order;
    std::vector<std::pair<int, int>> held;  // (rank, slot)
    for (int i = 0; i < 7; ++i) {
        const int rank = pools.least_loaded();
        order.push_back(rank);
        held.push_back({rank, pools.pool(rank)->take_slot()});
    }
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 0, 1, 2, 0}));
    // Rank 1 gives a sequence back: it has the fewest now, and the freed slot is the one taken next there.
    pools.pool(held[1].first)->release(held[1].second);
    EXPECT_EQ(pools.least_loaded(), 1);
    EXPECT_EQ(pools.pool(1)->take_slot(), held[1].second);
}

TEST(RankSlotPools, AFullPoolHasNoSlot) {
    RankSlotPools pools(2, 2, 4, kPagePositions, 2);
    for (int r = 0; r < 2; ++r)
        for (int i = 0; i < 2; ++i) EXPECT_EQ(pools.pool(r)->take_slot(), i);
    EXPECT_EQ(pools.pool(pools.least_loaded())->take_slot(), -1);
    const Backend::PoolUsage u = pools.usage();
    EXPECT_EQ(u.sequences_used, 4);
    EXPECT_EQ(u.sequences_total, 4);
}

TEST(RankSlotPools, ReservesWholePagesInPositionOrder) {
    RankSlotPools pools(1, 2, 6, kPagePositions, 3);
    const int a = pools.pool(0)->take_slot();
    const RankSlotPools::Need first{0, a, 300};  // two pages
    pools.reserve(std::span(&first, 1));
    const SlotPool& p = *pools.pool(0);
    EXPECT_EQ(p.pages[size_t(a)], (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(p.table[size_t(a * 3)], 0);
    EXPECT_EQ(p.table[size_t(a * 3 + 1)], 1);
    EXPECT_EQ(p.table[size_t(a * 3 + 2)], -1);
    pools.reserve(std::span(&first, 1));  // already covered: nothing more
    EXPECT_EQ(pools.usage().pages_used, 2);
    const RankSlotPools::Need longer{0, a, 700};  // a third page
    pools.reserve(std::span(&longer, 1));
    EXPECT_EQ(p.pages[size_t(a)], (std::vector<int32_t>{0, 1, 2}));
    EXPECT_EQ(pools.usage().pages_used, 3);
    EXPECT_EQ(pools.usage().pages_total, 6);
}

// A step whose sequences on one rank do not fit gets no page on any rank: every rank throws alike and none has
// moved, so no rank goes on into a collective the others skip.
TEST(RankSlotPools, AStepThatDoesNotFitOneRankGetsNothingAnywhere) {
    RankSlotPools pools(2, 2, 2, kPagePositions, 4);
    const int a = pools.pool(0)->take_slot(), b = pools.pool(1)->take_slot();
    const std::vector<RankSlotPools::Need> step = {{0, a, 256}, {1, b, 3 * 256}};  // rank 1 would need 3 of 2
    try {
        pools.reserve(step);
        FAIL() << "reserved more pages than rank 1 has";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("of GPU rank 1 is full"), std::string::npos) << e.what();
    }
    EXPECT_EQ(pools.usage().pages_used, 0);
    EXPECT_TRUE(pools.pool(0)->pages[size_t(a)].empty());
}

TEST(RankSlotPools, ASequenceLongerThanItsTableIsAnError) {
    RankSlotPools pools(1, 1, 8, kPagePositions, 2);
    const int a = pools.pool(0)->take_slot();
    const RankSlotPools::Need need{0, a, 3 * 256};
    EXPECT_THROW(pools.reserve(std::span(&need, 1)), Error);
    EXPECT_EQ(pools.usage().pages_used, 0);
}

TEST(RankSlotPools, ReleaseGivesThePagesBackAndClearsTheTable) {
    RankSlotPools pools(1, 2, 4, kPagePositions, 4);
    const int a = pools.pool(0)->take_slot();
    const RankSlotPools::Need need{0, a, 4 * 256};
    pools.reserve(std::span(&need, 1));
    EXPECT_EQ(pools.usage().pages_used, 4);
    pools.pool(0)->release(a);
    EXPECT_EQ(pools.usage().pages_used, 0);
    EXPECT_EQ(pools.usage().sequences_used, 0);
    for (int32_t page : pools.pool(0)->table) EXPECT_EQ(page, -1);
    // Another sequence can have them all.
    const int b = pools.pool(0)->take_slot();
    const RankSlotPools::Need again{0, b, 4 * 256};
    pools.reserve(std::span(&again, 1));
    EXPECT_EQ(pools.usage().pages_used, 4);
}

}  // namespace
}  // namespace dsv4
