// The 128 x 128 warpgroup-MMA tile of the block-scaled linears (sm_90a, K % 128 == 0), for two activation formats:
//   e4m3     gemm_fp8 (wgmma_gemm.cu): e4m3 activations with a pow2 scale per 128 columns, f16 MMAs;
//            per 128-column block p = acc * (a_scale * w_scale), as gemm_fp8/mma_gemm.cu. Its kernel is
//            wgmma_linear_fp8.cuh's (warp-specialized); this header holds what the two share.
//   bf16     grouped_linear (wo_a): bf16 activations, W's column groups each reading their own K slice of x, bf16
//            MMAs; p = acc * w_scale, as bf16_act_mma/bf16_act_mma.cuh. Its kernel is bf16_kernel below.
// W is e4m3 with an f32 scale per 128 x 128 in both; sum = sum + p over ascending K blocks, y = bf16(sum). The
// k-slot order is the warp-MMA kernels' (both read a block as lane t's bytes [16t, 16t+16) and [64+16t, ..) of each
// e4m3 row, or columns 16t.. and 64+16t.. of each bf16 row; step j takes word j of W's 16 bytes and the matching
// activation columns, low pair as k 2t, 2t+1, high pair as k 2t+8, 2t+9), and f16/bf16 wgmma rounds a k16 step as
// mma.sync does, so the bits are the warp-MMA tiles' (docs/gpu-design.md, "Warpgroup MMA").
//
// bf16_kernel's roles: the activations are the A operand (64 rows per warpgroup, 16 per warp), from registers; W is
// the B operand, from shared memory as 16-bit k16 tiles (K-major core matrices) converted from the staged e4m3 bytes
// one block ahead, while the current block's wgmmas run. Raw activation and W blocks stream through cp.async stages.
// CTA: two warpgroups, 128 x 128 outputs, one per SM; each block's wgmmas run as one m64n128 a k16 step, the next
// block's W tile converted while they run. Tested bitwise against the warp-MMA tiles (gemm_fp8_test,
// grouped_linear_test).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/cp_async.cuh"
#include "kernels/cuda/common/e4m3_pairs.cuh"
#include "kernels/cuda/common/wgmma.cuh"

namespace dsv4::cuda::wgmma_linear {

constexpr int kThreads = 256, kBM = 128, kBN = 128, kBlockK = 128;
// The 16-bit W tile of one k16 step: 128 weight rows x 16 k as core matrices (row block n / 8, k half) at
// (n / 8) * 256 + half * 128, row n % 8 at 16 bytes each; step j at j * kStepBytes.
constexpr int kCoreK = 128, kCoreN = 256, kStepBytes = kBN * 32, kTileBytes = 8 * kStepBytes;
constexpr int kWRowBytes = 128;

struct Args {
    const void* x;         // [m, ldx]: e4m3 or bf16
    int64_t ldx;           // elements
    const float* x_scale;  // e4m3: [m, kb] f32
    const uint8_t* w;      // [n, k] e4m3
    const float* w_scale;  // [ceil(n / 128), kb] f32
    __nv_bfloat16* y;      // [m, ldy]
    int64_t ldy;
    int64_t m, n, k, group_n;  // group_n: columns per group of x slices (n: one group)
    int kb;
    bool pair_stores;  // y's rows even-length and 4-byte aligned: bf16 pairs stored as one word
};

template <bool kFp8Act>
struct Layout {
    static constexpr int kXRowBytes = kFp8Act ? 128 : 256;  // one K block of one activation row
    static constexpr int kXChunks = kXRowBytes / 16;
    static constexpr int kStages = kFp8Act ? 4 : 3;
    static constexpr int x = 0;
    static constexpr int w = x + kBM * kXRowBytes;
    static constexpr int x_scale = w + kBN * kWRowBytes;
    static constexpr int bytes = x_scale + (kFp8Act ? kBM * 4 : 0);
    static constexpr int smem = 2 * kTileBytes + kStages * bytes;
    static_assert(bytes % 16 == 0 && smem <= 227 * 1024);
};

// 16-byte chunk c of a staged row r, swizzled so that the fragment loads of one shared-memory phase (2 adjacent rows
// x 4 lanes) hit 8 distinct bank groups: e4m3 and W rows (8 chunks) flip chunk bit 2 on odd rows, bf16 rows (16
// chunks, a lane's chunks 2t, 2t + 1) flip bit 0.
__host__ __device__ constexpr int w_chunk_at(int r, int c) {
    return r * kWRowBytes + 16 * (c ^ ((r & 1) << 2));
}
template <bool kFp8Act>
__host__ __device__ constexpr int x_chunk_at(int r, int c) {
    return kFp8Act ? w_chunk_at(r, c) : r * 256 + 16 * (c ^ (r & 1));
}

// The specialized kernel's staged W rows: chunk c of row r at chunk c ^ (r % 8), so that its conversion's reads of one
// chunk from eight consecutive rows (a shared-memory phase) hit eight distinct bank groups.
__host__ __device__ constexpr int w_chunk_at8(int r, int c) {
    return r * kWRowBytes + 16 * (c ^ (r & 7));
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int q) {
    return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
}

// A K block's eight k16 steps (fragments a against the block's tile at desc), each one m64n128 wgmma over the tile's
// 128 columns, into acc from zero, one commit group. (As two m64n64 halves in two groups, half 0 promoted while half 1
// ran, the bf16 tile ran 6 % slower: docs/perf.md, "What the f16 warpgroup MMA reaches by shape".)
template <bool kBf16>
__device__ __forceinline__ void issue_block(float (&acc)[64], const uint32_t (&a)[8][4], uint64_t desc) {
    wgmma_fence_operand(acc);
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        if constexpr (kBf16)
            wgmma_m64n128k16_bf16(acc, a[j], desc + ((j * kStepBytes) >> 4), j > 0);
        else
            wgmma_m64n128k16_f16(acc, a[j], desc + ((j * kStepBytes) >> 4), j > 0);
    }
    wgmma_commit();
}

