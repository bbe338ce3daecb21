// Programmatic dependent launch (kernels/cuda/common/programmatic_launch.h): a chain of kernels, each fetching its
// weight before it waits and reading and writing the buffers its neighbours write and read, gives the values of
// plain launches, eagerly and replayed from a captured graph.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/common/kernel_prologue.cuh"
#include "kernels/cuda/common/programmatic_launch.h"

namespace dsv4 {
namespace {

constexpr int kThreads = 256;

// out = in * 0.5 + weight (exact in f32 for the values below): `in` is the previous kernel's output, and `out` the
// buffer the previous kernel read.
__global__ void chain_step(const float* weight, const float* in, float* out, int64_t n) {
    cuda::allow_dependent_launch();
    const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
    const float w = i < n ? weight[i] : 0.0f;
    cuda::wait_for_prerequisites();
    if (i < n) out[i] = __fadd_rn(__fmul_rn(in[i], 0.5f), w);
}

struct Chain {
    static constexpr int64_t kN = int64_t(1) << 22;
    static constexpr int kSteps = 48;
    cuda::DeviceBuffer<float> weights{size_t(kSteps) * kN}, a{kN}, b{kN};
    std::vector<float> host_weights = std::vector<float>(size_t(kSteps) * kN), start = std::vector<float>(kN);

    Chain() {
        for (int64_t i = 0; i < int64_t(host_weights.size()); ++i) host_weights[size_t(i)] = float(i % 97);
        for (int64_t i = 0; i < kN; ++i) start[size_t(i)] = float(i % 1024);
        weights.upload(host_weights.data(), host_weights.size());
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
    void reset(cudaStream_t s) { a.upload(start.data(), start.size(), s); }
    // The chain's launches; the result is in a (kSteps is even).
    void enqueue(cudaStream_t s) {
        const dim3 grid(unsigned((kN + kThreads - 1) / kThreads));
        for (int step = 0; step < kSteps; ++step) {
            const float* w = weights.get() + int64_t(step) * kN;
            float* in = step % 2 ? b.get() : a.get();
            float* out = step % 2 ? a.get() : b.get();
            ASSERT_EQ(cuda::launch_kernel(chain_step, grid, dim3(kThreads), 0, s, w, in, out, kN), cudaSuccess);
        }
    }
    int64_t wrong(cudaStream_t s) const {
        std::vector<float> got(kN);
        a.download(got.data(), got.size(), s);
        EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        int64_t bad = 0;
        for (int64_t i = 0; i < kN; ++i) {
            float want = start[size_t(i)];
            for (int step = 0; step < kSteps; ++step) want = want * 0.5f + host_weights[size_t(step * kN + i)];
            bad += got[size_t(i)] != want;
        }
        return bad;
    }
};

TEST(ProgrammaticLaunch, ScopesNestAndRestore) {
    EXPECT_FALSE(cuda::programmatic_launches());
    {
        const cuda::ProgrammaticLaunches on(true);
        EXPECT_TRUE(cuda::programmatic_launches());
        {
            const cuda::ProgrammaticLaunches off(false);
            EXPECT_FALSE(cuda::programmatic_launches());
        }
        EXPECT_TRUE(cuda::programmatic_launches());
    }
    EXPECT_FALSE(cuda::programmatic_launches());
}

TEST(ProgrammaticLaunch, ChainGivesThePlainValuesEagerAndReplayed) {
    DSV4_REQUIRE_GPU();
    Chain chain;
    cuda::Stream stream;
    const cudaStream_t s = stream.get();
    for (bool on : {false, true}) {
        const cuda::ProgrammaticLaunches programmatic(on);
        chain.reset(s);
        chain.enqueue(s);
        EXPECT_EQ(cudaGetLastError(), cudaSuccess);
        EXPECT_EQ(chain.wrong(s), 0) << (on ? "programmatic" : "plain") << " launches, eager";

        cudaGraph_t graph = nullptr;
        ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        chain.enqueue(s);
        ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
        cudaGraphExec_t exec = nullptr;
        ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
        cudaGraphDestroy(graph);
        for (int replay = 0; replay < 3; ++replay) {
            chain.reset(s);
            ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
            EXPECT_EQ(chain.wrong(s), 0) << (on ? "programmatic" : "plain") << " launches, replay " << replay;
        }
        cudaGraphExecDestroy(exec);
    }
}

}  // namespace
}  // namespace dsv4
