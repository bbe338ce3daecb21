#include "runtime/cuda/rank_agreement.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_buffer.h"

namespace dsv4 {

int64_t smallest_over_ranks(RankCollectives& comm, int rank, int ranks, int64_t value) {
    DSV4_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "smallest_over_ranks: rank {} of {}", rank, ranks);
    // Rank r's value lands in row r of `all` on every rank: [0, ranks) the gathered rows, [ranks] this rank's own.
    // A stream of its own, so nothing else the device runs is ordered with the collective.
    const cuda::Stream stream;
    const cuda::DeviceBuffer<int64_t> all(size_t(ranks + 1));
    DSV4_CUDA_CHECK(cudaMemcpyAsync(all.get() + ranks, &value, sizeof(int64_t), cudaMemcpyHostToDevice, stream.get()));
    const RankCollectives::Rows rows{all.get() + ranks, all.get(), sizeof(int64_t)};
    comm.gather_rows({&rows, 1}, std::vector<int64_t>(size_t(ranks), 1), stream.get());
    std::vector<int64_t> values(size_t(ranks), 0);
    all.download(values.data(), values.size(), stream.get());
    stream.synchronize();
    return *std::ranges::min_element(values);
}

}  // namespace dsv4
