// What rate does Hopper's f16 warpgroup MMA reach in the shapes dsv4's kernels issue (A from registers, B from shared
// memory as K-major core matrices without swizzle)? The prefill's routed experts issue m64n64k16 (64-slot passes) in
// units of two k16 steps, each unit's sums promoted by FFMAs; the FP8 linears' 128 x 128 tile issues eight k16 steps a
// block (as one m64n128 a step since the twenty-ninth session, as two m64n64 halves before). One CTA a SM, every SM
// busy, each mode a loop of groups:
//   drain      N in {64, 128, 256} x 1-3 warpgroups: groups of eight chained k16 steps, each warpgroup waiting for its
//              group before the next (the tensor pipe's rate for that N, nothing else to do);
//   promoted   each group from zero, waited for, then one FFMA an output into f32 totals (2 or 4 k16 steps at N = 64:
//              an expert unit that drains; 8 at N = 128: gemm_fp8's consumer);
//   paired     the experts' stage as multiply_stage runs it: eight 2-step units on two accumulators, unit u issued
//              before unit u - 1 is waited for and promoted;
//   halves     gemm_fp8's consumer before: a block as two m64n64 commit groups, the first promoted while the second
//   runs; hog        some of the above beside one more warpgroup streaming 16-byte shared-memory loads and stores
//   through a
//              region of its own (how much shared-memory traffic that is not the MMA's operands costs it).
// Usage: dsv4_probe_wgmma_rate   (outcome in docs/perf.md, "What the f16 warpgroup MMA reaches by shape")
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/common/cp_async.cuh"
#include "kernels/cuda/common/cta_sync.cuh"
#include "kernels/cuda/common/wgmma.cuh"

#include "probe_check.h"

