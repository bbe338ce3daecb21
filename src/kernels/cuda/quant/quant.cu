// Quantization kernels: see quant.h. One warp owns one quantization block (or one row for the Hadamard), so the
// block amax is a warp max (exact in any order) and every value is quantized with the same f32 operations as the
// CPU reference: amax floor, ratio = amax * f32(1/max), UE8M0 exponent from the bits, x / s, clamp, RNE encode.
#include "kernels/cuda/quant/quant.h"

#include <cmath>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/quant/fp8_act_codec.cuh"
#include "kernels/cuda/rope/rope_math.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kWarps = 8;  // warps per CTA for the warp-per-block kernels
constexpr int kThreads = kWarps * 32;
constexpr unsigned kFull = 0xFFFFFFFFu;
constexpr float kE2M1AmaxFloor = 6.0f * 0x1p-126f;  // official fp4_act_quant: 6 * 2^-126

dim3 warp_grid(int64_t warps) {
    return dim3(unsigned(ceil_div(warps, kWarps)));
}

// The biased UE8M0 exponent of an FP4 block whose |x| maximum is amax (before the floor).
__device__ __forceinline__ uint32_t fp4_scale_exponent(float amax) {
    return ue8m0_ceil_exponent(__fmul_rn(fmaxf(amax, kE2M1AmaxFloor), kE2M1MaxInv));
}
__device__ __forceinline__ float fp4_scaled(float x, float s) {
    return fminf(fmaxf(__fdiv_rn(x, s), -kE2M1Max), kE2M1Max);
}
__device__ __forceinline__ float fp4_value(float x, float s) {
    return round_e2m1(fp4_scaled(x, s));
}

// ---- (a) FP8 GEMM input: one warp per (row, 128-block), 4 values per lane.
__global__ void __launch_bounds__(kThreads) act_quant_fp8_kernel(ActQuantParams p) {
    static_assert(kActQuantBlock == 4 * 32, "a lane holds 4 values of a 128-block");
    const int64_t n_blocks = ceil_div(p.cols, kActQuantBlock);
    const int64_t warp = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
    if (warp >= p.rows * n_blocks) return;  // whole warps exit together
    const int lane = threadIdx.x % 32;
    const int64_t row = warp / n_blocks, blk = warp % n_blocks;
    const int64_t col0 = blk * kActQuantBlock + 4 * lane;
    const __nv_bfloat16* x = p.x + row * p.x_stride;

    float v[4];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        v[i] = col0 + i < p.cols ? bf16_to_f32(x[col0 + i]) : 0.0f;
        amax = fmaxf(amax, fabsf(v[i]));
    }
    const uint32_t e = fp8_scale_exponent(group_max<32>(amax));
    const float s = e8m0_to_f32(e);
    uint8_t* q = p.q + row * p.cols;
#pragma unroll
    for (int i = 0; i < 4; ++i)
        if (col0 + i < p.cols) q[col0 + i] = fp8_code(v[i], s);
    if (lane == 0) p.scales[row * n_blocks + blk] = s;
}

// ---- (b) KV nope FP8 round trip: one warp per (row, 64-block), 2 values per lane.
__global__ void __launch_bounds__(kThreads) kv_nope_fp8_kernel(KvNopeFp8Params p) {
    static_assert(kKvQuantBlock == 2 * 32, "a lane holds 2 values of a 64-block");
    const int64_t n_blocks = ceil_div(p.nope_dim, kKvQuantBlock);
    const int64_t warp = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
    if (warp >= p.rows * n_blocks) return;
    const int lane = threadIdx.x % 32;
    const int64_t row = warp / n_blocks, col0 = (warp % n_blocks) * kKvQuantBlock + 2 * lane;
    __nv_bfloat16* x = p.x + row * p.row_stride;
    float v[2];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        v[i] = col0 + i < p.nope_dim ? bf16_to_f32(x[col0 + i]) : 0.0f;
        amax = fmaxf(amax, fabsf(v[i]));
    }
    const float s = e8m0_to_f32(fp8_scale_exponent(group_max<32>(amax)));
#pragma unroll
    for (int i = 0; i < 2; ++i)  // q * s is exact in bf16 (q has 4 significant bits, s a power of two)
        if (col0 + i < p.nope_dim) x[col0 + i] = f32_to_bf16(__fmul_rn(e4m3_to_f32(fp8_code(v[i], s)), s));
}

