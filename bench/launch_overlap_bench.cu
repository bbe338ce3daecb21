// What a kernel boundary costs inside a replayed CUDA graph, and how much programmatic dependent launch (PDL) saves:
// a chain of kChain dependent small kernels (each reads the previous one's 8 KiB-2 MiB output and writes its own),
// captured once plainly and once with every launch marked programmaticStreamSerialization, each kernel waiting for
// its predecessor (griddepcontrol.wait) before touching memory and then letting its successor launch
// (griddepcontrol.launch_dependents). Reported: the replayed chain's time per kernel for several grid sizes, and
// the same chain as one kernel per step with no work (the floor of a boundary). Correctness: both chains' final
// buffers equal (bitwise) the host's recomputation.
// Usage: dsv4_bench_launch_overlap   (numbers recorded in docs/perf.md, "Kernel boundaries")
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "kernels/cuda/common/cuda_check.h"

namespace {

constexpr int kChain = 48;
constexpr int kThreads = 256;
constexpr int kWarmups = 5, kReplays = 50;

template <bool kPdl>
__global__ void __launch_bounds__(kThreads) step_kernel(const float* in, float* out, int per_cta) {
    if constexpr (kPdl) {
        asm volatile("griddepcontrol.wait;" ::: "memory");
        asm volatile("griddepcontrol.launch_dependents;");
    }
    const int base = blockIdx.x * per_cta;
    for (int i = threadIdx.x; i < per_cta; i += kThreads) out[base + i] = in[base + i] * 0.5f + 1.0f;
}

float chain_us(bool pdl, int ctas, int per_cta, float* a, float* b, cudaStream_t s) {
    cudaGraph_t graph;
    DSV4_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int k = 0; k < kChain; ++k) {
        const float* in = k % 2 ? b : a;
        float* out = k % 2 ? a : b;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(unsigned(ctas));
        cfg.blockDim = dim3(kThreads);
        cfg.stream = s;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = pdl ? 1 : 0;
        if (pdl)
            DSV4_CUDA_CHECK(cudaLaunchKernelEx(&cfg, step_kernel<true>, in, out, per_cta));
        else
            DSV4_CUDA_CHECK(cudaLaunchKernelEx(&cfg, step_kernel<false>, in, out, per_cta));
    }
    DSV4_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec;
    DSV4_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    DSV4_CUDA_CHECK(cudaEventCreate(&e0));
    DSV4_CUDA_CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < kWarmups; ++i) DSV4_CUDA_CHECK(cudaGraphLaunch(exec, s));
    DSV4_CUDA_CHECK(cudaEventRecord(e0, s));
    for (int i = 0; i < kReplays; ++i) DSV4_CUDA_CHECK(cudaGraphLaunch(exec, s));
    DSV4_CUDA_CHECK(cudaEventRecord(e1, s));
    DSV4_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    DSV4_CUDA_CHECK(cudaEventDestroy(e0));
    DSV4_CUDA_CHECK(cudaEventDestroy(e1));
    DSV4_CUDA_CHECK(cudaGraphExecDestroy(exec));
    DSV4_CUDA_CHECK(cudaGraphDestroy(graph));
    return ms * 1e3f / float(kReplays * kChain);
}

// The chain's result from `init`, recomputed on the host: each step maps x to x * 0.5 + 1 (exact in f32 here).
bool check(const std::vector<float>& init, float* a, float* b, int n) {
    constexpr int replays_total = kWarmups + kReplays;
    std::vector<float> got(static_cast<size_t>(n)), want = init;
    for (int r = 0; r < replays_total * kChain; ++r)
        for (float& x : want) x = x * 0.5f + 1.0f;
    DSV4_CUDA_CHECK(
        cudaMemcpy(got.data(), (replays_total * kChain) % 2 ? b : a, size_t(n) * 4, cudaMemcpyDeviceToHost));
    return got == want;
}

}  // namespace

int main() {
    cudaStream_t s;
    DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::printf("kernel boundaries in a replayed graph: %d dependent kernels of %d threads per CTA\n", kChain,
                kThreads);
    std::printf("%8s %12s %14s %14s %8s  %s\n", "CTAs", "floats/CTA", "plain us/kern", "PDL us/kern", "saved", "check");
    for (const auto& [ctas, per_cta] :
         {std::pair{1, 0}, {1, 2048}, {16, 2048}, {132, 2048}, {264, 2048}, {528, 1024}}) {
        const int n = ctas * per_cta > 0 ? ctas * per_cta : 1;
        float *a, *b;
        DSV4_CUDA_CHECK(cudaMalloc(&a, size_t(n) * 4));
        DSV4_CUDA_CHECK(cudaMalloc(&b, size_t(n) * 4));
        std::vector<float> init(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) init[size_t(i)] = float(i % 97);
        bool ok = true;
        float us[2];
        for (int pdl = 0; pdl < 2; ++pdl) {
            DSV4_CUDA_CHECK(cudaMemcpy(a, init.data(), size_t(n) * 4, cudaMemcpyHostToDevice));
            DSV4_CUDA_CHECK(cudaMemcpy(b, init.data(), size_t(n) * 4, cudaMemcpyHostToDevice));
            us[pdl] = chain_us(pdl, ctas, per_cta, a, b, s);
            if (per_cta > 0) ok = ok && check(init, a, b, n);
        }
        std::printf("%8d %12d %14.2f %14.2f %7.2f  %s\n", ctas, per_cta, us[0], us[1], us[0] - us[1],
                    per_cta > 0 ? (ok ? "bitwise" : "MISMATCH") : "-");
        DSV4_CUDA_CHECK(cudaFree(a));
        DSV4_CUDA_CHECK(cudaFree(b));
    }
    return 0;
}