// Whether promote_block<true> gives promote_block's bits with this scale: a power of two in [2^-100, 2^100]. With e4m3
// operands every non-zero block sum |acc| lies in [2^-18, 2^25] (products of e4m3 values are multiples of 2^-18; 128 of
// them at most 448^2 each), so acc * scale is then a normal float, exact, and rounding it before the add changes
// nothing. FP8 activations' UE8M0 scales times E8M0 weight scales (every V4 checkpoint) are powers of two.
__device__ __forceinline__ bool scale_exact(float scale) {
    const uint32_t bits = __float_as_uint(scale);
    return (bits & 0x7FFFFFu) == 0 && (bits >> 23) - 27u <= 200u;  // sign 0, exponent field 27 .. 227
}

// sum += acc * scale for the block (n8 tile j: rows g with scale_g, g + 8 with scale_g8), after the wgmmas that wrote
// acc were waited for: the warp-MMA tiles' promotion, product and sum each rounded. kFused: one FFMA an output,
// fma(acc, scale, sum), for e4m3 block sums whose scales pass scale_exact (the caller checks them for the whole warp):
// it rounds once where the product and add round an exact product and then the sum, the same bits.
template <bool kFused = false>
__device__ __forceinline__ void promote_block(float (&sum)[64], float (&acc)[64], float scale_g, float scale_g8) {
    auto promote = [](float s, float a, float scale) {
        return kFused ? __fmaf_rn(a, scale, s) : __fadd_rn(s, __fmul_rn(a, scale));
    };
    wgmma_fence_operand(acc);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        sum[4 * j] = promote(sum[4 * j], acc[4 * j], scale_g);
        sum[4 * j + 1] = promote(sum[4 * j + 1], acc[4 * j + 1], scale_g);
        sum[4 * j + 2] = promote(sum[4 * j + 2], acc[4 * j + 2], scale_g8);
        sum[4 * j + 3] = promote(sum[4 * j + 3], acc[4 * j + 3], scale_g8);
    }
}

