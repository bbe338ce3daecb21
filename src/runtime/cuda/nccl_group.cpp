#include "runtime/cuda/nccl_group.h"

#include <nccl.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "kernels/cuda/common/cuda_check.h"

namespace dsv4::cuda {

namespace {

void check(ncclResult_t r, const char* what) {
    if (r == ncclSuccess) return;
    throw DeviceError(fmt::format("NCCL {} failed: {} ({}); NCCL_DEBUG=WARN shows NCCL's own account", what,
                                  ncclGetErrorString(r), ncclGetLastError(nullptr) ? ncclGetLastError(nullptr) : ""));
}

}  // namespace

struct NcclGroup::Comm {
    ncclComm_t comm = nullptr;
    std::atomic<bool> aborted{false};
    void* exchange = nullptr;  // ncclMemAlloc'd
    ncclWindow_t window = nullptr;
};

std::vector<uint8_t> NcclGroup::unique_id() {
    ncclUniqueId id;
    check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::vector<uint8_t> bytes(sizeof(id.internal));
    std::memcpy(bytes.data(), id.internal, bytes.size());
    return bytes;
}

NcclGroup::NcclGroup(int rank, int ranks, std::span<const uint8_t> unique_id, int device)
    : comm_(std::make_unique<Comm>()), rank_(rank), ranks_(ranks) {
    ncclUniqueId id;
    DSV4_CHECK(unique_id.size() == sizeof(id.internal), "NCCL unique id of {} bytes, expected {}", unique_id.size(),
               sizeof(id.internal));
    std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
    DSV4_CUDA_CHECK(cudaSetDevice(device));
    check(ncclCommInitRank(&comm_->comm, ranks, id, rank), "ncclCommInitRank");
}

NcclGroup::~NcclGroup() {
    if (!comm_->comm) return;
    if (comm_->aborted.load()) return;  // abort() freed it (the exchange memory goes with the process)
    if (comm_->window) ncclCommWindowDeregister(comm_->comm, comm_->window);
    if (comm_->exchange) ncclMemFree(comm_->exchange);
    ncclCommDestroy(comm_->comm);
}

void* NcclGroup::exchange_buffer(size_t bytes) {
    DSV4_CHECK(!comm_->exchange, "NcclGroup: one exchange buffer per communicator");
    check(ncclMemAlloc(&comm_->exchange, bytes), "ncclMemAlloc");
    const ncclResult_t r =
        ncclCommWindowRegister(comm_->comm, comm_->exchange, bytes, &comm_->window, NCCL_WIN_COLL_SYMMETRIC);
    if (r != ncclSuccess) {
        comm_->window = nullptr;
        std::fprintf(stderr,
                     "dsv4: rank %d: NCCL could not register the expert exchange as symmetric memory (%s); it runs on "
                     "NCCL's channel path\n",
                     rank_, ncclGetErrorString(r));
    }
    return comm_->exchange;
}

void NcclGroup::sum_bf16(void* data, int64_t count, cudaStream_t stream) {
    check(ncclAllReduce(data, data, size_t(count), ncclBfloat16, ncclSum, comm_->comm, stream), "ncclAllReduce");
}

void NcclGroup::abort() {
    if (comm_->aborted.exchange(true)) return;
    ncclCommAbort(comm_->comm);
}

}  // namespace dsv4::cuda
