// RoPE kernel: see rope.h. One CTA per token: the token's cos/sin table goes to shared memory once, then every
// (head, pair) of the token is rotated with the reference's f32 operations, unfused.
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/rope/rope.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxPairs = 512;

struct Ropes {
    ApplyRopeParams rope[kMaxRopes];
};

// grid (max tokens, tensors): CTA (t, j) rotates token t of tensor j; its code does not depend on j or on the
// other tensors of the launch.
__global__ void __launch_bounds__(kThreads) apply_rope_kernel(const Ropes ropes) {
    __shared__ float cos_s[kMaxPairs], sin_s[kMaxPairs];
    const ApplyRopeParams& p = ropes.rope[blockIdx.y];
    const int64_t t = blockIdx.x;
    if (t >= p.tokens) return;  // a tensor with fewer tokens than the launch (whole CTAs, before the barrier)
    const int half = int(p.rope_dim / 2);
    const float position = __int2float_rn(p.positions[t]);
    for (int i = threadIdx.x; i < half; i += kThreads) {
        const float angle = __fmul_rn(position, p.inv_freq[i]);
        double s, c;
        sincos(double(angle), &s, &c);
        cos_s[i] = float(c);
        sin_s[i] = p.inverse ? -float(s) : float(s);
    }
    __syncthreads();
    __nv_bfloat16* x = p.x + t * p.token_stride + (p.head_dim - p.rope_dim);
    for (int64_t k = threadIdx.x; k < p.heads * half; k += kThreads) {
        const int64_t h = k / half;
        const int i = int(k % half);
        __nv_bfloat162* pair = reinterpret_cast<__nv_bfloat162*>(x + h * p.head_dim + 2 * i);
        const __nv_bfloat162 v = *pair;
        const float a = bf16_to_f32(v.x), b = bf16_to_f32(v.y), c = cos_s[i], s = sin_s[i];
        __nv_bfloat162 out;
        out.x = f32_to_bf16(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
        out.y = f32_to_bf16(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
        *pair = out;
    }
}

// RopePath::kGeneric: one thread per (token, head, pair), bf16 elements loaded one by one, cos/sin evaluated per
// pair with apply_rope_kernel's operations. grid (blocks of the largest tensor, tensors).
__global__ void __launch_bounds__(kThreads) apply_rope_generic_kernel(const Ropes ropes) {
    const ApplyRopeParams& p = ropes.rope[blockIdx.y];
    const int64_t half = p.rope_dim / 2;
    const int64_t k = int64_t(blockIdx.x) * kThreads + threadIdx.x;
    if (k >= p.tokens * p.heads * half) return;
    const int64_t t = k / (p.heads * half), h = (k / half) % p.heads, i = k % half;
    const float angle = __fmul_rn(__int2float_rn(p.positions[t]), p.inv_freq[i]);
    double sd, cd;
    sincos(double(angle), &sd, &cd);
    const float c = float(cd), s = p.inverse ? -float(sd) : float(sd);
    __nv_bfloat16* pair = p.x + t * p.token_stride + h * p.head_dim + (p.head_dim - p.rope_dim) + 2 * i;
    const float a = bf16_to_f32(pair[0]), b = bf16_to_f32(pair[1]);
    pair[0] = f32_to_bf16(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
    pair[1] = f32_to_bf16(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
}

}  // namespace

namespace detail {
void launch_apply_ropes(std::span<const ApplyRopeParams> ropes, RopePath path, cudaStream_t stream) {
    static_assert(kMaxPairs * 2 >= 1024, "the paired path admits rope_dim up to 1024");
    Ropes batch{};
    int64_t tokens = 0, pairs = 0;
    for (size_t j = 0; j < ropes.size(); ++j) {
        const ApplyRopeParams& p = ropes[j];
        batch.rope[j] = p;
        tokens = tokens > p.tokens ? tokens : p.tokens;
        pairs = pairs > p.tokens * p.heads * (p.rope_dim / 2) ? pairs : p.tokens * p.heads * (p.rope_dim / 2);
    }
    const unsigned count = unsigned(ropes.size());
    if (path == RopePath::kPaired) {
        apply_rope_kernel<<<dim3(unsigned(tokens), count), kThreads, 0, stream>>>(batch);
    } else {
        apply_rope_generic_kernel<<<dim3(unsigned((pairs + kThreads - 1) / kThreads), count), kThreads, 0, stream>>>(
            batch);
    }
    DSV4_CUDA_CHECK(cudaGetLastError());
}
}  // namespace detail

}  // namespace dsv4::cuda
