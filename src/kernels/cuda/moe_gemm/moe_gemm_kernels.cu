// moe_gemm kernels (see moe_gemm.h). Both grids run the same per-expert work, expert_rows: per pass of up to kM
// slots, the skinny tile (gemm_fp8/skinny_gemm.cuh) over every K range of k_span columns, per-lane results
// accumulated in registers. A result depends on k_span only (the tile's per-output chain and tree do not depend
// on kM or on which block runs it), so the two grids and both decoders below give the same bits:
//   compact (moe_gemm)    a persistent 1-D grid sized to the device. Every block lists the active experts (non-empty
//                         slot ranges) with a block scan of expert_offsets, then takes work items (j-th active
//                         expert, 32-row tile) strided by the grid: a decode step's 6 experts x 64 tiles occupy 384
//                         blocks instead of one block row per expert. A pass holding a single slot runs the 1-token
//                         tile (hash-routed layers at decode get kM = 8 from their host bound). E2M1 decodes through
//                         f16 pairs (Fp4Fast below). The grid depends on n, E and the device only: capturable.
//   strided (detail::)    the former kernel: grid (32-row tiles, expert_blocks), block y walking experts y,
//                         y + expert_blocks, ..., skinny's decoders; kept for the bitwise comparison.
// Tested in tests/gpu/moe_gemm_test.cpp (vs cpu::linear, and compact vs strided bitwise).

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/gemm_fp8/skinny_operands.cuh"
#include "kernels/cuda/moe_gemm/moe_gemm_kernels.h"

