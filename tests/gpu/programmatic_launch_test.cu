// Programmatic dependent launch (kernels/cuda/common/programmatic_launch.h): a chain of kernels, each fetching its
// weight before it waits and reading and writing the buffers its neighbours write and read, gives the values of
// plain launches, eagerly and replayed from a captured graph.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
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

// How stream capture records the launches: the programmatic edges of a chain on one stream, and of one that forks a
// second stream after a kernel and joins it before another (the decode graph's lanes).
__global__ void touch(float* x) {
    cuda::allow_dependent_launch();
    cuda::wait_for_prerequisites();
    if (threadIdx.x == 0 && blockIdx.x == 0) x[0] += 1.0f;
}

struct EdgeCount {
    size_t edges = 0, programmatic = 0;
};

EdgeCount edges_of(cudaGraph_t graph) {
    size_t n = 0;
    EXPECT_EQ(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n), cudaSuccess);
    std::vector<cudaGraphNode_t> from(n), to(n);
    std::vector<cudaGraphEdgeData> data(n);
    EXPECT_EQ(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &n), cudaSuccess);
    EdgeCount c;
    c.edges = n;
    for (const cudaGraphEdgeData& d : data) c.programmatic += d.type == cudaGraphDependencyTypeProgrammatic;
    return c;
}

TEST(ProgrammaticLaunch, CaptureRecordsProgrammaticEdges) {
    DSV4_REQUIRE_GPU();
    cuda::DeviceBuffer<float> x(2);
    cuda::Stream main_lane, side_lane;
    cuda::Event fork, join;
    const cudaStream_t s = main_lane.get();
    auto capture = [&](bool with_side) {
        cudaGraph_t graph = nullptr;
        EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        const cuda::ProgrammaticLaunches programmatic(true);
        for (int i = 0; i < 4; ++i) {
            EXPECT_EQ(cuda::launch_kernel(touch, dim3(1), dim3(32), 0, s, x.get()), cudaSuccess);
            if (with_side && i == 1) {
                EXPECT_EQ(cudaEventRecord(fork.get(), s), cudaSuccess);
                EXPECT_EQ(cudaStreamWaitEvent(side_lane.get(), fork.get()), cudaSuccess);
                touch<<<1, 32, 0, side_lane.get()>>>(x.get() + 1);
                EXPECT_EQ(cudaEventRecord(join.get(), side_lane.get()), cudaSuccess);
            }
            if (with_side && i == 2) EXPECT_EQ(cudaStreamWaitEvent(s, join.get()), cudaSuccess);
        }
        EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
        const EdgeCount c = edges_of(graph);
        cudaGraphDestroy(graph);
        return c;
    };
    const EdgeCount chain = capture(false), forked = capture(true);
    std::printf(
        "[ capture  ] 4 programmatic launches: %zu edges, %zu programmatic; with a side lane forked after the "
        "second and joined after the third: %zu edges, %zu programmatic\n",
        chain.edges, chain.programmatic, forked.edges, forked.programmatic);
    EXPECT_EQ(chain.edges, 3u);
    EXPECT_EQ(chain.programmatic, 3u);
}

}  // namespace
}  // namespace dsv4
