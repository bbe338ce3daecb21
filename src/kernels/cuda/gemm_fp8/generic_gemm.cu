// gemm_fp8's kGeneric path (see gemm_fp8.h): the FP8 linear for shapes the tensor-core and skinny kernels do not take
// (K % 16 != 0, from small models with odd widths). One thread per output (m, n): the e4m3 codes times their f32
// scales (exact), multiplied and added in K order without FMA contraction, as cpu::linear does on the FP8-rounded
// input, then bf16. A row's bits depend on nothing else in the launch. Tested in tests/gpu/gemm_fp8_test.cpp.
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/gemm_fp8/gemm_fp8_kernels.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 128;

// grid (ceil(n / kThreads), m).
__global__ void __launch_bounds__(kThreads) fp8_generic_kernel(const Fp8GemmParams p) {
    const int64_t n = int64_t(blockIdx.x) * kThreads + threadIdx.x, m = blockIdx.y;
    if (n >= p.n) return;
    const int64_t kb = (p.k + 127) / 128;
    const uint8_t* a = p.a + m * p.k;
    const uint8_t* w = p.w + n * p.k;
    const float* a_scale = p.a_scale + m * kb;
    const float* w_scale = p.w_scale + (n / 128) * kb;
    float acc = 0.0f;
    for (int64_t k = 0; k < p.k; ++k) {
        const float x = e4m3_to_f32(a[k]) * a_scale[k / 128];
        const float v = e4m3_to_f32(w[k]) * w_scale[k / 128];
        acc = __fadd_rn(acc, __fmul_rn(x, v));
    }
    p.y[m * p.n + n] = f32_to_bf16(acc);
}

}  // namespace

cudaError_t launch_fp8_generic(const Fp8GemmParams& p, cudaStream_t stream) {
    fp8_generic_kernel<<<dim3(unsigned((p.n + kThreads - 1) / kThreads), unsigned(p.m)), kThreads, 0, stream>>>(p);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