// ---- (c) Hadamard + bf16 + FP4, one warp per row of kDim values; lane l holds x[l * kVals .. + kVals).
// Returns the FP4 scale exponent of the lane's 32-block and leaves the rotated bf16 values in v.
template <int kDim>
__device__ __forceinline__ uint32_t hadamard_bf16_fp4_exponent(float (&v)[kDim / 32], float scale) {
    constexpr int kVals = kDim / 32;
    static_assert(kDim == 32 || kDim == 64 || kDim == 128, "index_head_dim is 32, 64 or 128");
    const int lane = threadIdx.x % 32;
    // Butterflies x[j], x[j + h] <- x[j] + x[j + h], x[j] - x[j + h] (Sylvester order, as cpu::hadamard_transform):
    // inside the lane while h < kVals, across lanes (partner lane ^ h / kVals) after.
#pragma unroll
    for (int h = 1; h < kVals; h *= 2)
#pragma unroll
        for (int j = 0; j < kVals; ++j)
            if ((j & h) == 0) {
                const float a = v[j], b = v[j + h];
                v[j] = __fadd_rn(a, b);
                v[j + h] = __fsub_rn(a, b);
            }
#pragma unroll
    for (int m = 1; m < 32; m *= 2) {
        const bool upper = lane & m;
#pragma unroll
        for (int j = 0; j < kVals; ++j) {
            const float other = __shfl_xor_sync(kFull, v[j], m);
            v[j] = upper ? __fsub_rn(other, v[j]) : __fadd_rn(v[j], other);
        }
    }
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kVals; ++j) {
        v[j] = round_bf16(__fmul_rn(v[j], scale));
        amax = fmaxf(amax, fabsf(v[j]));
    }
    // A 32-block spans 32 / kVals consecutive lanes.
    return fp4_scale_exponent(group_max<32 / kVals>(amax));
}

// The pair (x[e], x[e + 1]) of a row (e - first even) rotated as apply_rope rotates it: back in f32, exact bf16.
__device__ __forceinline__ void rope_pair(const IndexerRotateParams& p, int64_t row, int64_t e, float& a, float& b) {
    const int64_t i = (e - (p.dim - p.rope_dim)) / 2;
    float c, s;
    rope_cos_sin(p.positions[row / p.rope_heads], p.rope_inv_freq[i], false, c, s);
    const __nv_bfloat162 out = rope_rotate(__floats2bfloat162_rn(a, b), c, s);
    a = bf16_to_f32(out.x);
    b = bf16_to_f32(out.y);
}

template <int kDim>
__global__ void __launch_bounds__(kThreads) indexer_rotate_fp4_kernel(IndexerRotateParams p, float scale) {
    constexpr int kVals = kDim / 32;
    const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
    if (row >= p.rows) return;
    const int lane = threadIdx.x % 32;
    __nv_bfloat16* x = p.x + row * p.row_stride + lane * kVals;
    float v[kVals];
#pragma unroll
    for (int j = 0; j < kVals; ++j) v[j] = bf16_to_f32(x[j]);
    if (p.rope_inv_freq) {
        const int64_t first = p.dim - p.rope_dim;  // even: a pair never starts on an odd element
        if constexpr (kVals == 1) {                // the pair spans lanes 2m, 2m + 1
            const float other = __shfl_xor_sync(kFull, v[0], 1);
            if (lane >= first) {
                float a = lane % 2 ? other : v[0], b = lane % 2 ? v[0] : other;
                rope_pair(p, row, lane - lane % 2, a, b);
                v[0] = lane % 2 ? b : a;
            }
        } else {
#pragma unroll
            for (int j = 0; j < kVals; j += 2)
                if (lane * kVals + j >= first) rope_pair(p, row, lane * kVals + j, v[j], v[j + 1]);
        }
    }
    const float s = e8m0_to_f32(hadamard_bf16_fp4_exponent<kDim>(v, scale));
#pragma unroll
    for (int j = 0; j < kVals; ++j) x[j] = f32_to_bf16(__fmul_rn(fp4_value(v[j], s), s));
}

