// What the expert exchange's all-reduce costs by itself, without the wait for a slower rank: every GPU of the
// machine is a rank (a thread each, one NCCL communicator per GPU), and each rank replays a CUDA graph of kLayers
// back-to-back in-place all-reduces of the decode step's slot buffer (T x 6 x 4096 bf16, T = 1, 16, 64, 256), as the
// decode graphs capture them. Two buffers per size: an ordinary cudaMalloc (what the model uses) and ncclMemAlloc
// memory registered as a symmetric window (NCCL_WIN_COLL_SYMMETRIC, where NCCL may run its load/store kernels).
// In the model the exchange stage also holds the wait for the rank that ran more of the token's experts; the
// difference between that stage and this collective is the skew (docs/perf.md, "The expert exchange ...").
// Correctness: one eager sum of slots that are non-zero on one rank each must give every rank the slots bit for bit.
// Usage: dsv4_bench_exchange   (on a machine with two or more GPUs)
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "kernels/cuda/common/cuda_check.h"

namespace {

constexpr int kLayers = 43, kWarmups = 3, kReplays = 20, kSlots = 6, kDim = 4096;
constexpr int kTokens[] = {1, 16, 64, 256};

void check(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, ncclGetErrorString(r));
        std::exit(1);
    }
}

// Element i belongs to rank i % ranks: there it holds a bf16 value from i, elsewhere 0.
__device__ __nv_bfloat16 slot_value(long i) {
    return __float2bfloat16(float(i % 977) - 488.0f);
}

__global__ void fill_slots(__nv_bfloat16* x, long n, int rank, int ranks) {
    for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n; i += long(gridDim.x) * blockDim.x)
        x[i] = i % ranks == rank ? slot_value(i) : __float2bfloat16(0.0f);
}

__global__ void count_wrong(const __nv_bfloat16* x, long n, unsigned long long* wrong) {
    for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n; i += long(gridDim.x) * blockDim.x)
        if (__bfloat16_as_ushort(x[i]) != __bfloat16_as_ushort(slot_value(i))) atomicAdd(wrong, 1ull);
}

struct Result {
    double us = 0.0;
    bool exact = false;
};

// One rank's timing of one buffer: an eager sum checked, then the graph of kLayers sums replayed.
Result time_sums(ncclComm_t comm, int rank, int ranks, __nv_bfloat16* buffer, long count, cudaStream_t s) {
    Result r;
    fill_slots<<<256, 256, 0, s>>>(buffer, count, rank, ranks);
    check(ncclAllReduce(buffer, buffer, size_t(count), ncclBfloat16, ncclSum, comm, s), "ncclAllReduce");
    unsigned long long* wrong = nullptr;
    DSV4_CUDA_CHECK(cudaMallocAsync(&wrong, sizeof(*wrong), s));
    DSV4_CUDA_CHECK(cudaMemsetAsync(wrong, 0, sizeof(*wrong), s));
    count_wrong<<<256, 256, 0, s>>>(buffer, count, wrong);
    unsigned long long host_wrong = 1;
    DSV4_CUDA_CHECK(cudaMemcpyAsync(&host_wrong, wrong, sizeof(host_wrong), cudaMemcpyDeviceToHost, s));
    DSV4_CUDA_CHECK(cudaFreeAsync(wrong, s));
    DSV4_CUDA_CHECK(cudaStreamSynchronize(s));
    r.exact = host_wrong == 0;

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    DSV4_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int l = 0; l < kLayers; ++l)
        check(ncclAllReduce(buffer, buffer, size_t(count), ncclBfloat16, ncclSum, comm, s), "ncclAllReduce");
    DSV4_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    DSV4_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int w = 0; w < kWarmups; ++w) DSV4_CUDA_CHECK(cudaGraphLaunch(exec, s));
    cudaEvent_t start, stop;
    DSV4_CUDA_CHECK(cudaEventCreate(&start));
    DSV4_CUDA_CHECK(cudaEventCreate(&stop));
    DSV4_CUDA_CHECK(cudaEventRecord(start, s));
    for (int k = 0; k < kReplays; ++k) DSV4_CUDA_CHECK(cudaGraphLaunch(exec, s));
    DSV4_CUDA_CHECK(cudaEventRecord(stop, s));
    DSV4_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    r.us = 1e3 * double(ms) / (kLayers * kReplays);
    DSV4_CUDA_CHECK(cudaEventDestroy(start));
    DSV4_CUDA_CHECK(cudaEventDestroy(stop));
    DSV4_CUDA_CHECK(cudaGraphExecDestroy(exec));
    DSV4_CUDA_CHECK(cudaGraphDestroy(graph));
    return r;
}

}  // namespace