// The thread's outputs as bf16: CTA rows row_g and row_g + 8 x columns 8 j + 2 t, + 1 (rows past M, columns past N
// skipped).
__device__ __forceinline__ void store_outputs(const Args& p, const float (&sum)[64], int64_t m_cta, int64_t n_cta,
                                              int row_g, int t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int64_t r = m_cta + row_g + 8 * h;
        if (r >= p.m) continue;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const int64_t n = n_cta + 8 * j + 2 * t;
            __nv_bfloat16* out = p.y + r * p.ldy + n;
            const __nv_bfloat16 lo = __float2bfloat16_rn(sum[4 * j + 2 * h]);
            const __nv_bfloat16 hi = __float2bfloat16_rn(sum[4 * j + 2 * h + 1]);
            if (p.pair_stores && n + 1 < p.n) {
                *reinterpret_cast<__nv_bfloat162*>(out) = __halves2bfloat162(lo, hi);
            } else {
                if (n < p.n) out[0] = lo;
                if (n + 1 < p.n) out[1] = hi;
            }
        }
    }
}

template <int kStages>  // Layout<false>'s (a template, so that each translation unit may instantiate it)
__global__ void __launch_bounds__(kThreads, 1) bf16_kernel(Args p) {
#if DSV4_WGMMA
    using L = Layout<false>;
    static_assert(kStages == L::kStages);
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t* tiles = smem;
    uint8_t* stages = smem + 2 * kTileBytes;
    const unsigned stages_addr = smem_addr(stages);
    const uint64_t desc0 = wgmma_desc(smem_addr(tiles), kCoreK, kCoreN);

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int64_t m_cta = int64_t(blockIdx.x) * kBM, n_cta = int64_t(blockIdx.y) * kBN;
    const int row_g = 16 * warp + g;  // the thread's activation rows in the CTA: row_g and row_g + 8
    // The CTA's columns lie in one group (group_n % 128 == 0): its slice of x starts at group * k.
    const int64_t x_col0 = (n_cta / p.group_n) * p.k;
    constexpr int kXBytes = 2;

    // Loader roles: thread tid copies chunks tid % kXChunks of activation rows tid / kXChunks + (256 / kXChunks) i
    // and chunk tid % 8 of W rows tid / 8 + 32 i (rows past M or N repeat the last one and are never stored).
    constexpr int kXLoads = kBM * L::kXChunks / kThreads, kXRowsPerPass = kThreads / L::kXChunks;
    const int x_chunk = tid % L::kXChunks, w_chunk = tid % 8;
    const uint8_t* x_src[kXLoads];
    const uint8_t* w_src[4];
#pragma unroll
    for (int i = 0; i < kXLoads; ++i) {
        const int64_t r = m_cta + tid / L::kXChunks + kXRowsPerPass * i;
        x_src[i] =
            static_cast<const uint8_t*>(p.x) + ((r < p.m ? r : p.m - 1) * p.ldx + x_col0) * kXBytes + 16 * x_chunk;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int64_t n = n_cta + tid / 8 + 32 * i;
        w_src[i] = p.w + (n < p.n ? n : p.n - 1) * p.k + 16 * w_chunk;
    }
    const float* ws_row = p.w_scale + (n_cta / kBlockK) * p.kb;

    auto load = [&](int slot, int kb) {
        const unsigned base = stages_addr + slot * L::bytes;
        const int64_t offset = int64_t(kb) * kBlockK;
#pragma unroll
        for (int i = 0; i < kXLoads; ++i)
            cp_async16(base + L::x + x_chunk_at<false>(tid / L::kXChunks + kXRowsPerPass * i, x_chunk),
                       x_src[i] + offset * kXBytes);
#pragma unroll
        for (int i = 0; i < 4; ++i) cp_async16(base + L::w + w_chunk_at(tid / 8 + 32 * i, w_chunk), w_src[i] + offset);
    };

    // W's block of a stage into a 16-bit tile: task (weight row n, lane quarter tq, half) converts the 4 words lane
    // tq of a quad holds of row n in that half, words j = 4 half + q; a warp's stores cover 8 rows x 4 quarters, 32
    // distinct words of each core matrix.
    constexpr int kTasks = kBN * 4 * 2 / kThreads;
    auto load_task = [&](const uint8_t* raw, int i) {
        const int task = tid + kThreads * i, tq = task % 4, n = task / 4 % kBN, half = task / (4 * kBN);
        return *reinterpret_cast<const uint4*>(raw + L::w + w_chunk_at(n, 4 * half + tq));
    };
    auto store_task = [&](uint8_t* tile, int i, const uint4& v) {
        const int task = tid + kThreads * i, tq = task % 4, n = task / 4 % kBN, half = task / (4 * kBN);
        uint8_t* at = tile + (n / 8) * kCoreN + (n % 8) * 16 + 4 * tq;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            uint32_t lo, hi;
            bf16x2_pairs(word_of(v, q), lo, hi);
            const int j = 4 * half + q;
            *reinterpret_cast<uint32_t*>(at + j * kStepBytes) = lo;
            *reinterpret_cast<uint32_t*>(at + j * kStepBytes + kCoreK) = hi;
        }
    };

    float sum[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) sum[i] = 0.0f;