namespace {

using namespace dsv4::cuda;

constexpr int kSteps = 8;  // k16 steps of B staged (a 128-column block)
constexpr int kHogBytes = 32 * 1024;

// d (m64 x N, N / 2 floats a thread) = a x b + (accumulate ? d : 0), A from registers, B at desc: the product's
// wrappers (common/wgmma.cuh) for N = 32, 64, 128; N = 256, which no kernel issues, here.
template <int N>
__device__ __forceinline__ void wgmma(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc, bool accumulate) {
    static_assert(N == 32 || N == 64 || N == 128 || N == 256);
    if constexpr (N == 32)
        wgmma_m64n32k16_f16(d, a, desc, accumulate);
    else if constexpr (N == 64)
        wgmma_m64n64k16_f16(d, a, desc, accumulate);
    else if constexpr (N == 128)
        wgmma_m64n128k16_f16(d, a, desc, accumulate);
    else {
#if DSV4_WGMMA
        asm volatile(
            "{\n .reg .pred p;\n setp.ne.b32 p, %133, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
            "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, "
            "%33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, "
            "%54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, "
            "%75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
            "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, "
            "%114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
            "{%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
              "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
              "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
              "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
              "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
              "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
              "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
              "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
              "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]),
              "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
              "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),
              "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]),
              "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(int(accumulate)));
#endif
    }
}

// kMath warpgroups issue the MMAs; with kHog one more streams shared memory. kPromote: groups of kGroup k16 steps
// into two accumulators taking turns, each promoted by FFMAs after its wait; else one chained accumulator.
enum class Mode { kDrain, kDrainPromote, kHalves, kPaired };

template <int kN, int kMath, int kGroup, Mode kMode, bool kHog>
__global__ void __launch_bounds__((kMath + kHog) * 128, 1) probe(float* out, int groups) {
    extern __shared__ __align__(128) uint8_t smem[];
    const int tid = threadIdx.x, wg = tid / 128;
    constexpr int kTileBytes = kSteps * kN * 32;
    for (int i = tid; i < (kTileBytes + (kHog ? kHogBytes : 0)) / 4; i += blockDim.x)
        reinterpret_cast<uint32_t*>(smem)[i] = 0x3C003C00u ^ (i & 0x00FF00FFu);  // f16 near 1
    fence_proxy_async_shared();
    __syncthreads();
    if (kHog && wg == kMath) {
        // Two math warpgroups and the hog: 2 x 128 x 208 + 128 x 88 registers, as the product's specialized kernels.
        if constexpr (kHog) warpgroup_registers_decrease<88>();
        // 16-byte loads and stores through the hog's own region until the MMAs are done (flag in shared memory).
        uint4* region = reinterpret_cast<uint4*>(smem + kTileBytes);
        volatile int* done = reinterpret_cast<volatile int*>(smem + kTileBytes + kHogBytes);
        uint4 v = region[tid % 128];
        int i = tid % 128;
        while (!*done) {
#pragma unroll 8
            for (int r = 0; r < 64; ++r) {
                const uint4 w = region[(i + 128 * r) % (kHogBytes / 16)];
                v.x ^= w.y, v.y += w.x, v.z ^= w.w, v.w += w.z;
                region[(i + 128 * r + 64) % (kHogBytes / 16)] = v;
            }
        }
        if (v.x == 0x12345678u) out[0] = 1.0f;
        return;
    }
    if constexpr (kHog) warpgroup_registers_increase<208>();
    const uint64_t desc0 = wgmma_desc(smem_addr(smem), 128, 256);
    uint32_t a[4] = {0x3C003C00u, 0x3C003C00u ^ uint32_t(tid), 0x3C003C00u, 0x3C003C00u};
    const float scale = 1.0f / (1 + (tid & 7));
    constexpr bool kPromote = kMode == Mode::kDrainPromote;
    float total = 0.0f;
    if constexpr (kMode == Mode::kPaired) {
        // The experts' stage (moe_wgmma_stage.cuh, multiply_stage): eight units of kGroup k16 steps, each from zero
        // into one of two accumulators in turn; unit u's wgmmas issued before unit u - 1 is waited for (wait 1) and
        // promoted, the stage drained after its last unit. A group here is a stage.
        float acc[2][kN / 2], sum[kN / 2];
#pragma unroll
        for (int i = 0; i < kN / 2; ++i) sum[i] = 0.0f;
        for (int g = 0; g < groups; ++g) {
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                wgmma_fence_operand(acc[u % 2]);
                wgmma_fence();
#pragma unroll
                for (int j = 0; j < kGroup; ++j)
                    wgmma<kN>(acc[u % 2], a, desc0 + ((((u * kGroup + j) % kSteps) * kN * 32) >> 4), j > 0);
                wgmma_commit();
                if (u > 0) {
                    wgmma_wait<1>();
                    wgmma_fence_operand(acc[(u - 1) % 2]);
#pragma unroll
                    for (int i = 0; i < kN / 2; ++i) sum[i] = __fmaf_rn(acc[(u - 1) % 2][i], scale, sum[i]);
                }
            }
            wgmma_wait<0>();
            wgmma_fence_operand(acc[1]);
#pragma unroll
            for (int i = 0; i < kN / 2; ++i) sum[i] = __fmaf_rn(acc[1][i], scale, sum[i]);
        }
#pragma unroll
        for (int i = 0; i < kN / 2; ++i) total += sum[i];
    } else if constexpr (kMode == Mode::kHalves) {
        // gemm_fp8's consumer: a block's eight k16 steps as two m64(kN/2) halves, each its own commit group; half 0
        // promoted while half 1 runs, the warpgroup's pipe drained at the block's end.
        float acc[2][kN / 4], sum[kN / 2];
#pragma unroll
        for (int i = 0; i < kN / 2; ++i) sum[i] = 0.0f;
        for (int g = 0; g < groups; ++g) {
            wgmma_fence_operand(acc[0]);
            wgmma_fence_operand(acc[1]);
            wgmma_fence();
#pragma unroll
            for (int h = 0; h < 2; ++h) {
#pragma unroll
                for (int j = 0; j < kSteps; ++j)
                    wgmma<kN / 2>(acc[h], a, desc0 + ((j * kN * 32 + h * (kN / 16) * 256) >> 4), j > 0);
                wgmma_commit();
            }
            wgmma_wait<1>();
            wgmma_fence_operand(acc[0]);
#pragma unroll
            for (int i = 0; i < kN / 4; ++i) sum[i] = __fmaf_rn(acc[0][i], scale, sum[i]);
            wgmma_wait<0>();
            wgmma_fence_operand(acc[1]);
#pragma unroll
            for (int i = 0; i < kN / 4; ++i) sum[kN / 4 + i] = __fmaf_rn(acc[1][i], scale, sum[kN / 4 + i]);
        }
#pragma unroll
        for (int i = 0; i < kN / 2; ++i) total += sum[i];
    } else {
        // kGroup k16 steps into acc from zero, the warpgroup's pipe drained (wait 0), then (kPromote) one FFMA an
        // output into the totals: the experts' units (kGroup 2) and gemm_fp8's whole-tile blocks (kGroup 8).
        float acc[kN / 2], sum[kPromote ? kN / 2 : 1];
#pragma unroll
        for (int i = 0; i < (kPromote ? kN / 2 : 1); ++i) sum[i] = 0.0f;
        for (int g = 0; g < groups; ++g) {
            wgmma_fence_operand(acc);
            wgmma_fence();
#pragma unroll
            for (int j = 0; j < kGroup; ++j)
                wgmma<kN>(acc, a, desc0 + ((((g * kGroup + j) % kSteps) * kN * 32) >> 4), kPromote ? j > 0 : true);
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_operand(acc);
            if constexpr (kPromote) {
#pragma unroll
                for (int i = 0; i < kN / 2; ++i) sum[i] = __fmaf_rn(acc[i], scale, sum[i]);
            }
        }
#pragma unroll
        for (int i = 0; i < (kPromote ? kN / 2 : 1); ++i) total += sum[i];
#pragma unroll
        for (int i = 0; i < kN / 2; ++i) total += acc[i];
    }
    if (kHog) {
        named_barrier_sync(1, kMath * 128);
        if (tid == 0) *reinterpret_cast<volatile int*>(smem + kSteps * kN * 32 + kHogBytes) = 1;
    }
    if (total == 1.2345f) out[blockIdx.x] = total;
}

const char* mode_name(Mode m) {
    return m == Mode::kDrain          ? "drain"
           : m == Mode::kDrainPromote ? "promoted"
           : m == Mode::kHalves       ? "halves"
                                      : "paired";
}

template <int kN, int kMath, int kGroup, Mode kMode, bool kHog>
void run(int sms, float* out) {
    const auto kernel = probe<kN, kMath, kGroup, kMode, kHog>;
    const int smem = kSteps * kN * 32 + (kHog ? kHogBytes + 16 : 0);
    PROBE_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    // Groups a warpgroup: the same work at every shape, ~2^34 MACs in all.
    const int steps_a_group = kMode == Mode::kHalves ? kSteps : kMode == Mode::kPaired ? 8 * kGroup : kGroup;
    const int groups = int((int64_t(1) << 34) / (int64_t(sms) * kMath * 64 * kN * 16 * steps_a_group));
    cudaEvent_t start, stop;
    PROBE_CHECK(cudaEventCreate(&start));
    PROBE_CHECK(cudaEventCreate(&stop));
    kernel<<<sms, (kMath + kHog) * 128, smem>>>(out, groups);  // warm-up
    PROBE_CHECK(cudaGetLastError());
    PROBE_CHECK(cudaDeviceSynchronize());
    float best = 1e30f;
    for (int r = 0; r < 5; ++r) {
        PROBE_CHECK(cudaEventRecord(start));
        kernel<<<sms, (kMath + kHog) * 128, smem>>>(out, groups);
        PROBE_CHECK(cudaEventRecord(stop));
        PROBE_CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        PROBE_CHECK(cudaEventElapsedTime(&ms, start, stop));
        best = ms < best ? ms : best;
    }
    const double macs = double(sms) * kMath * groups * steps_a_group * 64.0 * kN * 16;
    std::printf("%-9s %4d %4d %5d %5s %9.3f %9.1f\n", mode_name(kMode), kN, kMath, steps_a_group, kHog ? "yes" : "no",
                best, 2 * macs / (best * 1e-3) / 1e12);
    PROBE_CHECK(cudaEventDestroy(start));
    PROBE_CHECK(cudaEventDestroy(stop));
}

}  // namespace

