// gemm_fp8's 128 x 128 tile on Hopper's warpgroup MMA (Fp8GemmPath::kMma, block_m 128: rows of prefill pieces and
// large batches, sm_90, K % 128 == 0). The arithmetic of mma_gemm.cu (its header), so the same bits: per 128-column
// K block, eight k16 products from zero on the tensor cores with the same e4m3 columns in the same k slots, times
// a_scale x w_scale (two f32 roundings), added to the output's f32 sum in ascending K blocks.
//
// Roles: A (the activations, 64 rows per warpgroup, 16 per warp) comes from registers in mma_gemm.cu's fragments
// (lane t holds bytes [16t, 16t+16) and [64+16t, 64+16t+16) of rows g and g + 8 of each K block; step j takes word
// j, its low pair as k 2t, 2t+1 and its high pair as k 2t+8, 2t+9); B (W, the CTA's 128 weight rows) comes from
// shared memory as f16 k16 tiles in which weight row n's slots hold the same words' pairs. The CTA stages raw e4m3
// A and W blocks with cp.async, converts W's block kt + 1 into the second of two f16 tiles while block
// kt's wgmmas run, and promotes after each block's wgmmas, the first 64 columns while the last 64's run. CTA: two
// warpgroups, 128 x 128 outputs, one per SM (64 accumulators and 64 sums per thread), 4 stages. Tested bitwise against
// the warp-MMA tiles in tests/gpu/gemm_fp8_test.cpp.
#include <cuda_bf16.h>

#include "kernels/cuda/common/cp_async.cuh"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/e4m3_pairs.cuh"
#include "kernels/cuda/common/wgmma.cuh"
#include "kernels/cuda/gemm_fp8/gemm_fp8_kernels.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256, kBM = 128, kBN = 128, kBlockK = 128, kStages = 4;
// Raw rows of 128 bytes, 16-byte chunk c of row r at position c ^ 4 (r % 2): the 16-byte loads of one shared-memory
// phase (2 adjacent rows x 4 lanes, chunks q or 4 + q) then hit 8 distinct bank groups.
constexpr int kRowBytes = 128;
[[maybe_unused]] __host__ __device__ constexpr int chunk_at(int r, int c) {
    return r * kRowBytes + 16 * (c ^ ((r & 1) << 2));
}
// The f16 W tile of one k16 step: 128 weight rows x 16 k as core matrices (row block n / 8, k half) at
// (n / 8) * 256 + half * 128, row n % 8 at 16 bytes each; step j at j * kStepBytes.
[[maybe_unused]] constexpr int kCoreK = 128, kCoreN = 256, kStepBytes = kBN * 32, kTileBytes = 8 * kStepBytes;

struct Stage {
    static constexpr int a = 0;
    static constexpr int w = a + kBM * kRowBytes;
    static constexpr int a_scale = w + kBN * kRowBytes;
    static constexpr int bytes = a_scale + kBM * 4;
};
constexpr int kSmemBytes = 2 * kTileBytes + kStages * Stage::bytes;

struct Args {
    const uint8_t* a;
    const float* a_scale;
    const uint8_t* w;
    const float* w_scale;
    __nv_bfloat16* y;
    int64_t m, n, k;
    int kb;
    bool pair_stores;
};

[[maybe_unused]] __device__ __forceinline__ uint32_t word_of(const uint4& v, int q) {
    return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
}

