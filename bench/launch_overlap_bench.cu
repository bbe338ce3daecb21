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

// A step that also streams its own weights (`w_per_thread` float4 a thread, which no kernel writes), the first
// kPreLoads of them requested before the wait for its predecessor when launched programmatically: how much of a
// weight reader's first round trips programmatic launch hides (docs/perf.md, "Programmatic dependent launch on the
// weight readers"). The weights are zeros, so the outputs are the plain chain's.
constexpr int kPreLoads = 4;

// A thread's weights of one kernel (or phase) `w`: float4 i at mine + i * stride, the grid's threads side by side.
struct WeightStream {
    const float4* mine;
    int64_t stride;
    int count;
};
__device__ __forceinline__ WeightStream weight_stream(const float4* w, int w_per_thread) {
    return {w + (int64_t(blockIdx.x) * kThreads + threadIdx.x), int64_t(gridDim.x) * kThreads, w_per_thread};
}
// The stream's first kPreLoads weights, requested (the loads that may go out before a wait or barrier).
__device__ __forceinline__ void load_first(const WeightStream& ws, float4 (&pre)[kPreLoads]) {
#pragma unroll
    for (int i = 0; i < kPreLoads; ++i)
        pre[i] = i < ws.count ? __ldg(ws.mine + i * ws.stride) : make_float4(0, 0, 0, 0);
}
// The sum of every weight of the stream (the first kPreLoads from `pre`), four loads in flight.
__device__ __forceinline__ float sum_weights(const WeightStream& ws, const float4 (&pre)[kPreLoads]) {
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kPreLoads; ++i) acc += pre[i].x + pre[i].y + pre[i].z + pre[i].w;
    for (int i = kPreLoads; i < ws.count; i += 4) {
        float4 v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
            v[j] = i + j < ws.count ? __ldg(ws.mine + (i + j) * ws.stride) : make_float4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < 4; ++j) acc += v[j].x + v[j].y + v[j].z + v[j].w;
    }
    return acc;
}
__device__ __forceinline__ void step_values(const float* in, float* out, int per_cta, float acc) {
    const int base = blockIdx.x * per_cta;
    for (int i = threadIdx.x; i < per_cta; i += kThreads) out[base + i] = in[base + i] * 0.5f + 1.0f + acc;
}

template <bool kPdl>
__global__ void __launch_bounds__(kThreads)
    weighted_step_kernel(const float4* w, int w_per_thread, const float* in, float* out, int per_cta) {
    if constexpr (kPdl) asm volatile("griddepcontrol.launch_dependents;");
    const WeightStream ws = weight_stream(w, w_per_thread);
    float4 pre[kPreLoads];
    load_first(ws, pre);
    if constexpr (kPdl) asm volatile("griddepcontrol.wait;" ::: "memory");
    step_values(in, out, per_cta, sum_weights(ws, pre));
}

// The same weighted chain as one persistent kernel: kChain phases separated by a grid barrier (an arrival count in
// global memory that every CTA waits to see complete; the CTAs are co-resident: a cooperative launch). With
// `prefetch`, a CTA requests the next phase's first kPreLoads weights before it arrives: what a chain of kernels
// fused into one could gain over kernel boundaries.
__device__ __forceinline__ void grid_barrier(unsigned* count, unsigned target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(count, 1u);
        unsigned seen = 0;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
        } while (seen < target);
    }
    __syncthreads();
}

template <bool kPrefetch>
__global__ void __launch_bounds__(kThreads) persistent_chain_kernel(const float4* w, int w_per_thread, float* a,
                                                                    float* b, int per_cta, unsigned* count) {
    const int64_t slice = int64_t(gridDim.x) * kThreads * w_per_thread;  // one phase's weights
    float4 pre[kPreLoads];
    load_first(weight_stream(w, w_per_thread), pre);
    for (int k = 0; k < kChain; ++k) {
        const WeightStream ws = weight_stream(w + k * slice, w_per_thread);
        if (!kPrefetch && k > 0) load_first(ws, pre);
        step_values(k % 2 ? b : a, k % 2 ? a : b, per_cta, sum_weights(ws, pre));
        if (kPrefetch && k + 1 < kChain) load_first(weight_stream(w + (k + 1) * slice, w_per_thread), pre);
        grid_barrier(count, unsigned(k + 1) * gridDim.x);
    }
}

// Captures `enqueue(stream)` into a graph; the mean microseconds of one replay (kReplays after kWarmups) divided by
// `per_replay` (the kernels or phases it holds).
template <class Enqueue>
float replay_us(cudaStream_t s, int per_replay, Enqueue&& enqueue) {
    cudaGraph_t graph;
    DSV4_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    enqueue(s);
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
    return ms * 1e3f / float(kReplays * per_replay);
}

float persistent_us(bool prefetch, int ctas, int per_cta, float* a, float* b, cudaStream_t s, const float4* w,
                    int w_per_thread, unsigned* count) {
    return replay_us(s, kChain, [&](cudaStream_t stream) {
        DSV4_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(unsigned), stream));
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(unsigned(ctas));
        cfg.blockDim = dim3(kThreads);
        cfg.stream = stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeCooperative;
        attr[0].val.cooperative = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        const auto kernel = prefetch ? persistent_chain_kernel<true> : persistent_chain_kernel<false>;
        DSV4_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, w, w_per_thread, a, b, per_cta, count));
    });
}

