#include "runtime/cuda/rank_agreement.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/common/cuda_check.h"

namespace dsv4 {

int64_t smallest_over_ranks(RankCollectives& comm, int rank, int ranks, int64_t value) {
    DSV4_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "smallest_over_ranks: rank {} of {}", rank, ranks);
    // Rank r's value lands in row r of `all` on every rank: [0, ranks) the gathered rows, [ranks] this rank's own.
    // A stream of its own, so nothing else the device runs is ordered with the collective.
    int64_t* all = nullptr;
    cudaStream_t stream = nullptr;
    std::vector<int64_t> values(size_t(ranks), 0);
    auto release = [&] {
        if (all) cudaFree(all);
        if (stream) cudaStreamDestroy(stream);
    };
    try {
        DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        DSV4_CUDA_CHECK(cudaMalloc(&all, sizeof(int64_t) * size_t(ranks + 1)));
        DSV4_CUDA_CHECK(cudaMemcpyAsync(all + ranks, &value, sizeof(int64_t), cudaMemcpyHostToDevice, stream));
        const RankCollectives::Rows rows{all + ranks, all, sizeof(int64_t)};
        const std::vector<int64_t> one_each(size_t(ranks), 1);
        comm.gather_rows({&rows, 1}, one_each, stream);
        DSV4_CUDA_CHECK(
            cudaMemcpyAsync(values.data(), all, sizeof(int64_t) * size_t(ranks), cudaMemcpyDeviceToHost, stream));
        DSV4_CUDA_CHECK(cudaStreamSynchronize(stream));
    } catch (...) {
        release();
        throw;
    }
    release();
    return *std::ranges::min_element(values);
}

}  // namespace dsv4