#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < p.kb) load(s, s);
        cp_async_commit();
    }
    cp_async_wait<kStages - 2>();
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kTasks; ++i) store_task(tiles, i, load_task(stages, i));
    fence_proxy_async_shared();

    for (int kb = 0; kb < p.kb; ++kb) {
        // Blocks kb and kb + 1 landed (later ones may be in flight), tile kb is converted and published, every warp
        // is past block kb - 1: its stage slot and tile kb + 1 are free.
        cp_async_wait<kStages - 3>();
        __syncthreads();
        if (kb + kStages - 1 < p.kb) load((kb + kStages - 1) % kStages, kb + kStages - 1);
        cp_async_commit();

        const uint8_t* st = stages + (kb % kStages) * L::bytes;
        const uint8_t* next_raw = stages + ((kb + 1) % kStages) * L::bytes;
        uint8_t* next_tile = tiles + ((kb + 1) % 2) * kTileBytes;
        const bool convert_next = kb + 1 < p.kb;
        const uint64_t desc = desc0 + (((kb % 2) * kTileBytes) >> 4);

        // The activation fragments of the eight steps, rows g and g + 8.
        uint32_t a[8][4];
        const uint8_t* x_st = st + L::x;
        // bf16: in half h the lane holds columns 64 h + 16 t .. + 15 (chunks 8 h + 2 t, + 1) of each row; step
        // 4 h + j takes columns + 4 j, + 1 (a0 / a1) and + 2, + 3 (a2 / a3).
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const uint4 vg = *reinterpret_cast<const uint4*>(x_st + x_chunk_at<false>(row_g, 8 * h + 2 * t + c));
                const uint4 vg8 =
                    *reinterpret_cast<const uint4*>(x_st + x_chunk_at<false>(row_g + 8, 8 * h + 2 * t + c));
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int j = 4 * h + 2 * c + e;
                    a[j][0] = word_of(vg, 2 * e), a[j][2] = word_of(vg, 2 * e + 1);
                    a[j][1] = word_of(vg8, 2 * e), a[j][3] = word_of(vg8, 2 * e + 1);
                }
            }
        uint4 next[kTasks];
#pragma unroll
        for (int i = 0; i < kTasks; ++i)
            if (convert_next) next[i] = load_task(next_raw, i);

        float acc[64];
        issue_block<true>(acc, a, desc);
        // The next block's W tile while this block's wgmmas run.
#pragma unroll
        for (int i = 0; i < kTasks; ++i)
            if (convert_next) store_task(next_tile, i, next[i]);
        fence_proxy_async_shared();

        const float ws = __ldg(ws_row + kb);  // bf16 activations carry no scale
        wgmma_wait<0>();
        promote_block(sum, acc, ws, ws);
    }

    store_outputs(p, sum, m_cta, n_cta, row_g, t);
#else
    __trap();
#endif
}

// Runs `p` with bf16 activations (K % 128 == 0, group_n % 128 == 0 or group_n == n; the caller checks) on the current
// stream.
inline cudaError_t launch_bf16(Args p, cudaStream_t stream) {
    if (p.k % kBlockK) return cudaErrorInvalidValue;
    p.kb = int(p.k / kBlockK);
    constexpr int smem = Layout<false>::smem;
    const auto kernel = bf16_kernel<Layout<false>::kStages>;
    if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        e != cudaSuccess)
        return e;
    const dim3 grid(unsigned((p.m + kBM - 1) / kBM), unsigned((p.n + kBN - 1) / kBN));
    kernel<<<grid, kThreads, smem, stream>>>(p);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda::wgmma_linear
