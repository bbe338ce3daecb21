// The 128 x 128 warpgroup-MMA tile of the block-scaled linears (sm_90a, K % 128 == 0), for two activation formats:
//   kFp8Act  gemm_fp8 (wgmma_gemm.cu): e4m3 activations with a pow2 scale per 128 columns, f16 MMAs;
//            per 128-column block p = acc * (a_scale * w_scale), as gemm_fp8/mma_gemm.cu.
//   kBf16Act grouped_linear (wo_a): bf16 activations, W's column groups each reading their own K slice of x, bf16
//            MMAs; p = acc * w_scale, as bf16_act_mma/bf16_act_mma.cuh.
// W is e4m3 with an f32 scale per 128 x 128 in both; sum = sum + p over ascending K blocks, y = bf16(sum). The
// k-slot order is the warp-MMA kernels' (both read a block as lane t's bytes [16t, 16t+16) and [64+16t, ..) of each
// e4m3 row, or columns 16t.. and 64+16t.. of each bf16 row; step j takes word j of W's 16 bytes and the matching
// activation columns, low pair as k 2t, 2t+1, high pair as k 2t+8, 2t+9), and f16/bf16 wgmma rounds a k16 step as
// mma.sync does, so the bits are the warp-MMA tiles' (docs/gpu-design.md, "Warpgroup MMA").
//
// Roles: the activations are the A operand (64 rows per warpgroup, 16 per warp), from registers; W is the B operand,
// from shared memory as 16-bit k16 tiles (K-major core matrices) converted from the staged e4m3 bytes one block
// ahead, while the current block's wgmmas run. Raw activation and W blocks stream through cp.async stages. CTA: two
// warpgroups, 128 x 128 outputs, one per SM; each block's wgmmas run as two 64-column halves so the first half is
// promoted while the second runs. Tested bitwise against the warp-MMA tiles (gemm_fp8_test, grouped_linear_test).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/cp_async.cuh"
#include "kernels/cuda/common/cta_sync.cuh"
#include "kernels/cuda/common/e4m3_pairs.cuh"
#include "kernels/cuda/common/wgmma.cuh"

