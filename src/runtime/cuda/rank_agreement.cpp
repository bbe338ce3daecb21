#include "runtime/cuda/rank_agreement.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/common/cuda_check.h"

namespace dsv4 {

int64_t smallest_over_ranks(RankCollectives& comm, int rank, int ranks, int64_t value) {
    DSV4_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "smallest_over_ranks: rank {} of {}", rank, ranks);
    // Rank r's value lands in row r of `all` on every rank: [0, ranks) the gathered rows, [ranks] this rank's own.
    int64_t* all = nullptr;
    DSV4_CUDA_CHECK(cudaMalloc(&all, sizeof(int64_t) * size_t(ranks + 1)));
    std::vector<int64_t> values(size_t(ranks), 0);
    try {
        DSV4_CUDA_CHECK(cudaMemcpy(all + ranks, &value, sizeof(int64_t), cudaMemcpyHostToDevice));
        const RankCollectives::Rows rows{all + ranks, all, sizeof(int64_t)};
        const std::vector<int64_t> one_each(size_t(ranks), 1);
        comm.gather_rows({&rows, 1}, one_each, nullptr);
        DSV4_CUDA_CHECK(cudaMemcpy(values.data(), all, sizeof(int64_t) * size_t(ranks), cudaMemcpyDeviceToHost));
    } catch (...) {
        cudaFree(all);
        throw;
    }
    DSV4_CUDA_CHECK(cudaFree(all));
    return *std::ranges::min_element(values);
}

}  // namespace dsv4