int main() {
    cudaDeviceProp prop{};
    PROBE_CHECK(cudaGetDeviceProperties(&prop, 0));
    int khz = 0;
    PROBE_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    std::printf("device: %s, %d SMs, %d MHz\n", prop.name, prop.multiProcessorCount, khz / 1000);
    if (prop.major != 9) {
        std::printf("skipped: wgmma needs compute capability 9.0\n");
        return 0;
    }
    const int sms = prop.multiProcessorCount;
    float* out = nullptr;
    PROBE_CHECK(cudaMalloc(&out, sizeof(float) * size_t(sms)));
    std::printf("%-9s %4s %4s %5s %5s %9s %9s\n", "mode", "N", "wgs", "k16s", "hog", "ms", "TFLOP/s");
    using M = Mode;
    // The tensor pipe's rate by N, a warpgroup's pipe drained every eight k16 steps.
    run<64, 1, 8, M::kDrain, false>(sms, out);
    run<64, 2, 8, M::kDrain, false>(sms, out);
    run<64, 3, 8, M::kDrain, false>(sms, out);
    run<128, 1, 8, M::kDrain, false>(sms, out);
    run<128, 2, 8, M::kDrain, false>(sms, out);
    run<128, 3, 8, M::kDrain, false>(sms, out);
    run<256, 1, 8, M::kDrain, false>(sms, out);
    run<256, 2, 8, M::kDrain, false>(sms, out);
    // The experts' 64-slot units (two k16 steps, 32 FFMAs a thread), two and three warpgroups.
    run<64, 2, 2, M::kDrainPromote, false>(sms, out);
    run<64, 3, 2, M::kDrainPromote, false>(sms, out);
    run<64, 2, 4, M::kDrainPromote, false>(sms, out);
    // The experts' stage as multiply_stage runs it: eight 2-step units on two accumulators, one in flight while the
    // other is promoted; with 32 and 64 slots.
    run<64, 2, 2, M::kPaired, false>(sms, out);
    run<32, 2, 2, M::kPaired, false>(sms, out);
    // gemm_fp8's consumers: as two m64n64 halves (main), as one m64n128 a k16 step.
    run<128, 2, 8, M::kHalves, false>(sms, out);
    run<128, 2, 8, M::kDrainPromote, false>(sms, out);
    // The same beside a warpgroup streaming 16-byte shared-memory loads and stores.
    run<64, 2, 8, M::kDrain, true>(sms, out);
    run<128, 2, 8, M::kDrain, true>(sms, out);
    run<64, 2, 2, M::kDrainPromote, true>(sms, out);
    run<128, 2, 8, M::kHalves, true>(sms, out);
    run<128, 2, 8, M::kDrainPromote, true>(sms, out);
    PROBE_CHECK(cudaFree(out));
    return 0;
}
