// expert_range (expert_range.h).
#include "model/expert_range.h"

#include "core/error.h"

namespace dsv4 {

ExpertRange expert_range(int64_t experts, int rank, int ranks) {
    DSV4_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "expert_range: rank {} of {}", rank, ranks);
    const int64_t first = experts * rank / ranks, end = experts * (rank + 1) / ranks;
    return {first, end - first};
}

}  // namespace dsv4