namespace dsv4::cuda::wgmma_linear {

constexpr int kThreads = 256, kBM = 128, kBN = 128, kBlockK = 128;
// The 16-bit W tile of one k16 step: 128 weight rows x 16 k as core matrices (row block n / 8, k half) at
// (n / 8) * 256 + half * 128, row n % 8 at 16 bytes each; step j at j * kStepBytes.
constexpr int kCoreK = 128, kCoreN = 256, kStepBytes = kBN * 32, kTileBytes = 8 * kStepBytes;
constexpr int kWRowBytes = 128;

struct Args {
    const void* x;         // [m, ldx]: e4m3 (kFp8Act) or bf16
    int64_t ldx;           // elements
    const float* x_scale;  // kFp8Act: [m, kb] f32
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

template <bool kBf16>
__device__ __forceinline__ void wgmma_half(float (&d)[32], const uint32_t (&a)[4], uint64_t desc, bool accumulate) {
    if constexpr (kBf16)
        wgmma_m64n64k16_bf16(d, a, desc, accumulate);
    else
        wgmma_m64n64k16_f16(d, a, desc, accumulate);
}

template <bool kFp8Act>
__global__ void __launch_bounds__(kThreads, 1) kernel(Args p) {
#if DSV4_WGMMA
    using L = Layout<kFp8Act>;
    constexpr int kStages = L::kStages;
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
    constexpr int kXBytes = kFp8Act ? 1 : 2;

    // Loader roles: thread tid copies chunks tid % kXChunks of activation rows tid / kXChunks + (256 / kXChunks) i
    // and chunk tid % 8 of W rows tid / 8 + 32 i (rows past M or N repeat the last one and are never stored), and the
    // activation scale of row tid (kFp8Act, tid < 128).
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
    const int64_t scale_row = m_cta + tid < p.m ? m_cta + tid : p.m - 1;
    const float* xs_src = kFp8Act && tid < kBM ? p.x_scale + scale_row * p.kb : nullptr;
    const float* ws_row = p.w_scale + (n_cta / kBlockK) * p.kb;

    auto load = [&](int slot, int kb) {
        const unsigned base = stages_addr + slot * L::bytes;
        const int64_t offset = int64_t(kb) * kBlockK;
#pragma unroll
        for (int i = 0; i < kXLoads; ++i)
            cp_async16(base + L::x + x_chunk_at<kFp8Act>(tid / L::kXChunks + kXRowsPerPass * i, x_chunk),
                       x_src[i] + offset * kXBytes);
#pragma unroll
        for (int i = 0; i < 4; ++i) cp_async16(base + L::w + w_chunk_at(tid / 8 + 32 * i, w_chunk), w_src[i] + offset);
        if (xs_src) cp_async4(base + L::x_scale + tid * 4, xs_src + kb, 4);
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
            if constexpr (kFp8Act)
                f16x2_pairs(word_of(v, q), lo, hi);
            else
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
        if constexpr (kFp8Act) {
            // e4m3: the lane's chunks t and 4 + t of each row; step j takes word j, its pairs as f16.
            const uint4 g_lo = *reinterpret_cast<const uint4*>(x_st + x_chunk_at<true>(row_g, t));
            const uint4 g_hi = *reinterpret_cast<const uint4*>(x_st + x_chunk_at<true>(row_g, 4 + t));
            const uint4 g8_lo = *reinterpret_cast<const uint4*>(x_st + x_chunk_at<true>(row_g + 8, t));
            const uint4 g8_hi = *reinterpret_cast<const uint4*>(x_st + x_chunk_at<true>(row_g + 8, 4 + t));
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                f16x2_pairs(word_of(j < 4 ? g_lo : g_hi, j % 4), a[j][0], a[j][2]);
                f16x2_pairs(word_of(j < 4 ? g8_lo : g8_hi, j % 4), a[j][1], a[j][3]);
            }
        } else {
            // bf16: in half h the lane holds columns 64 h + 16 t .. + 15 (chunks 8 h + 2 t, + 1) of each row; step
            // 4 h + j takes columns + 4 j, + 1 (a0 / a1) and + 2, + 3 (a2 / a3).
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    const uint4 vg =
                        *reinterpret_cast<const uint4*>(x_st + x_chunk_at<false>(row_g, 8 * h + 2 * t + c));
                    const uint4 vg8 =
                        *reinterpret_cast<const uint4*>(x_st + x_chunk_at<false>(row_g + 8, 8 * h + 2 * t + c));
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int j = 4 * h + 2 * c + e;
                        a[j][0] = word_of(vg, 2 * e), a[j][2] = word_of(vg, 2 * e + 1);
                        a[j][1] = word_of(vg8, 2 * e), a[j][3] = word_of(vg8, 2 * e + 1);
                    }
                }
        }
        uint4 next[kTasks];
#pragma unroll
        for (int i = 0; i < kTasks; ++i)
            if (convert_next) next[i] = load_task(next_raw, i);

        float acc[2][32];
        wgmma_fence_operand(acc[0]);
        wgmma_fence_operand(acc[1]);
        wgmma_fence();
#pragma unroll
        for (int half = 0; half < 2; ++half) {
#pragma unroll
            for (int j = 0; j < 8; ++j)
                wgmma_half<!kFp8Act>(acc[half], a[j], desc + ((j * kStepBytes + half * 8 * kCoreN) >> 4), j > 0);
            wgmma_commit();
        }
        // The next block's W tile while this block's wgmmas run.
#pragma unroll
        for (int i = 0; i < kTasks; ++i)
            if (convert_next) store_task(next_tile, i, next[i]);
        fence_proxy_async_shared();

        const float ws = __ldg(ws_row + kb);
        float scale_g = ws, scale_g8 = ws;
        if constexpr (kFp8Act) {
            const float* xs = reinterpret_cast<const float*>(st + L::x_scale);
            scale_g = __fmul_rn(xs[row_g], ws), scale_g8 = __fmul_rn(xs[row_g + 8], ws);
        }
        auto promote_half = [&](int half) {
            wgmma_fence_operand(acc[half]);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                float* s4 = sum + 4 * (8 * half + j);
                const float* a4 = acc[half] + 4 * j;
                s4[0] = __fadd_rn(s4[0], __fmul_rn(a4[0], scale_g));
                s4[1] = __fadd_rn(s4[1], __fmul_rn(a4[1], scale_g));
                s4[2] = __fadd_rn(s4[2], __fmul_rn(a4[2], scale_g8));
                s4[3] = __fadd_rn(s4[3], __fmul_rn(a4[3], scale_g8));
            }
        };
        wgmma_wait<1>();
        promote_half(0);
        wgmma_wait<0>();
        promote_half(1);
    }

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
#else
    __trap();
