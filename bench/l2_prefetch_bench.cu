// What fetching a GEMV's weights into L2 ahead of it buys (kernels/cuda/l2_prefetch): a batch-1 FP8 GEMV at
// V4-Flash shapes after a latency-bound predecessor (a one-CTA kernel that spins for `busy` us, standing in for the
// mHC mixes, norms and attention kernels of a decode step, which leave DRAM idle), plainly and with l2_prefetch of
// its weights launched on a second stream when the predecessor starts. Each case is a CUDA graph of 20 (predecessor,
// GEMV) pairs, replayed (median of 7 replays); weights rotate over copies larger than L2, so without the prefetch
// every GEMV reads them from DRAM, as in a decode step where the other layers' weights have evicted them. The GEMV's
// share is the pair's time minus the predecessor's alone. Prefetch chunks of 4 to 64 KiB side by side.
// Usage: dsv4_bench_l2_prefetch   (numbers recorded in docs/perf.md)
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/gemm_bf16/cublaslt.h"
#include "kernels/cuda/gemm_fp8/gemm_fp8.h"
#include "kernels/cuda/l2_prefetch/l2_prefetch.h"
#include "kernels/cuda/smoke/device_info.h"

using namespace dsv4::cuda;

namespace {

constexpr int kPairs = 20, kReplays = 7;
constexpr size_t kRotateBytes = size_t(512) << 20;  // > 10x the 50 MiB L2 of an H100 or H200

__global__ void fill_bytes(uint8_t* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        p[i] = uint8_t(h >> 24) & 0x77;  // finite e4m3, |x| < 2
    }
}
__global__ void fill_f32(float* p, size_t n, float value) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        p[i] = value;
}
// One CTA busy for `cycles` SM clocks (a latency-bound predecessor: no DRAM traffic).
__global__ void spin(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

// Median us per launch(i) over kReplays replays of a graph of kPairs calls; `side` is a second stream the capture
// may fork to (and must join back).
double graph_us(cudaStream_t main, const std::function<void(int)>& launch) {
    cudaGraph_t graph = nullptr;
    DSV4_CUDA_CHECK(cudaStreamBeginCapture(main, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kPairs; ++i) launch(i);
    DSV4_CUDA_CHECK(cudaStreamEndCapture(main, &graph));
    cudaGraphExec_t exec = nullptr;
    DSV4_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    DSV4_CUDA_CHECK(cudaGraphLaunch(exec, main));
    std::vector<double> us;
    for (int r = 0; r < kReplays; ++r) {
        Event start, stop;
        start.record(main);
        DSV4_CUDA_CHECK(cudaGraphLaunch(exec, main));
        stop.record(main);
        us.push_back(double(stop.elapsed_since(start)) * 1e3 / kPairs);
    }
    DSV4_CUDA_CHECK(cudaGraphExecDestroy(exec));
    DSV4_CUDA_CHECK(cudaGraphDestroy(graph));
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
}

}  // namespace

int main() {
    std::printf("device: %s\n", describe_device(0).c_str());
    CublasLt lt;
    Stream main_stream, side_stream;
    Event fork, join;
    const cudaStream_t s = main_stream.get(), side = side_stream.get();
    int clock_khz = 0;
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    {
        const size_t copy_bytes = size_t(1) << 30;
        DeviceBuffer<uint8_t> src{copy_bytes}, dst{copy_bytes};
        const double us = graph_us(s, [&](int) {
            DSV4_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), copy_bytes, cudaMemcpyDeviceToDevice, s));
        });
        std::printf("limit: device-to-device copy %.0f GB/s (read + write of 1 GiB)\n", 2.0 * copy_bytes / us / 1e3);
    }

    struct Shape {
        const char* name;
        int64_t n, k;
    };
    const Shape shapes[] = {{"wq_a|wkv", 1536, 4096}, {"wq_b", 32768, 1024}, {"wo_b", 4096, 8192},
                            {"s1|s3", 4096, 4096}};
    std::printf("\n%-9s %6s %7s %9s %9s %11s %9s %9s %9s %9s\n", "gemv", "MB", "busy us", "busy alone", "cold us",
                "cold GB/s", "pf 4K", "pf 8K", "pf 16K", "pf 64K");
    for (const Shape& shape : shapes) {
        const size_t w_bytes = size_t(shape.n * shape.k);
        const int copies = int(std::max<size_t>(2, kRotateBytes / w_bytes));
        DeviceBuffer<uint8_t> w(w_bytes * copies), a(size_t(shape.k));
        DeviceBuffer<float> w_scale(size_t((shape.n + 127) / 128 * ((shape.k + 127) / 128))), a_scale(64);
        DeviceBuffer<__nv_bfloat16> y(size_t(shape.n));
        fill_bytes<<<1024, 256>>>(w.get(), w.size(), 7);
        fill_bytes<<<64, 256>>>(a.get(), a.size(), 11);
        fill_f32<<<64, 256>>>(w_scale.get(), w_scale.size(), 1.0f / 64);
        fill_f32<<<1, 64>>>(a_scale.get(), a_scale.size(), 1.0f / 32);
        DSV4_CUDA_CHECK(cudaGetLastError());
        const Fp8GemmConfig config = fp8_gemm_config(1, shape.n, shape.k, 132, Fp8GemmPath::kAuto);
        DeviceBuffer<uint8_t> workspace(std::max<size_t>(256, fp8_gemm_workspace_bytes(config, 1, shape.n, shape.k)));
        auto gemv = [&](int i) {
            Fp8GemmParams p;
            p.a = a.get();
            p.a_scale = a_scale.get();
            p.w = w.get() + size_t(i % copies) * w_bytes;
            p.w_scale = w_scale.get();
            p.y = y.get();
            p.m = 1;
            p.n = shape.n;
            p.k = shape.k;
            p.workspace = workspace.get();
            p.workspace_bytes = workspace.bytes();
            fp8_gemm(lt, p, s);
        };
        gemv(0);  // one-time host work outside the capture
        DSV4_CUDA_CHECK(cudaDeviceSynchronize());
        for (double busy : {0.0, 5.0, 10.0, 20.0}) {
            const long long cycles = (long long)(busy * clock_khz / 1e3);
            auto pred = [&] { spin<<<1, 32, 0, s>>>(cycles); };
            const double alone = graph_us(s, [&](int) { pred(); });
            const double cold = graph_us(s, [&](int i) {
                pred();
                gemv(i);
            });
            double pf[4];
            const int64_t chunks[] = {4 << 10, 8 << 10, 16 << 10, 64 << 10};
            for (int c = 0; c < 4; ++c)
                pf[c] = graph_us(s, [&](int i) {
                    fork.record(s);
                    DSV4_CUDA_CHECK(cudaStreamWaitEvent(side, fork.get()));
                    const L2Range range{w.get() + size_t(i % copies) * w_bytes, int64_t(w_bytes)};
                    detail::launch_l2_prefetch({&range, 1}, chunks[c], side);
                    pred();
                    gemv(i);
                    join.record(side);
                    DSV4_CUDA_CHECK(cudaStreamWaitEvent(s, join.get()));
                });
            std::printf("%-9s %6.1f %7.0f %9.2f %9.2f %11.0f %9.2f %9.2f %9.2f %9.2f\n", shape.name, w_bytes / 1e6,
                        busy, alone, cold - alone, w_bytes / ((cold - alone) * 1e3), pf[0] - alone, pf[1] - alone,
                        pf[2] - alone, pf[3] - alone);
        }
    }
    std::printf("\n(columns after 'busy alone': the GEMV's share of a pair, us; pf: with the prefetch, by chunk)\n");
    return 0;
}
