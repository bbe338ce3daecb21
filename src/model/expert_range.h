// Which routed experts of every layer a rank of an expert-parallel run holds (docs/parallel.md): rank r of n holds
// expert_range(E, r, n), contiguous, the ranks' sizes differing by at most one. Used by CudaModel (its held experts)
// and by dsv4 bench (which experts it generates). Tested in tests/model/expert_range_test.cpp.
#pragma once

#include <cstdint>

namespace dsv4 {

struct ExpertRange {
    int64_t first = 0, count = 0;
};
// Throws dsv4::Error unless 0 <= rank < ranks.
ExpertRange expert_range(int64_t experts, int rank, int ranks);

}  // namespace dsv4