#endif
}

// kFp8Act's tile on four warpgroups (warp specialization). In the kernel above each warp's own chain of ~390
// instructions a block (the fragments, 16 wgmmas and their wait, 128 promotion operations, its share of W's
// conversion and of the copies) at two warps a scheduler is the bound, ~2.4x the block's tensor work. Here two
// producer warpgroups (64 rows each) issue the copies and convert W into the 16-bit tile, and two consumer warpgroups
// (64 rows each) only build their fragments, run the wgmmas and promote; the producers give registers back
// (setmaxnreg) so that the consumers keep the accumulators (one producer measured slower than the consumers). They
// meet through counted mbarriers: full[s] (stage s's activations and scales landed, W's tile of that block
// converted: both producers' 256 threads), x_free[s] (both consumers have read stage s's activations and scales: 256),
// tile_free[t] (both consumers' wgmmas on tile t are done: 256). Each output's arithmetic is the kernel above's (the
// same fragments, k-slot order, wgmmas and promotions in ascending blocks): the same bits.
struct SpecializedLayout {
    static constexpr int kStages = Layout<true>::kStages, kTiles = 2;
    static constexpr int stages = kTiles * kTileBytes;  // Layout<true>'s stage slots after the tiles
    static constexpr int barriers = stages + kStages * Layout<true>::bytes;
    static constexpr int smem = barriers + (2 * kStages + kTiles) * 8;  // full[S], x_free[S], tile_free[T]
    static_assert(smem <= 227 * 1024);
};
constexpr int kProducers = 2, kSpecializedThreads = (kProducers + 2) * 128;
// The launch's registers (65,536 / 512 = 128 a thread) redistributed: 256 x 64 + 256 x 192 = 512 x 128.
constexpr int kProducerRegisters = 64, kConsumerRegisters = 192;
static_assert(kProducers * 128 * kProducerRegisters + 256 * kConsumerRegisters <= 65536);

