// gemm_fp8's 128 x 128 warpgroup tile (e4m3 activations; wgmma_linear.cuh: the arithmetic and the shared pieces) on
// four warpgroups (warp specialization). On two warpgroups doing everything (bf16_kernel's scheme, which it ran until
// 2026-12-06) each warp's own chain of ~390 instructions a block (the fragments, 16 wgmmas and their wait, 128
// promotion operations, its share of W's conversion and of the copies) at two warps a scheduler was the bound, ~2.4x
// the block's tensor work (docs/perf.md, "The FP8 linears on three warpgroups"). Here two producer warpgroups (64 rows
// each) issue the copies and convert W into the 16-bit tile, and two consumer warpgroups (64 rows each) only build
// their fragments, run the wgmmas and promote; the producers give registers back (setmaxnreg) so that the consumers
// keep the accumulators (one producer measured slower than the consumers). They meet through counted mbarriers:
// full[s] (stage s's activations and scales landed, W's tile of that block converted: both producers' 256 threads),
// x_free[s] (both consumers have read stage s's activations and scales: 256), tile_free[t] (both consumers' wgmmas on
// tile t are done: 256). Each output's arithmetic is the two-warpgroup kernel's (the same fragments, k-slot order,
// wgmmas and promotions in ascending blocks): the same bits; tested bitwise against the warp-MMA tiles (gemm_fp8_test).
#pragma once

#include "kernels/cuda/common/cta_sync.cuh"
#include "kernels/cuda/common/wgmma_linear.cuh"

namespace dsv4::cuda::wgmma_linear {

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
        mbarrier_inits_visible();
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

        float acc[64];
        issue_block<false>(acc, a, desc0 + (((kb % kTiles) * kTileBytes) >> 4));
        const float ws = __ldg(ws_row + kb);
        const float scale_g = __fmul_rn(xs_g, ws), scale_g8 = __fmul_rn(xs_g8, ws);
        // One FFMA an output where that is the same bits (every thread's two scales pass scale_exact), else
        // promote_block's product and add.
        const bool fused = __all_sync(0xFFFFFFFFu, scale_exact(scale_g) && scale_exact(scale_g8));
        wgmma_wait<0>();
        mbarrier_arrive(tile_free + kb % kTiles);
        if (fused)
            promote_block<true>(sum, acc, scale_g, scale_g8);
        else
            promote_block(sum, acc, scale_g, scale_g8);
    }

    store_outputs(p, sum, m_cta, n_cta, row_g, t);
#else
    __trap();
#endif
}

// Runs `p` with e4m3 activations (K % 128 == 0, one group: group_n == n; the caller checks) on the current stream.
inline cudaError_t launch_fp8(Args p, cudaStream_t stream) {
    if (p.k % kBlockK) return cudaErrorInvalidValue;
    p.kb = int(p.k / kBlockK);
    constexpr int smem = SpecializedLayout::smem;
    const auto kernel = specialized_kernel<SpecializedLayout::kStages>;
    if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        e != cudaSuccess)
        return e;
    const dim3 grid(unsigned((p.m + kBM - 1) / kBM), unsigned((p.n + kBN - 1) / kBN));
    kernel<<<grid, kSpecializedThreads, smem, stream>>>(p);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda::wgmma_linear