template <int kDim>
__global__ void __launch_bounds__(kThreads) pack_indexer_keys_kernel(IndexerKeyPackParams p, float scale) {
    constexpr int kVals = kDim / 32;
    const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
    if (row >= p.rows) return;
    const int lane = threadIdx.x % 32;
    const __nv_bfloat16* x = p.x + row * p.x_stride + lane * kVals;
    float v[kVals];
#pragma unroll
    for (int j = 0; j < kVals; ++j) v[j] = bf16_to_f32(x[j]);
    const uint32_t e = hadamard_bf16_fp4_exponent<kDim>(v, scale);
    const float s = e8m0_to_f32(e);
    const int64_t slot = p.slots ? int64_t(p.slots[row]) : row;
    uint8_t* entry = p.cache + slot * indexer_key_bytes(kDim);
    // Codes: byte b holds elements 2b (low nibble) and 2b + 1. A lane with one value pairs with its neighbour.
    if constexpr (kVals == 1) {
        const float odd = __shfl_down_sync(kFull, v[0], 1);
        if (lane % 2 == 0) entry[lane / 2] = pack_e2m1(fp4_scaled(v[0], s), fp4_scaled(odd, s));
    } else {
#pragma unroll
        for (int j = 0; j < kVals; j += 2)
            entry[(lane * kVals + j) / 2] = pack_e2m1(fp4_scaled(v[j], s), fp4_scaled(v[j + 1], s));
    }
    if ((lane * kVals) % kFp4Block == 0) entry[kDim / 2 + lane * kVals / kFp4Block] = uint8_t(e);
}

// ---- (c') The same for any power-of-two dim (index_head_dim of a small model: 2 .. 16, 256, ...): one CTA per row,
// the row in shared memory, butterflies stage by stage with a barrier between stages (every element goes through
// the additions and subtractions of cpu::hadamard_transform, so the bits are the same), then x n^-0.5 -> bf16 and
// the FP4 round trip per 32-block, one warp per block (a row shorter than 32 is one partial block, as the CPU
// quantizes it). Slower than the warp-per-row kernels above, which keep 32, 64 and 128.
constexpr int kGenericThreads = 128;

// Rotates v [dim] in shared memory (all threads of the CTA), then rounds to bf16 in place.
__device__ void hadamard_bf16_generic(float* v, int64_t dim, float scale) {
    for (int64_t h = 1; h < dim; h *= 2) {
        for (int64_t k = threadIdx.x; k < dim / 2; k += kGenericThreads) {
            const int64_t i = (k / h) * 2 * h + k % h;
            const float a = v[i], b = v[i + h];
            v[i] = __fadd_rn(a, b);
            v[i + h] = __fsub_rn(a, b);
        }
        __syncthreads();
    }
    for (int64_t i = threadIdx.x; i < dim; i += kGenericThreads) v[i] = round_bf16(__fmul_rn(v[i], scale));
    __syncthreads();
}

// The FP4 scale exponent of block b of v (whole warp; every lane gets it).
__device__ uint32_t fp4_block_exponent_generic(const float* v, int64_t dim, int64_t b) {
    const int lane = threadIdx.x % 32;
    const int64_t i = b * kFp4Block + lane;
    return fp4_scale_exponent(group_max<32>(i < dim ? fabsf(v[i]) : 0.0f));
}

__global__ void __launch_bounds__(kGenericThreads)
    indexer_rotate_fp4_generic_kernel(IndexerRotateParams p, float scale) {
    extern __shared__ float row_values[];  // [dim]
    __nv_bfloat16* x = p.x + int64_t(blockIdx.x) * p.row_stride;
    for (int64_t i = threadIdx.x; i < p.dim; i += kGenericThreads) row_values[i] = bf16_to_f32(x[i]);
    __syncthreads();
    if (p.rope_inv_freq) {
        for (int64_t e = p.dim - p.rope_dim + 2 * threadIdx.x; e < p.dim; e += 2 * kGenericThreads)
            rope_pair(p, blockIdx.x, e, row_values[e], row_values[e + 1]);
        __syncthreads();
    }
    hadamard_bf16_generic(row_values, p.dim, scale);
    const int lane = threadIdx.x % 32;
    for (int64_t b = threadIdx.x / 32; b < ceil_div(p.dim, kFp4Block); b += kGenericThreads / 32) {
        const float s = e8m0_to_f32(fp4_block_exponent_generic(row_values, p.dim, b));
        const int64_t i = b * kFp4Block + lane;
        if (i < p.dim) x[i] = f32_to_bf16(__fmul_rn(fp4_value(row_values[i], s), s));
    }
}