__global__ void __launch_bounds__(kThreads, 1) fp8_wgmma_kernel(Args p) {
#if DSV4_WGMMA
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t* tiles = smem;
    uint8_t* stages = smem + 2 * kTileBytes;
    const unsigned stages_addr = smem_addr(stages);
    const uint64_t desc0 = wgmma_desc(smem_addr(tiles), kCoreK, kCoreN);

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int64_t m_cta = int64_t(blockIdx.x) * kBM, n_cta = int64_t(blockIdx.y) * kBN;
    const int row_g = 16 * warp + g;  // the thread's A rows in the CTA: row_g and row_g + 8

    // Loader roles: thread tid copies 16-byte chunk tid % 8 of A rows tid / 8 + 32 i and of W rows tid / 8 + 32 i
    // (i = 0..3; rows past M or N repeat the last one and are never stored), and the A scale of row tid (tid < 128).
    const int chunk = tid % 8;
    const uint8_t* a_src[4];
    const uint8_t* w_src[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int64_t r = m_cta + tid / 8 + 32 * i, n = n_cta + tid / 8 + 32 * i;
        a_src[i] = p.a + (r < p.m ? r : p.m - 1) * p.k + 16 * chunk;
        w_src[i] = p.w + (n < p.n ? n : p.n - 1) * p.k + 16 * chunk;
    }
    const int64_t scale_row = m_cta + tid < p.m ? m_cta + tid : p.m - 1;
    const float* as_src = tid < kBM ? p.a_scale + scale_row * p.kb : nullptr;
    const float* ws_row = p.w_scale + (n_cta / kBlockK) * p.kb;

    auto load = [&](int slot, int kb) {
        const unsigned base = stages_addr + slot * Stage::bytes;
        const int64_t offset = int64_t(kb) * kBlockK;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = tid / 8 + 32 * i;
            cp_async16(base + Stage::a + chunk_at(row, chunk), a_src[i] + offset);
            cp_async16(base + Stage::w + chunk_at(row, chunk), w_src[i] + offset);
        }
        if (as_src) cp_async4(base + Stage::a_scale + tid * 4, as_src + kb, 4);
    };

    // W's block of a stage into an f16 tile: task (weight row n, lane quarter tq, 16-byte half) converts the 4 words
    // lane tq of a quad holds of row n in that half, words j = 4 half + q; a warp's stores cover 8 rows x 4 quarters,
    // 32 distinct words of each core matrix.
    constexpr int kTasks = kBN * 4 * 2 / kThreads;
    auto load_task = [&](const uint8_t* raw, int i) {
        const int task = tid + kThreads * i, tq = task % 4, n = task / 4 % kBN, half = task / (4 * kBN);
        return *reinterpret_cast<const uint4*>(raw + Stage::w + chunk_at(n, 4 * half + tq));
    };
    auto store_task = [&](uint8_t* tile, int i, const uint4& v) {
        const int task = tid + kThreads * i, tq = task % 4, n = task / 4 % kBN, half = task / (4 * kBN);
        uint8_t* at = tile + (n / 8) * kCoreN + (n % 8) * 16 + 4 * tq;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            uint32_t lo, hi;
            f16x2_pairs(word_of(v, q), lo, hi);
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
        // Blocks kb and kb + 1 landed (kb + 2 may be in flight), tile kb is converted and published, every warp is
        // past block kb - 1: its stage slot and tile kb + 1 are free.
        cp_async_wait<kStages - 3>();
        __syncthreads();
        if (kb + kStages - 1 < p.kb) load((kb + kStages - 1) % kStages, kb + kStages - 1);
        cp_async_commit();

        const uint8_t* st = stages + (kb % kStages) * Stage::bytes;
        const uint8_t* next_raw = stages + ((kb + 1) % kStages) * Stage::bytes;
        uint8_t* next_tile = tiles + ((kb + 1) % 2) * kTileBytes;
        const bool convert_next = kb + 1 < p.kb;
        const uint64_t desc = desc0 + (((kb % 2) * kTileBytes) >> 4);

        // A fragments of rows g and g + 8: the lane's two 16-byte chunks of each.
        const uint8_t* a_st = st + Stage::a;
        const uint4 g_lo = *reinterpret_cast<const uint4*>(a_st + chunk_at(row_g, t));
        const uint4 g_hi = *reinterpret_cast<const uint4*>(a_st + chunk_at(row_g, 4 + t));
        const uint4 g8_lo = *reinterpret_cast<const uint4*>(a_st + chunk_at(row_g + 8, t));
        const uint4 g8_hi = *reinterpret_cast<const uint4*>(a_st + chunk_at(row_g + 8, 4 + t));
        uint4 next[kTasks];
#pragma unroll
        for (int i = 0; i < kTasks; ++i)
            if (convert_next) next[i] = load_task(next_raw, i);

        // All eight steps' fragments first: one fence, then the wgmmas back to back.
        uint32_t a[8][4];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            f16x2_pairs(word_of(j < 4 ? g_lo : g_hi, j % 4), a[j][0], a[j][2]);
            f16x2_pairs(word_of(j < 4 ? g8_lo : g8_hi, j % 4), a[j][1], a[j][3]);
        }
        // Two column halves, each its own accumulator and commit group: the first half is promoted while the
        // second half's wgmmas run.
        float acc[2][32];
        wgmma_fence_operand(acc[0]);
        wgmma_fence_operand(acc[1]);
        wgmma_fence();
#pragma unroll
        for (int half = 0; half < 2; ++half) {
#pragma unroll
            for (int j = 0; j < 8; ++j)
                wgmma_m64n64k16_f16(acc[half], a[j], desc + ((j * kStepBytes + half * 8 * kCoreN) >> 4), j > 0);
            wgmma_commit();
        }
        // The next block's W tile while this block's wgmmas run.
#pragma unroll
        for (int i = 0; i < kTasks; ++i)
            if (convert_next) store_task(next_tile, i, next[i]);
        fence_proxy_async_shared();

        const float ws = __ldg(ws_row + kb);
        const float* as = reinterpret_cast<const float*>(st + Stage::a_scale);
        const float scale_g = __fmul_rn(as[row_g], ws), scale_g8 = __fmul_rn(as[row_g + 8], ws);
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
            __nv_bfloat16* out = p.y + r * p.n + n;
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

}  // namespace

cudaError_t launch_fp8_wgmma(const Fp8GemmParams& p, cudaStream_t stream) {
    if (p.k % kBlockK) return cudaErrorInvalidValue;
    Args args{p.a, p.a_scale, p.w, p.w_scale,          p.y,
              p.m, p.n,       p.k, int(p.k / kBlockK), p.n % 2 == 0 && reinterpret_cast<uintptr_t>(p.y) % 4 == 0};
    static_assert(kSmemBytes <= 227 * 1024);
    if (cudaError_t e = cudaFuncSetAttribute(fp8_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
        e != cudaSuccess)
        return e;
    const dim3 grid(unsigned((p.m + kBM - 1) / kBM), unsigned((p.n + kBN - 1) / kBN));
    fp8_wgmma_kernel<<<grid, kThreads, kSmemBytes, stream>>>(args);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