float chain_us(bool pdl, int ctas, int per_cta, float* a, float* b, cudaStream_t s, const float4* w = nullptr,
               int w_per_thread = 0) {
    return replay_us(s, kChain, [&](cudaStream_t stream) {
        for (int k = 0; k < kChain; ++k) {
            const float* in = k % 2 ? b : a;
            float* out = k % 2 ? a : b;
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(unsigned(ctas));
            cfg.blockDim = dim3(kThreads);
            cfg.stream = stream;
            cudaLaunchAttribute attr[1];
            attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            attr[0].val.programmaticStreamSerializationAllowed = 1;
            cfg.attrs = attr;
            cfg.numAttrs = pdl ? 1 : 0;
            if (w) {
                const float4* wk = w + int64_t(k) * ctas * kThreads * w_per_thread;
                const auto kernel = pdl ? weighted_step_kernel<true> : weighted_step_kernel<false>;
                DSV4_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, wk, w_per_thread, in, out, per_cta));
            } else {
                const auto kernel = pdl ? step_kernel<true> : step_kernel<false>;
                DSV4_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, in, out, per_cta));
            }
        }
    });
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

// The chain's two ping-pong buffers of n floats and the values every timed variant starts from.
struct PingPong {
    int n;
    float *a = nullptr, *b = nullptr;
    std::vector<float> init;
    explicit PingPong(int floats) : n(floats), init(static_cast<size_t>(floats)) {
        DSV4_CUDA_CHECK(cudaMalloc(&a, size_t(n) * 4));
        DSV4_CUDA_CHECK(cudaMalloc(&b, size_t(n) * 4));
        for (int i = 0; i < n; ++i) init[size_t(i)] = float(i % 97);
    }
    ~PingPong() {
        cudaFree(a);
        cudaFree(b);
    }
    PingPong(const PingPong&) = delete;
    PingPong& operator=(const PingPong&) = delete;
    void reset() const {
        DSV4_CUDA_CHECK(cudaMemcpy(a, init.data(), size_t(n) * 4, cudaMemcpyHostToDevice));
        DSV4_CUDA_CHECK(cudaMemcpy(b, init.data(), size_t(n) * 4, cudaMemcpyHostToDevice));
    }
    bool matches() const { return check(init, a, b, n); }
};

}  // namespace

int main() {
    cudaStream_t s;
    DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::printf("kernel boundaries in a replayed graph: %d dependent kernels of %d threads per CTA\n", kChain,
                kThreads);
    std::printf("%8s %12s %14s %14s %8s  %s\n", "CTAs", "floats/CTA", "plain us/kern", "PDL us/kern", "saved", "check");
    for (const auto& [ctas, per_cta] :
         {std::pair{1, 0}, {1, 2048}, {16, 2048}, {132, 2048}, {264, 2048}, {528, 1024}}) {
        const PingPong buffers(ctas * per_cta > 0 ? ctas * per_cta : 1);
        bool ok = true;
        float us[2];
        for (int pdl = 0; pdl < 2; ++pdl) {
            buffers.reset();
            us[pdl] = chain_us(pdl, ctas, per_cta, buffers.a, buffers.b, s);
            if (per_cta > 0) ok = ok && buffers.matches();
        }
        std::printf("%8d %12d %14.2f %14.2f %7.2f  %s\n", ctas, per_cta, us[0], us[1], us[0] - us[1],
                    per_cta > 0 ? (ok ? "bitwise" : "MISMATCH") : "-");
    }
    // Weight readers: 264 CTAs (two an SM), each kernel streaming its own weights (48 distinct slices, so they come
    // from DRAM), the dependent part 2048 floats a CTA.
    std::printf(
        "\nweight readers: %d dependent kernels of 264 CTAs, each with its own weights (first %d float4 a "
        "thread requested before the wait under PDL)\n",
        kChain, kPreLoads);
    std::printf("%12s %14s %14s %14s %14s  %s\n", "MB/kernel", "plain us/kern", "PDL us/kern", "barrier us/ph",
                "+prefetch", "check");
    unsigned* count;
    DSV4_CUDA_CHECK(cudaMalloc(&count, sizeof(unsigned)));
    for (const int w_per_thread : {1, 4, 16, 64, 256}) {
        const int ctas = 264, per_cta = 2048;
        const size_t w_count = size_t(kChain) * ctas * kThreads * w_per_thread;
        float4* w;
        DSV4_CUDA_CHECK(cudaMalloc(&w, w_count * sizeof(float4)));
        DSV4_CUDA_CHECK(cudaMemset(w, 0, w_count * sizeof(float4)));
        const PingPong buffers(ctas * per_cta);
        float *a = buffers.a, *b = buffers.b;
        bool ok = true;
        float us[4];
        for (int variant = 0; variant < 4; ++variant) {
            buffers.reset();
            us[variant] = variant < 2 ? chain_us(variant == 1, ctas, per_cta, a, b, s, w, w_per_thread)
                                      : persistent_us(variant == 3, ctas, per_cta, a, b, s, w, w_per_thread, count);
            ok = ok && buffers.matches();
        }
        const double mb = double(ctas) * kThreads * w_per_thread * 16 / 1e6;
        std::printf("%12.1f %14.2f %14.2f %14.2f %14.2f  %s\n", mb, us[0], us[1], us[2], us[3],
                    ok ? "bitwise" : "MISMATCH");
        DSV4_CUDA_CHECK(cudaFree(w));
    }
    DSV4_CUDA_CHECK(cudaFree(count));
    return 0;
}
