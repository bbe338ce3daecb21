#include "runtime/cuda/nccl_group.h"

#include <nccl.h>

#include <atomic>
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
    if (comm_->aborted.load()) return;  // abort() freed it
    ncclCommDestroy(comm_->comm);
}

void NcclGroup::sum_bf16(void* data, int64_t count, cudaStream_t stream) {
    check(ncclAllReduce(data, data, size_t(count), ncclBfloat16, ncclSum, comm_->comm, stream), "ncclAllReduce");
}

void NcclGroup::gather_rows(std::span<const Rows> buffers, std::span<const int64_t> rank_rows, cudaStream_t stream) {
    DSV4_CHECK(int(rank_rows.size()) == ranks_, "gather_rows: {} row counts for {} ranks", rank_rows.size(), ranks_);
    check(ncclGroupStart(), "ncclGroupStart");
    int64_t first = 0;
    ncclResult_t queued = ncclSuccess;  // the first failure; the group is closed before it is reported
    for (int r = 0; r < ranks_ && queued == ncclSuccess; ++r) {
        const int64_t rows = rank_rows[size_t(r)];
        for (const Rows& b : buffers) {
            if (rows == 0) break;  // every rank skips the same roots
            auto* at = static_cast<uint8_t*>(b.all) + first * b.row_bytes;
            const void* send = r == rank_ ? b.local : at;
            queued = ncclBroadcast(send, at, size_t(rows * b.row_bytes), ncclUint8, r, comm_->comm, stream);
            if (queued != ncclSuccess) break;
        }
        first += rows;
    }
    const ncclResult_t ended = ncclGroupEnd();
    check(queued, "ncclBroadcast");
    check(ended, "ncclGroupEnd");
}

void NcclGroup::abort() {
    if (comm_->aborted.exchange(true)) return;
    ncclCommAbort(comm_->comm);
}

}  // namespace dsv4::cuda