int main() {
    int ranks = 0;
    if (cudaGetDeviceCount(&ranks) != cudaSuccess) ranks = 0;
    if (ranks < 2) {
        std::printf("dsv4_bench_exchange: needs two or more GPUs, found %d\n", ranks);
        return 0;
    }
    ncclUniqueId id;
    check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    constexpr int kSizes = int(sizeof(kTokens) / sizeof(kTokens[0]));
    std::vector<Result> plain(kSizes), symmetric(kSizes);
    std::vector<int> all_exact(size_t(ranks), 1);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < ranks; ++rank)
        threads.emplace_back([&, rank] {
            DSV4_CUDA_CHECK(cudaSetDevice(rank));
            ncclComm_t comm;
            check(ncclCommInitRank(&comm, ranks, id, rank), "ncclCommInitRank");
            cudaStream_t s;
            DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
            for (int i = 0; i < kSizes; ++i) {
                const long count = long(kTokens[i]) * kSlots * kDim;
                const size_t bytes = size_t(count) * sizeof(__nv_bfloat16);
                __nv_bfloat16* ordinary = nullptr;
                DSV4_CUDA_CHECK(cudaMalloc(&ordinary, bytes));
                const Result p = time_sums(comm, rank, ranks, ordinary, count, s);
                DSV4_CUDA_CHECK(cudaFree(ordinary));
                void* sym = nullptr;
                ncclWindow_t window;
                check(ncclMemAlloc(&sym, bytes), "ncclMemAlloc");
                check(ncclCommWindowRegister(comm, sym, bytes, &window, NCCL_WIN_COLL_SYMMETRIC),
                      "ncclCommWindowRegister");
                const Result q = time_sums(comm, rank, ranks, static_cast<__nv_bfloat16*>(sym), count, s);
                check(ncclCommWindowDeregister(comm, window), "ncclCommWindowDeregister");
                check(ncclMemFree(sym), "ncclMemFree");
                if (!p.exact || !q.exact) all_exact[size_t(rank)] = 0;
                if (rank == 0) plain[size_t(i)] = p, symmetric[size_t(i)] = q;
            }
            DSV4_CUDA_CHECK(cudaStreamDestroy(s));
            check(ncclCommDestroy(comm), "ncclCommDestroy");
        });
    for (std::thread& t : threads) t.join();

    int driver = 0;
    DSV4_CUDA_CHECK(cudaDriverGetVersion(&driver));
    std::printf("dsv4_bench_exchange: %d GPUs, NCCL %d.%d.%d, in-place bf16 all-reduce, %d per graph (one per layer), "
                "rank 0's time per sum\n",
                ranks, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, kLayers);
    std::printf("%7s %10s %14s %16s\n", "tokens", "KiB", "cudaMalloc us", "symmetric us");
    for (int i = 0; i < kSizes; ++i)
        std::printf("%7d %10.0f %14.2f %16.2f\n", kTokens[i], kTokens[i] * kSlots * kDim * 2.0 / 1024,
                    plain[size_t(i)].us, symmetric[size_t(i)].us);
    bool exact = true;
    for (int e : all_exact) exact = exact && e;
    std::printf("%s\n", exact ? "every rank's sums exact (one non-zero slot per element)" : "SUMS DIFFER");
    return exact ? 0 : 1;
}
