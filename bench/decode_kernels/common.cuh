// What the decode kernels' benches share (bench/decode_kernels/*.cu): hashed fills of device buffers, a graph-replayed
// timer, bitwise comparisons and output hashes, and the tally of failed checks. Usage and scheme: main.cu.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/attention_inputs/attention_inputs.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/compressor/kv_entry_layout.h"
#include "kernels/cuda/dense_linear/dense_linear.h"
#include "kernels/cuda/mhc/mhc.h"
#include "kernels/cuda/moe_expert/moe_expert.h"
#include "kernels/cuda/moe_gemm/moe_gemm.h"
#include "kernels/cuda/moe_gemm/moe_gemm_kernels.h"
#include "kernels/cuda/quant/quant.h"
#include "kernels/cuda/rms_norm/rms_norm.h"
#include "kernels/cuda/rope/rope.h"
#include "kernels/cuda/sampling/sampling.h"
#include "kernels/cuda/smoke/device_info.h"
#include "kernels/cuda/sparse_attention/sparse_attention.h"

namespace dsv4::bench {

using namespace dsv4::cuda;

constexpr int kLaunches = 20, kReplays = 7;  // graph_us: launches a graph, replays timed
extern bool g_chosen_only;                   // --chosen-only
extern int failures;                         // bitwise checks that failed (verdict)

// The fills' counter-based hash of an element index.
__device__ __forceinline__ uint32_t index_hash(size_t i, uint32_t seed) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    return h ^ (h >> 13);
}

template <typename T>
void check_launch(T) {
    DSV4_CUDA_CHECK(cudaGetLastError());
}

// FNV-1a over the bytes of 16-bit device buffers, in order, after the device is idle: two builds' outputs compared.
template <typename T>
uint64_t device_bytes_hash(const DeviceBuffer<T>& b, uint64_t hash = 1469598103934665603ull) {
    static_assert(sizeof(T) == 2);
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint8_t> host(b.size() * 2);
    DSV4_CUDA_CHECK(cudaMemcpy(host.data(), b.get(), host.size(), cudaMemcpyDeviceToHost));
    for (uint8_t byte : host) hash = (hash ^ byte) * 1099511628211ull;
    return hash;
}

template <typename T>
bool same_bits(const DeviceBuffer<T>& a, const DeviceBuffer<T>& b) {
    std::vector<T> ha(a.size()), hb(b.size());
    a.download(ha.data(), ha.size());
    b.download(hb.data(), hb.size());
    return std::memcmp(ha.data(), hb.data(), ha.size() * sizeof(T)) == 0;
}

__global__ void fill_bytes(uint8_t* p, size_t n, uint32_t seed, uint8_t avoid_mask, uint8_t avoid);
// Scale codes lo .. lo + span - 1, hashed from the index (span <= 256), shifted left by `shift`: E8M0 codes as they
// are, or (shift 3) e4m3 powers of two from their exponent fields.
__global__ void fill_codes(uint8_t* p, size_t n, uint32_t seed, uint32_t lo, uint32_t span, int shift = 0);
// Normal-ish f32 values (sum of four uniforms) times `scale`.
__global__ void fill_f32(float* p, size_t n, uint32_t seed, float scale);
__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint32_t seed);
// Packed main cache entries (kv_entry_layout.h) with finite values: e4m3 codes that are not NaN, scales 2^-8..2^-1,
// rope values in [-4, 4).
__global__ void fill_entries(uint8_t* kv, size_t entries, int entry_bytes, int rope_offset, int scale_offset,
                             int scale_end, uint32_t seed);

uint64_t device_bytes_hash(const std::vector<const DeviceBuffer<__nv_bfloat16>*>& buffers);
// moe_combine's parameters over device buffers (routed rows [tokens k, dim], shared and out [tokens, dim]).
MoeCombineParams combine_params(const DeviceBuffer<__nv_bfloat16>& routed, const DeviceBuffer<int32_t>& experts,
                                const DeviceBuffer<int32_t>& slots, const DeviceBuffer<__nv_bfloat16>& shared,
                                DeviceBuffer<__nv_bfloat16>& out, int64_t tokens, int64_t dim, int64_t k);
// Median per-launch time in microseconds of `launch(i, stream)` for i = 0..kLaunches-1, captured as one graph.
double graph_us(const std::function<void(int, cudaStream_t)>& launch);
// "identical", or "DIFFER" (counted in `failures`).
const char* verdict(bool same);
// RoPE's inverse frequencies for `rope_dim` channels at base 10000 (rope_dim / 2 of them), uploaded: the attention
// benches' table.
DeviceBuffer<float> rope_inv_freq(int64_t rope_dim);

// V4-Flash's sparse attention for `tokens` tokens over `slots` cache entries each (64 heads of 512, rope 64): packed
// entries spread over 75 MB (> L2, as other layers' reads leave them), kSets index sets (launch i reads set i % kSets),
// q, the sinks and the plan's workspace. Shared by the attention and phase benches.
struct FlashAttentionInputs {
    static constexpr int32_t kHeads = 64, kDim = 512, kRope = 64, kSets = 8;
    FlashAttentionInputs(int32_t tokens, int32_t slots);
    // The launch's parameters: index set i % kSets, into `out` ([tokens, heads, dim] bf16).
    SparseAttentionParams params(int i, SparseAttentionCombine combine, uint16_t* out) const;
    int32_t tokens, slots;
    SparseAttentionPlan plan;
    DeviceBuffer<uint8_t> kv;
    DeviceBuffer<__nv_bfloat16> q;
    DeviceBuffer<int32_t> indices;
    DeviceBuffer<float> sink, workspace;
};

// V4-Flash's mHC pre-mix inputs (n_hc 4, dim 4096; hc_head's rows with `head`) for `tokens` tokens: kCopies mixer
// copies (64 x 1.5 MB > L2; launch i reads copy i % kCopies), base, scale and the streams. Shared by the hc and phase
// benches.
struct FlashMixer {
    static constexpr int64_t kN = 4, kDim = 4096, kWidth = kN * kDim;
    static constexpr int kCopies = 64;
    FlashMixer(int64_t tokens, bool head);
    // The launch's parameters: mixer copy i % kCopies, x and mix out.
    HcMixParams params(int i, __nv_bfloat16* x, float* mix) const;
    int64_t tokens, rows;
    DeviceBuffer<float> fn, base, scale;
    DeviceBuffer<__nv_bfloat16> streams;
};

// The benches (each prints its rows; see main.cu for what they compare).
void bench_hc(bool head, int64_t tokens);
void bench_hc_post(int64_t tokens);
void bench_moe(const char* name, int64_t n, int64_t k, int slot_bound);
void bench_moe_mma(int64_t tokens, bool variants = false, bool row_tiles = false, int64_t topk = 6,
                   bool single_slot = false, bool nvfp4 = false);
void bench_combine();
void bench_inputs(int64_t tokens, bool ring);
void bench_attention(int32_t tokens, int32_t slots, bool prefill = false);
void bench_dense(int64_t n);
void bench_draw(int64_t rows, const char* mode);
void bench_phases();  // phases_bench.cu

}  // namespace dsv4::bench