__global__ void __launch_bounds__(kGenericThreads)
    pack_indexer_keys_generic_kernel(IndexerKeyPackParams p, float scale) {
    extern __shared__ float row_values[];  // [dim]
    const int64_t row = blockIdx.x;
    const __nv_bfloat16* x = p.x + row * p.x_stride;
    for (int64_t i = threadIdx.x; i < p.dim; i += kGenericThreads) row_values[i] = bf16_to_f32(x[i]);
    __syncthreads();
    hadamard_bf16_generic(row_values, p.dim, scale);
    const int64_t slot = p.slots ? int64_t(p.slots[row]) : row;
    uint8_t* entry = p.cache + slot * indexer_key_bytes(p.dim);
    const int lane = threadIdx.x % 32;
    for (int64_t b = threadIdx.x / 32; b < ceil_div(p.dim, kFp4Block); b += kGenericThreads / 32) {
        const uint32_t e = fp4_block_exponent_generic(row_values, p.dim, b);
        const float s = e8m0_to_f32(e);
        const int64_t i = b * kFp4Block + 2 * lane;  // dim is even: pairs are whole
        if (2 * lane < kFp4Block && i < p.dim)
            entry[i / 2] = pack_e2m1(fp4_scaled(row_values[i], s), fp4_scaled(row_values[i + 1], s));
        if (lane == 0) entry[p.dim / 2 + b] = uint8_t(e);
    }
}

// ---- (d) KV entries: one warp per row; nope in 64-blocks of 2 values per lane, rope copied, pad zeroed.
__global__ void __launch_bounds__(kThreads) pack_kv_entries_kernel(KvPackParams p, KvEntryLayout l) {
    const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
    if (row >= p.rows) return;
    const int lane = threadIdx.x % 32;
    const __nv_bfloat16* x = p.kv + row * p.kv_stride;
    const int64_t slot = p.slots ? int64_t(p.slots[row]) : row;
    if (slot < 0) return;  // a row that is not stored (e.g. not among the last W of its sequence)
    uint8_t* entry = p.cache + slot * l.bytes;
    // kHeldBlocks scale blocks (and the first 64 rope values) are loaded before any is stored: the stores could
    // alias x, so the compiler would not hoist the loads, and each block would cost a round trip.
    constexpr int kHeldBlocks = 8;
    __nv_bfloat16 rope_held[2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
        if (lane + 32 * i < l.rope) rope_held[i] = x[l.nope + lane + 32 * i];
    for (int64_t b0 = 0; b0 < l.n_scales; b0 += kHeldBlocks) {
        float v[kHeldBlocks][2];
#pragma unroll
        for (int j = 0; j < kHeldBlocks; ++j) {
            const int64_t col0 = (b0 + j) * kKvQuantBlock + 2 * lane;
#pragma unroll
            for (int i = 0; i < 2; ++i) v[j][i] = col0 + i < l.nope ? bf16_to_f32(x[col0 + i]) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < kHeldBlocks; ++j) {
            const int64_t b = b0 + j;
            if (b >= l.n_scales) break;
            const int64_t col0 = b * kKvQuantBlock + 2 * lane;
            float amax = 0.0f;
#pragma unroll
            for (int i = 0; i < 2; ++i) amax = fmaxf(amax, fabsf(v[j][i]));
            const uint32_t e = fp8_scale_exponent(group_max<32>(amax));
            const float s = e8m0_to_f32(e);
#pragma unroll
            for (int i = 0; i < 2; ++i)
                if (col0 + i < l.nope) entry[col0 + i] = fp8_code(v[j][i], s);
            if (lane == 0) entry[l.scale_offset + b] = uint8_t(e);
        }
    }
    if (lane == 0 && l.rope_offset > l.nope) entry[l.nope] = 0;  // the pad byte after an odd nope part
    __nv_bfloat16* rope = reinterpret_cast<__nv_bfloat16*>(entry + l.rope_offset);
#pragma unroll
    for (int i = 0; i < 2; ++i)
        if (lane + 32 * i < l.rope) rope[lane + 32 * i] = rope_held[i];
    for (int64_t i = lane + 64; i < l.rope; i += 32) rope[i] = x[l.nope + i];
    for (int64_t i = l.scale_offset + l.n_scales + lane; i < l.bytes; i += 32) entry[i] = 0;
}

__global__ void __launch_bounds__(kThreads) unpack_kv_entries_kernel(KvUnpackParams p, KvEntryLayout l) {
    const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
    if (row >= p.rows) return;
    const int lane = threadIdx.x % 32;
    const int64_t slot = p.slots ? int64_t(p.slots[row]) : row;
    const uint8_t* entry = p.cache + slot * l.bytes;
    __nv_bfloat16* x = p.kv + row * p.kv_stride;
    for (int64_t i = lane; i < l.nope; i += 32) {
        const float s = e8m0_to_f32(entry[l.scale_offset + i / kKvQuantBlock]);
        x[i] = f32_to_bf16(__fmul_rn(e4m3_to_f32(entry[i]), s));
    }
    const __nv_bfloat16* rope = reinterpret_cast<const __nv_bfloat16*>(entry + l.rope_offset);
    for (int64_t i = lane; i < l.rope; i += 32) x[l.nope + i] = rope[i];
}

}  // namespace