template <int kStages>  // SpecializedLayout's (a template, so that each translation unit may instantiate it)
__global__ void __launch_bounds__(kSpecializedThreads, 1) specialized_kernel(Args p) {
#if DSV4_WGMMA
    using L = Layout<true>;
    using S = SpecializedLayout;
    static_assert(kStages == S::kStages);
    constexpr int kTiles = S::kTiles;
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t* tiles = smem;
    uint8_t* stages = smem + S::stages;
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + S::barriers);
    uint64_t* x_free = full + kStages;
    uint64_t* tile_free = x_free + kStages;
    const int tid = threadIdx.x, wg = tid / 128, wt = tid % 128;
    const int64_t m_cta = int64_t(blockIdx.x) * kBM, n_cta = int64_t(blockIdx.y) * kBN;
    if (tid == 0) {
        for (int i = 0; i < kStages; ++i) mbarrier_init(full + i, kProducers * 128);
        for (int i = 0; i < kStages; ++i) mbarrier_init(x_free + i, 256);
        for (int i = 0; i < kTiles; ++i) mbarrier_init(tile_free + i, 256);
    }
    __syncthreads();

    if (wg < kProducers) {
        // Producer wg: thread wt copies chunk wt % 8 of activation and W rows 64 wg + wt / 8 + 16 i (rows past M or N
        // repeat the last one and are never stored) and the activation scale of row 64 wg + wt (wt < 64), and converts
        // W row 64 wg + wt % 64's step group wt / 64.
        warpgroup_registers_decrease<kProducerRegisters>();
        const int chunk = wt % 8, r0 = 64 * wg + wt / 8, own = 64 * wg;  // this producer's rows: own .. own + 63
        const uint8_t* x_chunk = static_cast<const uint8_t*>(p.x) + 16 * chunk;
        const uint8_t* w_chunk = p.w + 16 * chunk;
        // Rows r0 + 16 i: one pointer stepped by 16 rows where the tile lies inside M (N), else each row clamped.
        const bool x_inside = m_cta + kBM <= p.m, w_inside = n_cta + kBN <= p.n;
        const int64_t x_step = 16 * p.ldx, w_step = 16 * p.k;
        const uint8_t* x_row0 = x_chunk + (m_cta + r0 < p.m ? m_cta + r0 : p.m - 1) * p.ldx;
        const uint8_t* w_row0 = w_chunk + (n_cta + r0 < p.n ? n_cta + r0 : p.n - 1) * p.k;
        const int64_t scale_row = m_cta + own + wt % 64 < p.m ? m_cta + own + wt % 64 : p.m - 1;
        const float* xs_src = p.x_scale + scale_row * p.kb;
        const unsigned stages_addr = smem_addr(stages);
        const bool inside = x_inside && w_inside;  // CTA-uniform: the tile's rows need no clamping
        auto load = [&](int kb) {
            const unsigned base = stages_addr + (kb % kStages) * L::bytes;
            const int64_t offset = int64_t(kb) * kBlockK;
            if (inside) {
                const uint8_t* xp = x_row0 + offset;
                const uint8_t* wp = w_row0 + offset;
#pragma unroll 4
                for (int i = 0; i < 4; ++i) {
                    const int r = r0 + 16 * i;
                    cp_async16(base + L::x + x_chunk_at<true>(r, chunk), xp);
                    cp_async16(base + L::w + w_chunk_at8(r, chunk), wp);
                    xp += x_step;
                    wp += w_step;
                }
            } else {
#pragma unroll 2
                for (int i = 0; i < 4; ++i) {
                    const int r = r0 + 16 * i;
                    const int64_t xr = m_cta + r < p.m ? m_cta + r : p.m - 1;
                    const int64_t wn = n_cta + r < p.n ? n_cta + r : p.n - 1;
                    cp_async16(base + L::x + x_chunk_at<true>(r, chunk), x_chunk + xr * p.ldx + offset);
                    cp_async16(base + L::w + w_chunk_at8(r, chunk), w_chunk + wn * p.k + offset);
                }
            }
            if (wt < 64) cp_async4(base + L::x_scale + (own + wt) * 4, xs_src + kb, 4);
        };
        for (int kb = 0; kb < kStages - 1; ++kb) {
            if (kb < p.kb) load(kb);
            cp_async_commit();
        }
        for (int kb = 0; kb < p.kb; ++kb) {
            // Block kb + S - 1 into the slot of block kb - 1, once both consumers have read its activations.
            if (kb + kStages - 1 < p.kb) {
                if (kb >= 1) mbarrier_wait(x_free + (kb - 1) % kStages, uint32_t((kb - 1) / kStages) & 1u);
                load(kb + kStages - 1);
            }
            cp_async_commit();
            // Block kb landed (the group of block b is the b-th committed) and every producer thread's copies of it
            // are visible to the others; tile kb % 2 is free once the consumers are done with block kb - 2.
            cp_async_wait<kStages - 1>();
            named_barrier_sync(1 + wg, 128);
            if (kb >= kTiles) mbarrier_wait(tile_free + kb % kTiles, uint32_t(kb / kTiles - 1) & 1u);
            const uint8_t* raw = stages + (kb % kStages) * L::bytes;
            uint8_t* tile = tiles + (kb % kTiles) * kTileBytes;
            // Task (W row n, step group h): its lanes' chunks 4 h .. 4 h + 3 hold steps 4 h .. 4 h + 3 (word q of
            // chunk 4 h + tq is lane tq's word of step 4 h + q), so the task owns whole 16-byte core-matrix rows:
            // for each step, the low pairs of the four lanes' words (k 0-7) and their high pairs (k 8-15).
            {
                const int n = own + wt % 64, h = wt / 64;
                uint4 v[4];
#pragma unroll
                for (int tq = 0; tq < 4; ++tq)
                    v[tq] = *reinterpret_cast<const uint4*>(raw + L::w + w_chunk_at8(n, 4 * h + tq));
                uint8_t* at = tile + (n / 8) * kCoreN + (n % 8) * 16;
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    uint32_t lo[4], hi[4];
#pragma unroll
                    for (int tq = 0; tq < 4; ++tq) f16x2_pairs(word_of(v[tq], q), lo[tq], hi[tq]);
                    const int j = 4 * h + q;
                    *reinterpret_cast<uint4*>(at + j * kStepBytes) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
                    *reinterpret_cast<uint4*>(at + j * kStepBytes + kCoreK) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
                }
            }
            fence_proxy_async_shared();
            mbarrier_arrive(full + kb % kStages);
        }
        return;
    }

    // A consumer: rows 64 (wg - kProducers) .. of the CTA.
    warpgroup_registers_increase<kConsumerRegisters>();
    const int warp = tid / 32 - 4 * kProducers, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int row_g = 16 * warp + g;  // the thread's activation rows in the CTA: row_g and row_g + 8
    const uint64_t desc0 = wgmma_desc(smem_addr(tiles), kCoreK, kCoreN);
    const float* ws_row = p.w_scale + (n_cta / kBlockK) * p.kb;
    float sum[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) sum[i] = 0.0f;
    for (int kb = 0; kb < p.kb; ++kb) {
        mbarrier_wait(full + kb % kStages, uint32_t(kb / kStages) & 1u);
        const uint8_t* st = stages + (kb % kStages) * L::bytes;
        uint32_t a[8][4];
        const uint8_t* x_st = st + L::x;
        const uint4 g_lo = *reinterpret_cast<const uint4*>(x_st + x_chunk_at<true>(row_g, t));
        const uint4 g_hi = *reinterpret_cast<const uint4*>(x_st + x_chunk_at<true>(row_g, 4 + t));
        const uint4 g8_lo = *reinterpret_cast<const uint4*>(x_st + x_chunk_at<true>(row_g + 8, t));
        const uint4 g8_hi = *reinterpret_cast<const uint4*>(x_st + x_chunk_at<true>(row_g + 8, 4 + t));
        const float* xs = reinterpret_cast<const float*>(st + L::x_scale);
        const float xs_g = xs[row_g], xs_g8 = xs[row_g + 8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            f16x2_pairs(word_of(j < 4 ? g_lo : g_hi, j % 4), a[j][0], a[j][2]);
            f16x2_pairs(word_of(j < 4 ? g8_lo : g8_hi, j % 4), a[j][1], a[j][3]);
        }
        mbarrier_arrive(x_free + kb % kStages);  // the stage's activations and scales are in registers

        float acc[2][32];
        wgmma_fence_operand(acc[0]);
        wgmma_fence_operand(acc[1]);
        wgmma_fence();
        const uint64_t desc = desc0 + (((kb % kTiles) * kTileBytes) >> 4);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
#pragma unroll
            for (int j = 0; j < 8; ++j)
                wgmma_half<false>(acc[half], a[j], desc + ((j * kStepBytes + half * 8 * kCoreN) >> 4), j > 0);
            wgmma_commit();
        }
        const float ws = __ldg(ws_row + kb);
        const float scale_g = __fmul_rn(xs_g, ws), scale_g8 = __fmul_rn(xs_g8, ws);
        auto promote_half = [&](int half) {
            wgmma_fence_operand(acc[half]);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                float* s4 = sum + 4 * (8 * half + j);
                const float* a4 = acc[half] + 4 * j;
                s4[0] = __fadd_rn(s4[0], __fmul_rn(a4[0], scale_g));
                s4[1] = __fadd_rn(s4[1], __fmul_rn(a4[1], scale_g));
                s4[2] = __fadd_rn(s4[2], __fmul_rn(a4[2], scale_g8));
                s4[3] = __fadd_rn(s4[3], __fmul_rn(a4[3], scale_g8));
            }
        };
        wgmma_wait<1>();
        promote_half(0);
        wgmma_wait<0>();
        mbarrier_arrive(tile_free + kb % kTiles);
        promote_half(1);
    }

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
#else
    __trap();
#endif
}

// Runs `p` (K % 128 == 0, group_n % 128 == 0 or group_n == n; the caller checks) on the current stream.
template <bool kFp8Act>
cudaError_t launch(Args p, cudaStream_t stream) {
    if (p.k % kBlockK) return cudaErrorInvalidValue;
    p.kb = int(p.k / kBlockK);
    // kFp8Act (gemm_fp8, whose x has one group: group_n == n) runs the warp-specialized kernel; the bf16 tile (wo_a's
    // groups) the one above.
    constexpr int smem = kFp8Act ? SpecializedLayout::smem : Layout<kFp8Act>::smem;
    const auto entry = kFp8Act ? specialized_kernel<SpecializedLayout::kStages> : kernel<kFp8Act>;
    if (cudaError_t e = cudaFuncSetAttribute(entry, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        e != cudaSuccess)
        return e;
    const dim3 grid(unsigned((p.m + kBM - 1) / kBM), unsigned((p.n + kBN - 1) / kBN));
    entry<<<grid, kFp8Act ? kSpecializedThreads : kThreads, smem, stream>>>(p);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda::wgmma_linear