namespace dsv4::cuda {
namespace {

constexpr unsigned kFull = 0xFFFFFFFFu;

// Column i and column i + 4 of a word of eight e2m1 nibbles (nibble i = column i) as one f16 pair, exactly: the
// nibble s e1 e0 m placed at f16 bits 15 | 11 10 | 9 is (-1)^s 2^(e-15) (1 + m/2) for e > 0 and the subnormal
// (-1)^s m 2^-15 for e = 0, i.e. the e2m1 value times 2^-14; the f16 product by 2^14 is exact (f16 arithmetic
// keeps subnormals) and so is the f16 -> f32 conversion. About 2.5 instructions per value where
// skinny::e2m1_to_float takes ~10; the f32 values are identical (signed zeros included).
__device__ __forceinline__ float2 e2m1_pair(uint32_t w, int i) {
    const uint32_t t = w >> (4 * i);
    const uint32_t bits = ((t << 9) & 0x0E000E00u) | ((t << 12) & 0x80008000u);
    const __half2 h = __hmul2(*reinterpret_cast<const __half2*>(&bits), __half2half2(__ushort_as_half(0x7400u)));
    return __half22float2(h);
}

// Columns 4q .. 4q + 3 of a 16-byte chunk (q compile-time after unrolling; the pairs of q and q ^ 1 are shared).
__device__ __forceinline__ float4 e2m1x4(const uint4& raw, int q) {
    const uint32_t w = word(raw, q / 2);
    const float2 a = e2m1_pair(w, 0), b = e2m1_pair(w, 1), c = e2m1_pair(w, 2), d = e2m1_pair(w, 3);
    return q % 2 ? make_float4(a.y, b.y, c.y, d.y) : make_float4(a.x, b.x, c.x, d.x);
}

// skinny's MXFP4 / NVFP4 adapters with the f16-pair decode; value x scale (x global) in the same f32 operations.
struct Mxfp4Fast : skinny::Mxfp4Weight {
    __device__ float4 decode4(const uint4& raw, Scale s, int q) const {
        const float4 v = e2m1x4(raw, q);
        return make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
    }
};
struct Nvfp4Fast : skinny::Nvfp4Weight {
    __device__ float4 decode4(const uint4& raw, Scale s, int q) const {
        const float4 v = e2m1x4(raw, q);
        const float b = q < 4 ? s.x : s.y;
        return make_float4(v.x * b * global, v.y * b * global, v.z * b * global, v.w * b * global);
    }
};

// Rows [n_begin, n_begin + kRowsPerBlock) of expert e for all its slots. kNarrow: a pass holding one slot runs the
// 1-token tile (same bits, kM times fewer FMAs).
template <int kM, bool kNarrow, class Weight>
__device__ void expert_rows(const MoeGemmParams& p, const Weight& weight, int64_t e, int64_t n_begin, int64_t k_span,
                            float* smem) {
    const int64_t n_end = n_begin + skinny::kRowsPerBlock < p.n ? n_begin + skinny::kRowsPerBlock : p.n;
    const int64_t begin = p.expert_offsets[e], end = p.expert_offsets[e + 1];
    const int64_t kb = (p.k + 127) / 128;
    for (int64_t s0 = begin; s0 < end; s0 += kM) {
        const int tokens = end - s0 < kM ? int(end - s0) : kM;
        const skinny::Fp8Act act{p.a, p.a_scale, p.k, kb, p.row_index, s0};
        float own[2] = {0.f, 0.f};
        int64_t own_n[2] = {-1, -1};
        int own_m[2] = {0, 0};
        auto store = [&](int m, int64_t n, float v, int slot) {
            own[slot] += v;
            own_n[slot] = n;
            own_m[slot] = m;
        };
        for (int64_t k0 = 0; k0 < p.k; k0 += k_span) {
            const int64_t k1 = k0 + k_span < p.k ? k0 + k_span : p.k;
            if (kNarrow && kM > 1 && tokens == 1)
                skinny::tile<1>(weight, act, tokens, n_begin, n_end, k0, k1, smem, store);
            else
                skinny::tile<kM>(weight, act, tokens, n_begin, n_end, k0, k1, smem, store);
        }
#pragma unroll
        for (int slot = 0; slot < 2; ++slot)
            if (own_n[slot] >= 0) p.y[(s0 + own_m[slot]) * p.n + own_n[slot]] = __float2bfloat16_rn(own[slot]);
    }
}

// ------------------------------------------------------------------------------------------------- compact
// Blocks per SM the compact kernel is built for: registers capped so that several blocks share an SM (one block
// of 8 warps cannot hide the weight loads' latency).
// Measured spills (ptxas, sm_90a): none in the hot loop at kM = 1 with 80 registers, a few at kM = 8 with 128;
// kM = 16 keeps the whole register file (at 128 it spills hundreds of bytes).
template <int kM>
constexpr int compact_min_blocks() {
    return kM == 1 ? 3 : kM <= 8 ? 2 : 1;
}

// Shared memory: the active-expert list [experts] int32 (rounded up to 16 bytes), then the staged activations.
__host__ __device__ constexpr int64_t list_bytes(int64_t experts) {
    return (experts * 4 + 15) / 16 * 16;
}

// grid: persistent, 1-D. row_tiles = ceil(n / kRowsPerBlock).
template <int kM, ExpertFormat kFormat>
__global__ void __launch_bounds__(skinny::kThreads, compact_min_blocks<kM>())
    moe_gemm_compact_kernel(MoeGemmParams p, int64_t k_span, int64_t row_tiles) {
    extern __shared__ float4 smem_raw[];
    __shared__ int warp_counts[skinny::kWarps];
    int* active = reinterpret_cast<int*>(smem_raw);
    float* smem = reinterpret_cast<float*>(smem_raw) + list_bytes(p.experts) / 4;
    // At most offsets[E] experts are active: blocks past every possible item leave before the scan.
    const int64_t total = p.expert_offsets[p.experts];
    if (int64_t(blockIdx.x) >= (total < p.experts ? total : p.experts) * row_tiles) return;

    // 1. The active experts in ascending order: ballot per warp, warp counts through shared memory.
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int count = 0;
    for (int64_t base = 0; base < p.experts; base += skinny::kThreads) {
        const int64_t e = base + threadIdx.x;
        const bool live = e < p.experts && p.expert_offsets[e + 1] > p.expert_offsets[e];
        const unsigned ballot = __ballot_sync(kFull, live);
        if (lane == 0) warp_counts[warp] = __popc(ballot);
        __syncthreads();
        int before = count;
        for (int w = 0; w < skinny::kWarps; ++w) {
            if (w == warp) before = count;
            count += warp_counts[w];
        }
        if (live) active[before + __popc(ballot & ((1u << lane) - 1u))] = int(e);
        __syncthreads();
    }

    // 2. Work items (active expert, row tile), strided by the grid.
    const int64_t items = int64_t(count) * row_tiles;
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const int64_t e = active[item / row_tiles];
        const int64_t n_begin = (item % row_tiles) * skinny::kRowsPerBlock;
        if constexpr (kFormat == ExpertFormat::kMxfp4) {
            const Mxfp4Fast weight{{p.w + e * p.n * (p.k / 2), p.w_scale + e * p.n * (p.k / 32), p.k}};
            expert_rows<kM, true>(p, weight, e, n_begin, k_span, smem);
        } else {
            const Nvfp4Fast weight{{p.w + e * p.n * (p.k / 2), p.w_scale + e * p.n * (p.k / 16), p.w_global[e], p.k}};
            expert_rows<kM, true>(p, weight, e, n_begin, k_span, smem);
        }
    }
}

template <int kM, ExpertFormat kFormat>
cudaError_t launch_compact(const MoeGemmParams& p, const MoeGemmConfig& c, cudaStream_t stream) {
    auto kernel = moe_gemm_compact_kernel<kM, kFormat>;
    const int smem = int(list_bytes(p.experts) + kM * c.k_span * int64_t(sizeof(float)));
    if (cudaError_t e = skinny::allow_smem(kernel, smem); e != cudaSuccess) return e;
    const int64_t row_tiles = (p.n + skinny::kRowsPerBlock - 1) / skinny::kRowsPerBlock;
    const int64_t items = p.experts * row_tiles,
                  resident = resident_ctas(reinterpret_cast<const void*>(kernel), skinny::kThreads, smem);
    const int64_t grid = items < resident ? items : resident;
    kernel<<<unsigned(grid), skinny::kThreads, smem, stream>>>(p, c.k_span, row_tiles);
    return cudaGetLastError();
}

template <int kM>
cudaError_t launch_compact(const MoeGemmParams& p, const MoeGemmConfig& c, cudaStream_t stream) {
    return p.format == ExpertFormat::kMxfp4 ? launch_compact<kM, ExpertFormat::kMxfp4>(p, c, stream)
                                            : launch_compact<kM, ExpertFormat::kNvfp4>(p, c, stream);
}

// ------------------------------------------------------------------------------------------------- strided
// grid: (ceil(n / kRowsPerBlock), expert_blocks).
template <int kM>
__global__ void __launch_bounds__(skinny::kThreads) moe_gemm_kernel(MoeGemmParams p, int64_t k_span) {
    extern __shared__ float4 smem_raw[];
    float* smem = reinterpret_cast<float*>(smem_raw);
    const int64_t n_begin = int64_t(blockIdx.x) * skinny::kRowsPerBlock;
    for (int64_t e = blockIdx.y; e < p.experts; e += gridDim.y) {
        if (p.expert_offsets[e + 1] <= p.expert_offsets[e]) continue;  // uniform across the block
        if (p.format == ExpertFormat::kMxfp4) {
            const skinny::Mxfp4Weight weight{p.w + e * p.n * (p.k / 2), p.w_scale + e * p.n * (p.k / 32), p.k};
            expert_rows<kM, false>(p, weight, e, n_begin, k_span, smem);
        } else {
            const skinny::Nvfp4Weight weight{p.w + e * p.n * (p.k / 2), p.w_scale + e * p.n * (p.k / 16),
                                             p.w_global[e], p.k};
            expert_rows<kM, false>(p, weight, e, n_begin, k_span, smem);
        }
    }
}

template <int kM>
cudaError_t launch_strided(const MoeGemmParams& p, const MoeGemmConfig& c, cudaStream_t stream) {
    const int smem = int(kM * c.k_span * sizeof(float));
    if (cudaError_t e = skinny::allow_smem(moe_gemm_kernel<kM>, smem); e != cudaSuccess) return e;
    const dim3 grid(unsigned((p.n + skinny::kRowsPerBlock - 1) / skinny::kRowsPerBlock), unsigned(c.expert_blocks));
    moe_gemm_kernel<kM><<<grid, skinny::kThreads, smem, stream>>>(p, c.k_span);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_moe_gemm(const MoeGemmParams& p, const MoeGemmConfig& c, cudaStream_t stream) {
    switch (c.m_tile) {
        case 1: return launch_compact<1>(p, c, stream);
        case 2: return launch_compact<2>(p, c, stream);
        case 4: return launch_compact<4>(p, c, stream);
        case 8: return launch_compact<8>(p, c, stream);
        case 16: return launch_compact<16>(p, c, stream);
        default: return cudaErrorInvalidValue;
    }
}

namespace detail {
cudaError_t launch_moe_gemm_strided(const MoeGemmParams& p, const MoeGemmConfig& c, cudaStream_t stream) {
    switch (c.m_tile) {
        case 1: return launch_strided<1>(p, c, stream);
        case 2: return launch_strided<2>(p, c, stream);
        case 4: return launch_strided<4>(p, c, stream);
        case 8: return launch_strided<8>(p, c, stream);
        case 16: return launch_strided<16>(p, c, stream);
        default: return cudaErrorInvalidValue;
    }
}
}  // namespace detail

}  // namespace dsv4::cuda