// The official Hadamard scale n^-0.5, rounded to f32 as cpu::hadamard_transform does.
static float hadamard_scale(int64_t dim) {
    return float(1.0 / std::sqrt(double(dim)));
}

namespace detail {

void launch_act_quant_fp8(const ActQuantParams& p, cudaStream_t stream) {
    const int64_t warps = p.rows * ceil_div(p.cols, kActQuantBlock);
    if (warps == 0) return;
    act_quant_fp8_kernel<<<warp_grid(warps), kThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

void launch_kv_nope_fp8_round_trip(const KvNopeFp8Params& p, cudaStream_t stream) {
    const int64_t warps = p.rows * ceil_div(p.nope_dim, kKvQuantBlock);
    if (warps == 0) return;
    kv_nope_fp8_kernel<<<warp_grid(warps), kThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

void launch_indexer_rotate_fp4(const IndexerRotateParams& p, cudaStream_t stream) {
    if (p.rows == 0) return;
    const float scale = hadamard_scale(p.dim);
    const dim3 grid = warp_grid(p.rows);
    switch (indexer_hadamard_path(p.dim)) {
        case IndexerHadamardPath::kWarp32:
            indexer_rotate_fp4_kernel<32><<<grid, kThreads, 0, stream>>>(p, scale);
            break;
        case IndexerHadamardPath::kWarp64:
            indexer_rotate_fp4_kernel<64><<<grid, kThreads, 0, stream>>>(p, scale);
            break;
        case IndexerHadamardPath::kWarp128:
            indexer_rotate_fp4_kernel<128><<<grid, kThreads, 0, stream>>>(p, scale);
            break;
        case IndexerHadamardPath::kGeneric:
            indexer_rotate_fp4_generic_kernel<<<unsigned(p.rows), kGenericThreads, size_t(p.dim) * sizeof(float),
                                                stream>>>(p, scale);
            break;
    }
    DSV4_CUDA_CHECK(cudaGetLastError());
}

void launch_pack_indexer_keys(const IndexerKeyPackParams& p, cudaStream_t stream) {
    if (p.rows == 0) return;
    const float scale = hadamard_scale(p.dim);
    const dim3 grid = warp_grid(p.rows);
    switch (indexer_hadamard_path(p.dim)) {
        case IndexerHadamardPath::kWarp32:
            pack_indexer_keys_kernel<32><<<grid, kThreads, 0, stream>>>(p, scale);
            break;
        case IndexerHadamardPath::kWarp64:
            pack_indexer_keys_kernel<64><<<grid, kThreads, 0, stream>>>(p, scale);
            break;
        case IndexerHadamardPath::kWarp128:
            pack_indexer_keys_kernel<128><<<grid, kThreads, 0, stream>>>(p, scale);
            break;
        case IndexerHadamardPath::kGeneric:
            pack_indexer_keys_generic_kernel<<<unsigned(p.rows), kGenericThreads, size_t(p.dim) * sizeof(float),
                                               stream>>>(p, scale);
            break;
    }
    DSV4_CUDA_CHECK(cudaGetLastError());
}

void launch_pack_kv_entries(const KvPackParams& p, cudaStream_t stream) {
    if (p.rows == 0) return;
    pack_kv_entries_kernel<<<warp_grid(p.rows), kThreads, 0, stream>>>(p, kv_entry_layout(p.head_dim, p.rope_dim));
    DSV4_CUDA_CHECK(cudaGetLastError());
}

void launch_unpack_kv_entries(const KvUnpackParams& p, cudaStream_t stream) {
    if (p.rows == 0) return;
    unpack_kv_entries_kernel<<<warp_grid(p.rows), kThreads, 0, stream>>>(p, kv_entry_layout(p.head_dim, p.rope_dim));
    DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail
}  // namespace dsv4::cuda
