// mHC kernels for any n_hc (the specialised kernels of mhc.cu are instantiated for 2 and 4: V4 and the fixtures).
// hc_mix_generic_kernel is hc_mix_kernel with n_hc a runtime value: the same kHcThreads strided fmaf chains per
// reduced value (rows are taken in groups of kRowGroup, each row's chain unchanged), the same 5 + 3 level tree, the
// mix in thread 0 with the CPU's operations in its order (Sinkhorn over an n x n matrix in shared memory), the
// same collapse. For n_hc 2 and 4 it gives the specialised kernels' bits (tests/gpu/mhc_test.cpp checks that, and
// every n against the CPU reference). hc_post_generic_kernel: hc_post_kernel with loops over a runtime n.
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/mhc/mhc.h"

namespace dsv4::cuda {
namespace {

constexpr unsigned kFull = 0xFFFFFFFFu;
constexpr int kWarps = kHcThreads / 32;
constexpr int kRowGroup = 8;  // reduced values accumulated per pass over the token's streams
constexpr int kPostThreads = 256;

__device__ __forceinline__ float sigmoid(float z) {
    return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-z)));
}

// cpu::sinkhorn on c [n * n], the operations of sinkhorn_lanes<kN> in mhc_sinkhorn.cu.
__device__ void sinkhorn(float* c, int n, int64_t iters, float eps) {
    for (int j = 0; j < n; ++j) {
        float* row = c + j * n;
        float row_max = row[0];
        for (int k = 1; k < n; ++k) row_max = fmaxf(row_max, row[k]);
        float sum = 0.0f;
        for (int k = 0; k < n; ++k) {
            row[k] = expf(__fsub_rn(row[k], row_max));
            sum = __fadd_rn(sum, row[k]);
        }
        for (int k = 0; k < n; ++k) row[k] = __fadd_rn(__fdiv_rn(row[k], sum), eps);
    }
    auto columns = [&] {
        for (int k = 0; k < n; ++k) {
            float sum = 0.0f;
            for (int j = 0; j < n; ++j) sum = __fadd_rn(sum, c[j * n + k]);
            for (int j = 0; j < n; ++j) c[j * n + k] = __fdiv_rn(c[j * n + k], __fadd_rn(sum, eps));
        }
    };
    columns();
    for (int64_t it = 1; it < iters; ++it) {
        for (int j = 0; j < n; ++j) {
            float sum = 0.0f;
            for (int k = 0; k < n; ++k) sum = __fadd_rn(sum, c[j * n + k]);
            for (int k = 0; k < n; ++k) c[j * n + k] = __fdiv_rn(c[j * n + k], __fadd_rn(sum, eps));
        }
        columns();
    }
}

// One CTA per token. Dynamic shared memory: partial [kWarps, rows + 1] then mix [rows] f32.
__global__ void __launch_bounds__(kHcThreads) hc_mix_generic_kernel(HcMixParams p, bool head) {
    extern __shared__ float smem[];
    const int n = int(p.n_hc), rows = head ? n : (2 + n) * n;
    float* partial = smem;                      // [kWarps][rows + 1]
    float* mix_s = smem + kWarps * (rows + 1);  // [rows]
    const int64_t t = blockIdx.x, width = int64_t(n) * p.dim;
    const __nv_bfloat16* v = p.streams + t * width;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

    // 1. Per-thread chains and the in-warp tree, kRowGroup reduced values at a time (value `rows`: sum of squares).
    for (int m0 = 0; m0 <= rows; m0 += kRowGroup) {
        float acc[kRowGroup];
#pragma unroll
        for (int r = 0; r < kRowGroup; ++r) acc[r] = 0.0f;
        for (int64_t i = threadIdx.x; i < width; i += kHcThreads) {
            const float x = bf16_to_f32(v[i]);
#pragma unroll
            for (int r = 0; r < kRowGroup; ++r) {
                const int m = m0 + r;
                if (m < rows) acc[r] = fmaf(p.fn[m * width + i], x, acc[r]);
                if (m == rows) acc[r] = fmaf(x, x, acc[r]);
            }
        }
#pragma unroll
        for (int r = 0; r < kRowGroup; ++r) {
#pragma unroll
            for (int o = 16; o > 0; o /= 2) acc[r] += __shfl_xor_sync(kFull, acc[r], o);
            if (lane == 0 && m0 + r <= rows) partial[warp * (rows + 1) + m0 + r] = acc[r];
        }
    }
    __syncthreads();
    // 2. The tree over the warps: 3 levels.
    for (int m = threadIdx.x; m <= rows; m += kHcThreads) {
        float s[kWarps];
#pragma unroll
        for (int w = 0; w < kWarps; ++w) s[w] = partial[w * (rows + 1) + m];
#pragma unroll
        for (int width_w = kWarps / 2; width_w > 0; width_w /= 2)
#pragma unroll
            for (int w = 0; w < width_w; ++w) s[w] += s[w + width_w];
        partial[m] = s[0];  // row 0 of partial: only thread m reads and writes column m
    }
    __syncthreads();

    // 3. The mix, in thread 0.
    if (threadIdx.x == 0) {
        const float mean_sq = __fdiv_rn(partial[rows], float(width));
        const float rho = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, p.norm_eps)));
        for (int m = 0; m < rows; ++m) {
            const float logit = __fmul_rn(partial[m], rho);
            if (p.logits) p.logits[t * rows + m] = logit;
            mix_s[m] = logit;
        }
        for (int j = 0; j < n; ++j)
            mix_s[j] = __fadd_rn(sigmoid(__fadd_rn(__fmul_rn(mix_s[j], p.scale[0]), p.base[j])), p.hc_eps);
        if (!head) {
            for (int j = 0; j < n; ++j)
                mix_s[n + j] = __fmul_rn(2.0f, sigmoid(__fadd_rn(__fmul_rn(mix_s[n + j], p.scale[1]), p.base[n + j])));
            for (int jk = 0; jk < n * n; ++jk)
                mix_s[2 * n + jk] = __fadd_rn(__fmul_rn(mix_s[2 * n + jk], p.scale[2]), p.base[2 * n + jk]);
            if (!p.defer_sinkhorn) sinkhorn(mix_s + 2 * n, n, p.sinkhorn_iters, p.hc_eps);
        }
        for (int m = 0; m < rows; ++m) p.mix[t * rows + m] = mix_s[m];
    }
    __syncthreads();

    // 4. Collapse with pre, streams in order, then bf16.
    for (int64_t d = threadIdx.x; d < p.dim; d += kHcThreads) {
        float out = 0.0f;
        for (int j = 0; j < n; ++j) out = __fadd_rn(out, __fmul_rn(mix_s[j], bf16_to_f32(v[j * p.dim + d])));
        p.x_out[t * p.dim + d] = f32_to_bf16(out);
    }
}

