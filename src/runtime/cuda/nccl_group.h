// NcclGroup: the NCCL communicator of an expert-parallel run, one rank per process and GPU (docs/parallel.md).
// Rank 0 makes the unique id (unique_id()), the rendezvous (runtime/parallel/tcp_group.h) hands it to every rank, and
// each rank builds its NcclGroup from it on its device; construction waits until all ranks have joined. The sums and
// gathers run on the caller's stream and are captured into the decode graphs like any kernel.
// abort() may be called from another thread (a watchdog that saw a peer go): it ends every pending NCCL operation,
// so a rank whose peer died does not wait forever in a collective.
// Tested on the GPU machine: tests/gpu/expert_parallel_test.cpp (two processes).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/cuda/cuda_model.h"

namespace dsv4::cuda {

class NcclGroup final : public RankCollectives {
  public:
    static std::vector<uint8_t> unique_id();  // on rank 0, before the rendezvous
    // Throws dsv4::Error with NCCL's reason when the communicator cannot be set up.
    NcclGroup(int rank, int ranks, std::span<const uint8_t> unique_id, int device);
    ~NcclGroup() override;
    NcclGroup(const NcclGroup&) = delete;
    NcclGroup& operator=(const NcclGroup&) = delete;

    int rank() const { return rank_; }
    int ranks() const { return ranks_; }
    void sum_bf16(void* data, int64_t count, cudaStream_t stream) override;
    // One ncclBroadcast per rank with rows and buffer, rooted at that rank, in one NCCL group (one launch).
    void gather_rows(std::span<const Rows> buffers, std::span<const int64_t> rank_rows, cudaStream_t stream) override;
    void abort();

  private:
    struct Comm;
    std::unique_ptr<Comm> comm_;
    int rank_ = 0, ranks_ = 1;
};

}  // namespace dsv4::cuda
