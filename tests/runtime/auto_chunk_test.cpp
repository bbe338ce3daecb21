// auto_chunk_tokens: the largest candidate piece whose plan fits nine tenths of the free memory.
#include "runtime/auto_chunk.h"

#include <gtest/gtest.h>

namespace dsv4 {
namespace {

TEST(AutoChunk, LargestPieceThatFitsNineTenths) {
    // A plan of 1000 fixed bytes plus 10 per token: 8192 tokens need 82,920 bytes, 4096 need 41,960, 2048 need
    // 21,480, 1024 need 11,240, 256 need 3,560.
    const auto plan = [](int64_t tokens) { return size_t(1000 + 10 * tokens); };
    EXPECT_EQ(auto_chunk_tokens(plan, 200000), 8192);
    EXPECT_EQ(auto_chunk_tokens(plan, 92133), 8192);  // 9/10 of it: 82,920 (92,133 - 9,213)
    EXPECT_EQ(auto_chunk_tokens(plan, 92132), 4096);  // 82,919
    EXPECT_EQ(auto_chunk_tokens(plan, 46622), 4096);  // 41,960
    EXPECT_EQ(auto_chunk_tokens(plan, 46621), 2048);
    EXPECT_EQ(auto_chunk_tokens(plan, 23867), 2048);  // 9/10 of it: 21,481 (integer tenth: 23,867 - 2,386)
    EXPECT_EQ(auto_chunk_tokens(plan, 23865), 1024);  // 21,479: 2048 no longer fits
    EXPECT_EQ(auto_chunk_tokens(plan, 13000), 1024);
    EXPECT_EQ(auto_chunk_tokens(plan, 7000), 512);
    EXPECT_EQ(auto_chunk_tokens(plan, 4000), 256);
    EXPECT_EQ(auto_chunk_tokens(plan, 100), 256);  // nothing fits: the smallest (the model's own check reports it)
}

}  // namespace
}  // namespace dsv4