// hc_sinkhorn for any n_hc: a thread per token, on the token's comb in global memory.
__global__ void hc_sinkhorn_generic_kernel(float* mix, int64_t tokens, int n, int64_t iters, float eps) {
    const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t < tokens) sinkhorn(mix + t * (2 + n) * n + 2 * n, n, iters, eps);
}

__global__ void __launch_bounds__(kPostThreads) hc_post_generic_kernel(HcPostParams p) {
    const int n = int(p.n_hc), mix_size = (2 + n) * n;
    const int64_t t = blockIdx.y;
    const int64_t d = int64_t(blockIdx.x) * kPostThreads + threadIdx.x;
    if (d >= p.dim) return;
    const float* mix = p.mix + t * mix_size;
    const __nv_bfloat16* x = p.streams + t * n * p.dim;
    const float f = bf16_to_f32(p.f[t * p.dim + d]);
    for (int k = 0; k < n; ++k) {
        float residual = 0.0f;  // sum over the first index of C: C[j][k] X_j
        for (int j = 0; j < n; ++j)
            residual = __fadd_rn(residual, __fmul_rn(mix[2 * n + j * n + k], bf16_to_f32(x[j * p.dim + d])));
        p.out[(t * n + k) * p.dim + d] = f32_to_bf16(__fadd_rn(__fmul_rn(mix[n + k], f), residual));
    }
}

}  // namespace

namespace detail {

size_t hc_mix_generic_smem_bytes(int64_t n_hc, bool head) {
    const int64_t rows = head ? n_hc : hc_pre_mix_size(n_hc);
    return size_t(kWarps * (rows + 1) + rows) * sizeof(float);
}

void launch_hc_mix_generic(const HcMixParams& p, bool head, cudaStream_t stream) {
    const size_t bytes = hc_mix_generic_smem_bytes(p.n_hc, head);
    if (bytes > (size_t(48) << 10))
        DSV4_CUDA_CHECK(
            cudaFuncSetAttribute(hc_mix_generic_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    hc_mix_generic_kernel<<<unsigned(p.tokens), kHcThreads, bytes, stream>>>(p, head);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

void launch_hc_sinkhorn_generic(const HcMixParams& p, cudaStream_t stream) {
    constexpr int kThreads = 64;
    hc_sinkhorn_generic_kernel<<<unsigned((p.tokens + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        p.mix, p.tokens, int(p.n_hc), p.sinkhorn_iters, p.hc_eps);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

void launch_hc_post_generic(const HcPostParams& p, cudaStream_t stream) {
    const dim3 grid(unsigned((p.dim + kPostThreads - 1) / kPostThreads), unsigned(p.tokens));
    hc_post_generic_kernel<<<grid, kPostThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail
}  // namespace dsv4::cuda
