// Sparse attention for any head_dim / rope_dim (SparseAttentionPath::kGeneric, see sparse_attention.h): the shapes
// the tensor-core kernels are not built for (small V4-architecture models: head_dim 32, 64, 256, odd nope parts,
// rope dims that are not multiples of 4). CUDA cores, one CTA per (token, head), cpu::sparse_attention_head's
// operations in its order: each logit is one thread's f32 dot over the dequantized entry in index order (no FMA
// contraction), M = max over the token's keys, P = exp(l - M) summed unrounded into the denominator by one thread in
// slot order, bf16(P) times the entry accumulated per output dim in slot order, then the sink and the division.
// Only expf may differ from glibc (an ulp, as in the tensor-core kernels). Logits are recomputed by identical code in
// the max pass and the sum pass, so l <= M bit for bit. Nothing depends on other tokens or the launch: batch and
// chunk invariant. Slower than the tensor-core kernels (every head re-reads the entries); they keep V4's shapes.
// Tested in tests/gpu/sparse_attention_test.cpp (GenericPath*) against cpu::sparse_attention_head.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/compressor/kv_entry_layout.h"
#include "kernels/cuda/sparse_attention/sparse_attention.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kTile = kThreads;  // slots per pass: one logit per thread
constexpr unsigned kFull = 0xFFFFFFFFu;

// Element i of a packed main entry, as the CPU reference holds it: e4m3 x UE8M0 scale (exact) or the bf16 rope value.
__device__ __forceinline__ float entry_value(const uint8_t* entry, const MainEntryLayout& l, int64_t i) {
    if (i < l.nope) return e4m3_to_f32(entry[i]) * e8m0_to_f32(entry[l.scale_offset() + i / kKvScaleBlock]);
    const uint16_t bits = *reinterpret_cast<const uint16_t*>(entry + l.rope_offset() + 2 * (i - l.nope));
    return __uint_as_float(uint32_t(bits) << 16);
}

// l = (q . k) * scale in index order, q [d] f32 in shared memory.
__device__ float logit(const float* q, const uint8_t* entry, const MainEntryLayout& l, int64_t d, float scale) {
    float dot = 0.0f;
    for (int64_t i = 0; i < d; ++i) dot = __fadd_rn(dot, __fmul_rn(q[i], entry_value(entry, l, i)));
    return __fmul_rn(dot, scale);
}

__device__ float block_max(float x, float* scratch) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(kFull, x, o));
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
    __syncthreads();
    float m = -INFINITY;
    for (int w = 0; w < kThreads / 32; ++w) m = fmaxf(m, scratch[w]);
    __syncthreads();
    return m;
}

// grid (tokens, heads). Dynamic shared memory: q [d] and the output accumulator [d], f32.
__global__ void __launch_bounds__(kThreads) sparse_attention_generic_kernel(const SparseAttentionParams p) {
    extern __shared__ float smem[];
    float* q = smem;
    float* acc = smem + p.head_dim;
    __shared__ float weight[kTile], unrounded[kTile];
    __shared__ int32_t rows[kTile];
    __shared__ float scratch[kThreads / 32];
    __shared__ float denominator;

    const int token = blockIdx.x, head = blockIdx.y;
    const int64_t d = p.head_dim;
    const MainEntryLayout layout = main_entry_layout(d, p.rope_dim);
    const int32_t* idx = p.indices + int64_t(token) * p.slots;
    const uint16_t* q_in = p.q + (int64_t(token) * p.heads + head) * d;
    for (int64_t i = threadIdx.x; i < d; i += kThreads) {
        q[i] = __uint_as_float(uint32_t(q_in[i]) << 16);
        acc[i] = 0.0f;
    }
    if (threadIdx.x == 0) denominator = 0.0f;
    __syncthreads();

    // 1. M over the token's keys.
    float m = -INFINITY;
    for (int s = threadIdx.x; s < p.slots; s += kThreads) {
        const int32_t row = idx[s];
        if (row >= 0) m = fmaxf(m, logit(q, p.kv + int64_t(row) * layout.bytes(), layout, d, p.scale));
    }
    const float max_logit = block_max(m, scratch);
    uint16_t* out = p.out + (int64_t(token) * p.heads + head) * d;
    if (max_logit == -INFINITY) {  // no key: zeros, as the CPU reference
        for (int64_t i = threadIdx.x; i < d; i += kThreads) out[i] = 0;
        return;
    }

    // 2. Tiles of slots in order: P per slot, then the denominator (thread 0, slot order) and P.V (one thread per
    //    output dim, slot order).
    for (int s0 = 0; s0 < p.slots; s0 += kTile) {
        const int s = s0 + int(threadIdx.x);
        const int32_t row = s < p.slots ? idx[s] : -1;
        float prob = 0.0f;
        if (row >= 0)
            prob = expf(__fsub_rn(logit(q, p.kv + int64_t(row) * layout.bytes(), layout, d, p.scale), max_logit));
        rows[threadIdx.x] = row;
        unrounded[threadIdx.x] = prob;
        weight[threadIdx.x] = round_bf16(prob);
        __syncthreads();
        const int n = min(kTile, p.slots - s0);
        if (threadIdx.x == 0) {
            float sum = denominator;
            for (int j = 0; j < n; ++j)
                if (rows[j] >= 0) sum = __fadd_rn(sum, unrounded[j]);
            denominator = sum;
        }
        for (int64_t i = threadIdx.x; i < d; i += kThreads) {
            float a = acc[i];
            for (int j = 0; j < n; ++j)
                if (rows[j] >= 0)
                    a = __fadd_rn(
                        a, __fmul_rn(weight[j], entry_value(p.kv + int64_t(rows[j]) * layout.bytes(), layout, i)));
            acc[i] = a;
        }
        __syncthreads();
    }

    // 3. The sink joins the denominator; o / denominator -> bf16.
    const float den = __fadd_rn(denominator, expf(__fsub_rn(p.sink[head], max_logit)));
    for (int64_t i = threadIdx.x; i < d; i += kThreads)
        out[i] = __bfloat16_as_ushort(f32_to_bf16(__fdiv_rn(acc[i], den)));
}

}  // namespace

namespace detail {

size_t sparse_attention_generic_smem_bytes(int32_t head_dim) {
    return 2 * size_t(head_dim) * sizeof(float);
}

void sparse_attention_generic_launch(const SparseAttentionParams& p, cudaStream_t stream) {
    const size_t bytes = sparse_attention_generic_smem_bytes(p.head_dim);
    if (bytes > (size_t(48) << 10))
        DSV4_CUDA_CHECK(cudaFuncSetAttribute(sparse_attention_generic_kernel,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    sparse_attention_generic_kernel<<<dim3(unsigned(p.tokens), unsigned(p.heads)), kThreads, bytes, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail
}  // namespace dsv4::cuda
