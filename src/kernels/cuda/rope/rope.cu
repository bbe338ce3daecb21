// RoPE kernel: see rope.h. One CTA per token and chunk of its (head, pair)s: the token's cos/sin table goes to shared
// memory, then every pair of the chunk is rotated with the reference's f32 operations, unfused.
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/rope/rope.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxPairs = 512;
constexpr int kPairsPerThread = 4;
constexpr int kChunk = kThreads * kPairsPerThread;  // pairs per CTA of the paired path

struct Ropes {
    ApplyRopeParams rope[kMaxRopes];
};

// grid (max tokens, pair chunks of the widest tensor, tensors): CTA (t, c, j) rotates pairs [c kChunk, (c + 1)
// kChunk) of token t of tensor j (pair k: head k / half, pair k % half); its code does not depend on j, on c beyond
// which pairs it takes, or on the other tensors of the launch. Each thread loads its pairs before the cos/sin table
// is built, so the loads' round trip overlaps the sincos.
__global__ void __launch_bounds__(kThreads) apply_rope_kernel(const Ropes ropes) {
    __shared__ float cos_s[kMaxPairs], sin_s[kMaxPairs];
    const ApplyRopeParams& p = ropes.rope[blockIdx.z];
    const int64_t t = blockIdx.x, first = int64_t(blockIdx.y) * kChunk;
    const int half = int(p.rope_dim / 2);
    if (t >= p.tokens || first >= p.heads * half) return;  // whole CTAs, before the barrier
    __nv_bfloat16* x = p.x + t * p.token_stride + (p.head_dim - p.rope_dim);
    __nv_bfloat162 held[kPairsPerThread];
#pragma unroll
    for (int j = 0; j < kPairsPerThread; ++j) {
        const int64_t k = first + threadIdx.x + j * kThreads;
        if (k < p.heads * half)
            held[j] = *reinterpret_cast<const __nv_bfloat162*>(x + (k / half) * p.head_dim + 2 * (k % half));
    }
    const float position = __int2float_rn(p.positions[t]);
    for (int i = threadIdx.x; i < half; i += kThreads) {
        const float angle = __fmul_rn(position, p.inv_freq[i]);
        double s, c;
        sincos(double(angle), &s, &c);
        cos_s[i] = float(c);
        sin_s[i] = p.inverse ? -float(s) : float(s);
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kPairsPerThread; ++j) {
        const int64_t k = first + threadIdx.x + j * kThreads;
        if (k >= p.heads * half) break;
        const int i = int(k % half);
        const float a = bf16_to_f32(held[j].x), b = bf16_to_f32(held[j].y), c = cos_s[i], s = sin_s[i];
        __nv_bfloat162 out;
        out.x = f32_to_bf16(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
        out.y = f32_to_bf16(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
        *reinterpret_cast<__nv_bfloat162*>(x + (k / half) * p.head_dim + 2 * i) = out;
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
        int64_t chunks = 1;
        for (const ApplyRopeParams& p : ropes) {
            const int64_t c = (p.heads * (p.rope_dim / 2) + kChunk - 1) / kChunk;
            chunks = chunks > c ? chunks : c;
        }
        apply_rope_kernel<<<dim3(unsigned(tokens), unsigned(chunks), count), kThreads, 0, stream>>>(batch);
    } else {
        apply_rope_generic_kernel<<<dim3(unsigned((pairs + kThreads - 1) / kThreads), count), kThreads, 0, stream>>>(
            batch);
    }
    DSV4_CUDA_CHECK(cudaGetLastError());
}
}  // namespace detail

}  // namespace dsv4::cuda
