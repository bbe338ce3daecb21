// The vector instruction sets found at run time: the baseline always, then the wider ones in order, the host's the
// widest, and on Linux the same as the CPU flags the kernel reports (avx2, avx512f in /proc/cpuinfo).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "core/vector_isa.h"

using namespace dsv4;

TEST(VectorIsa, BaselineFirstWidestLastHostIsWidest) {
    const std::vector<VectorIsa> isas = runnable_vector_isas();
    ASSERT_FALSE(isas.empty());
    EXPECT_EQ(isas.front(), VectorIsa::kBaseline);
    for (size_t i = 1; i < isas.size(); ++i) EXPECT_LT(int(isas[i - 1]), int(isas[i]));
    EXPECT_EQ(host_vector_isa(), isas.back());
    EXPECT_STREQ(vector_isa_name(VectorIsa::kAvx2), "avx2");
}

TEST(VectorIsa, MatchesTheKernelsCpuFlags) {
#if DSV4_VECTOR_ISAS
    std::ifstream cpuinfo("/proc/cpuinfo");
    if (!cpuinfo) GTEST_SKIP() << "no /proc/cpuinfo";
    std::string line;
    bool avx2 = false, avx512f = false;
    while (std::getline(cpuinfo, line)) {
        if (line.rfind("flags", 0) != 0) continue;
        std::istringstream words(line);
        for (std::string w; words >> w;) avx2 |= w == "avx2", avx512f |= w == "avx512f";
        break;  // the first processor's
    }
    const std::vector<VectorIsa> isas = runnable_vector_isas();
    auto has = [&](VectorIsa isa) { return std::find(isas.begin(), isas.end(), isa) != isas.end(); };
    EXPECT_EQ(has(VectorIsa::kAvx2), avx2);
    EXPECT_EQ(has(VectorIsa::kAvx512), avx512f);
#else
    EXPECT_EQ(runnable_vector_isas().size(), 1u);
#endif
}
