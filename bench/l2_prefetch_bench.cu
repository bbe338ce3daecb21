// Does fetching a GEMV's weights into L2 ahead of it pay at batch 1? At V4-Flash decode shapes (one token) each
// case replays a graph of 20 steps; a step is a "latency stretch" (one CTA spinning for a set time, standing for
// the mHC pre-mix, norms and attention kernels that leave DRAM idle) followed by the FP8 GEMV, with the weights
// rotated over copies larger than L2 (each step a different copy, as in a decode step where other layers' weights
// evict them). Variants: no prefetch (cold), the same copy every step (warm: the L2 ceiling), and l2_prefetch of
// the step's copy launched before the stretch. Printed: us per step and the GEMV's share (step minus the stretch
// alone). The outputs of the prefetched and the cold runs are compared bitwise (a prefetch changes no value).
// Usage: dsv4_bench_l2_prefetch [stretch_us]   (numbers recorded in docs/perf.md)
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/gemm_fp8/gemm_fp8.h"
#include "kernels/cuda/l2_prefetch/l2_prefetch.h"
#include "kernels/cuda/smoke/device_info.h"

using namespace dsv4::cuda;

namespace {

constexpr int kSteps = 20, kReplays = 7;
constexpr size_t kRotateBytes = size_t(320) << 20;  // > 6x the 50 MiB L2

__global__ void fill_bytes(uint8_t* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        uint8_t b = uint8_t(h);
        if ((b & 0x7F) == 0x7F) b ^= 1;  // no e4m3 NaN
        p[i] = b;
    }
}
__global__ void fill_f32(float* p, size_t n, float v) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] = v;
}

// One CTA that spins for `ns` nanoseconds of the global timer: a stretch of the step that keeps DRAM idle.
__global__ void stretch(uint64_t ns) {
    uint64_t start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

double graph_us(const std::function<void(int, cudaStream_t)>& step) {
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    Stream stream;
    step(0, stream.get());
    stream.synchronize();
    cudaGraph_t graph = nullptr;
    DSV4_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kSteps; ++i) step(i, stream.get());
    DSV4_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &graph));
    cudaGraphExec_t exec = nullptr;
    DSV4_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    DSV4_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
    std::vector<double> us;
    for (int r = 0; r < kReplays; ++r) {
        Event start, stop;
        start.record(stream.get());
        DSV4_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
        stop.record(stream.get());
        stream.synchronize();
        us.push_back(double(stop.elapsed_since(start)) * 1e3 / kSteps);
    }
    DSV4_CUDA_CHECK(cudaGraphExecDestroy(exec));
    DSV4_CUDA_CHECK(cudaGraphDestroy(graph));
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
}

struct Shape {
    const char* name;
    int64_t n, k;
};

}  // namespace

int main(int argc, char** argv) {
    const double stretch_us = argc > 1 ? std::atof(argv[1]) : 20.0;
    std::printf("device: %s\n", describe_device(0).c_str());
    CublasLt lt;
    const uint64_t stretch_ns = uint64_t(stretch_us * 1e3);
    const double alone = graph_us([&](int, cudaStream_t s) { stretch<<<1, 32, 0, s>>>(stretch_ns); });
    std::printf("stretch alone: %.2f us per step (asked %.1f)\n", alone, stretch_us);
    std::printf("%-10s %6s %6s %8s | %-26s | %s\n", "weight", "N", "K", "MB", "us per step: cold warm prefetched",
                "GEMV share (us): cold warm prefetched, prefetched-without-stretch, bits");
    int failures = 0;
    for (const Shape s : {Shape{"wq_a|wkv", 1536, 4096}, Shape{"wq_b", 32768, 1024}, Shape{"wo_b", 4096, 8192},
                          Shape{"s1|s3", 4096, 4096}, Shape{"s2", 4096, 2048}}) {
        const size_t w_bytes = size_t(s.n * s.k);
        const int copies = int(std::max<size_t>(2, kRotateBytes / w_bytes));
        DeviceBuffer<uint8_t> w(w_bytes * copies), a(size_t(s.k));
        fill_bytes<<<1024, 256>>>(w.get(), w.size(), 7);
        fill_bytes<<<16, 256>>>(a.get(), a.size(), 11);
        const int64_t kb = (s.k + 127) / 128, nb = (s.n + 127) / 128;
        DeviceBuffer<float> w_scale(size_t(nb * kb)), a_scale(static_cast<size_t>(kb));
        fill_f32<<<64, 256>>>(w_scale.get(), w_scale.size(), 1.0f / 256);
        fill_f32<<<64, 256>>>(a_scale.get(), a_scale.size(), 1.0f / 64);
        DeviceBuffer<__nv_bfloat16> y(size_t(s.n) * kSteps), y_ref(size_t(s.n) * kSteps);
        DSV4_CUDA_CHECK(cudaDeviceSynchronize());
        auto gemv = [&](int i, int copy, __nv_bfloat16* out, cudaStream_t st) {
            Fp8GemmParams p;
            p.a = a.get();
            p.a_scale = a_scale.get();
            p.w = w.get() + size_t(copy) * w_bytes;
            p.w_scale = w_scale.get();
            p.y = out + size_t(i) * s.n;
            p.m = 1;
            p.n = s.n;
            p.k = s.k;
            p.path = Fp8GemmPath::kMma;
            fp8_gemm(lt, p, st);
        };
        auto prefetch = [&](int copy, cudaStream_t st) {
            const L2Range range{w.get() + size_t(copy) * w_bytes, w_bytes};
            l2_prefetch({&range, 1}, st);
        };
        const double cold = graph_us([&](int i, cudaStream_t st) {
            stretch<<<1, 32, 0, st>>>(stretch_ns);
            gemv(i, i % copies, y_ref.get(), st);
        });
        const double warm = graph_us([&](int i, cudaStream_t st) {
            stretch<<<1, 32, 0, st>>>(stretch_ns);
            gemv(i, 0, y.get(), st);
        });
        const double fetched = graph_us([&](int i, cudaStream_t st) {
            prefetch(i % copies, st);
            stretch<<<1, 32, 0, st>>>(stretch_ns);
            gemv(i, i % copies, y.get(), st);
        });
        const double plain_gemv = graph_us([&](int i, cudaStream_t st) { gemv(i, i % copies, y_ref.get(), st); });
        const double fetched_bare = graph_us([&](int i, cudaStream_t st) {
            prefetch(i % copies, st);
            gemv(i, i % copies, y.get(), st);
        });
        std::vector<uint16_t> h(y.size()), r(y_ref.size());
        DSV4_CUDA_CHECK(cudaMemcpy(h.data(), y.get(), h.size() * 2, cudaMemcpyDeviceToHost));
        DSV4_CUDA_CHECK(cudaMemcpy(r.data(), y_ref.get(), r.size() * 2, cudaMemcpyDeviceToHost));
        const bool same = std::memcmp(h.data(), r.data(), h.size() * 2) == 0;
        failures += !same;
        std::printf("%-10s %6lld %6lld %8.1f | %8.2f %7.2f %9.2f | %6.2f %6.2f %6.2f   %6.2f -> %6.2f  %s\n", s.name,
                    (long long)s.n, (long long)s.k, w_bytes / 1e6, cold, warm, fetched, cold - alone, warm - alone,
                    fetched - alone, plain_gemv, fetched_bare, same ? "identical" : "DIFFER");
    }
    return failures ? 1 : 0;
}
