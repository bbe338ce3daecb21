// Values every rank of an expert-parallel run must share but computes from its own device (the prefill piece the
// free memory allows): each rank passes its own and all get the same answer, through the ranks' collectives. Every
// rank must call it at the same point of its construction (a collective).
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_model.h"

namespace dsv4 {

// The smallest of the ranks' `value`s, on every rank (synchronizes the device).
int64_t smallest_over_ranks(RankCollectives& comm, int rank, int ranks, int64_t value);

}  // namespace dsv4
