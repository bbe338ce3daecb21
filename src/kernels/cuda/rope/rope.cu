// RoPE kernel: see rope.h. One CTA per token and chunk of its (head, pair)s: the token's cos/sin table goes to shared
// memory, then every pair of the chunk is rotated with the reference's f32 operations, unfused.
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/rope/rope.h"
#include "kernels/cuda/rope/rope_math.cuh"

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
    const int32_t position = p.positions[t];
    for (int i = threadIdx.x; i < half; i += kThreads)
        rope_cos_sin(position, p.inv_freq[i], p.inverse, cos_s[i], sin_s[i]);
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kPairsPerThread; ++j) {
        const int64_t k = first + threadIdx.x + j * kThreads;
        if (k >= p.heads * half) break;
        const int i = int(k % half);
        *reinterpret_cast<__nv_bfloat162*>(x + (k / half) * p.head_dim + 2 * i) =
            rope_rotate(held[j], cos_s[i], sin_s[i]);
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
    float c, s;
    rope_cos_sin(p.positions[t], p.inv_freq[i], p.inverse, c, s);
    __nv_bfloat16* pair = p.x + t * p.token_stride + h * p.head_dim + (p.head_dim - p.rope_dim) + 2 * i;
    __nv_bfloat162 v;
    v.x = pair[0];
    v.y = pair[1];
    v = rope_rotate(v, c, s);
    pair[0] = v.x;
    pair[1] = v.y;
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
