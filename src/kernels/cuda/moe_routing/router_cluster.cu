// router_and_routing's cluster kernel (moe_routing.h, detail::router_cluster_fits): a decode step's router and routing
// in one cluster of CTAs, each CTA the router's product for 16 experts over the whole K, with no global round trip
// between the product and the routing. The split kernel (router_and_routing.cu) shares each tile's K blocks over four
// CTAs that stage their products in global memory, count their arrival at the tile (a fence and an atomic), and the
// tile's last CTA sums them and counts its own arrival at the routing: two dependent trips through the L2 and two
// fences before the routing starts. Here every CTA copies its 16 weight rows and the tokens' rows of x into shared
// memory at once (bulk copies of a quarter of K each, one mbarrier a quarter, so the warps start on the first
// quarter while the rest land), multiplies them with bf16_act_mma's per-block chain (the same MMA order, the same
// staging of each block's product and the same ascending sum: the same bits as bf16_linear), stores its logits and
// arrives at the cluster barrier, after which rank 0 routes with the one-CTA routing's code. Tested in
// tests/gpu/moe_routing_test.cpp against bf16_linear + moe_routing.
#include <cuda_bf16.h>

#include "kernels/cuda/common/bulk_copy.cuh"
#include "kernels/cuda/common/cta_sync.cuh"
#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/common/phase_clock.cuh"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/common/vector_loads.cuh"
#include "kernels/cuda/moe_routing/moe_routing.h"
#include "kernels/cuda/moe_routing/route_one_block.cuh"

namespace dsv4::cuda {
namespace {

using routing::kOneBlockThreads;
constexpr int kThreads = kOneBlockThreads;  // rank 0 routes with all its threads
constexpr int kWarps = kThreads / 32;
constexpr int kExpertsPerCta = 16;          // two 8-column MMA tiles
constexpr int kBlockK = 128;
constexpr int kQuarters = 4;                // copies (and mbarriers) a row: K in quarters
// A row's pitch in shared memory: K bf16 and 16 bytes more, so that the fragments' rows g (8 of them at one pitch)
// start on distinct 16-byte bank groups.
__host__ __device__ constexpr int64_t row_pitch_bytes(int64_t k) {
    return 2 * k + 16;
}

struct Layout {
    int64_t w, x, staged, bytes;
};
// Dynamic shared memory: the CTA's weight rows, the tokens' rows of x, each K block's product [kb][m][16] f32.
__host__ __device__ constexpr Layout layout(int64_t m, int64_t k) {
    const int64_t w = 0, x = kExpertsPerCta * row_pitch_bytes(k), staged = x + m * row_pitch_bytes(k);
    return {w, x, staged, staged + (k / kBlockK) * m * kExpertsPerCta * 4};
}

struct RouterClusterArgs {
    const __nv_bfloat16* x;  // [m, ldx]
    const __nv_bfloat16* w;  // [n, k]
    float* y;                // [m, ldy]: the routing's logits
    int64_t ldx, ldy, m, n, k;
    MoeRoutingParams routing;
};

__device__ __forceinline__ uint4 shared16(const uint8_t* p) {
    return *reinterpret_cast<const uint4*>(p);
}

// grid (cluster CTAs), one cluster: CTA r computes experts 16 r .. 16 r + 15 for the args.m <= kMaxRouterClusterTokens
// tokens, then rank 0 routes.
__global__ void __launch_bounds__(kThreads, 1) router_cluster_kernel(const RouterClusterArgs args) {
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ __align__(8) uint64_t landed[kQuarters];  // quarter q of every row has landed
    const MoeRoutingParams& p = args.routing;
    phase_mark(p.phase_clock, 0);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int64_t k = args.k, m = args.m, n0 = int64_t(blockIdx.x) * kExpertsPerCta;
    const Layout at = layout(m, k);
    const int64_t pitch = row_pitch_bytes(k), quarter = k / kQuarters;  // quarter: elements
    const int rows = kExpertsPerCta + int(m);                          // weight rows, then x rows

    // 1. Every row's quarters requested at once: thread q arms barrier q for its quarter of every row; then thread i
    // copies quarter i % 4 of row i / 4 (weight rows past N repeat the last: never stored).
    if (threadIdx.x < kQuarters) {
        mbarrier_init(&landed[threadIdx.x], 1);
        mbarrier_inits_visible();
        mbarrier_arm(&landed[threadIdx.x], int(rows * quarter * 2));
    }
    __syncthreads();
    for (int i = threadIdx.x; i < rows * kQuarters; i += kThreads) {
        const int row = i / kQuarters, q = i % kQuarters;
        const __nv_bfloat16* src;
        uint8_t* dst;
        if (row < kExpertsPerCta) {
            const int64_t n = n0 + row < args.n ? n0 + row : args.n - 1;
            src = args.w + n * k;
            dst = smem + at.w + row * pitch;
        } else {
            src = args.x + (row - kExpertsPerCta) * args.ldx;
            dst = smem + at.x + (row - kExpertsPerCta) * pitch;
        }
        bulk_copy_from_global(dst + q * quarter * 2, src + q * quarter, int(quarter * 2), &landed[q]);
    }

    // 2. Warp w multiplies blocks w, w + 8, ... (bf16_act_mma's 16-row top-half tile: rows 8-15 are padding, x rows
    // past M repeat the last), staging each block's product.
    const int x_row = g < m ? g : int(m) - 1;
    const uint8_t* const xs = smem + at.x + x_row * pitch + 32 * t;
    const uint8_t* ws[2];
    for (int nt = 0; nt < 2; ++nt) ws[nt] = smem + at.w + (nt * 8 + g) * pitch + 32 * t;
    float* const staged = reinterpret_cast<float*>(smem + at.staged);
    const int kb_count = int(k / kBlockK), blocks_per_quarter = int(quarter / kBlockK);
    uint32_t waited = 0;  // bit q: quarter q waited for
    for (int kb = warp; kb < kb_count; kb += kWarps) {
        const int q = kb / blocks_per_quarter;
        if (!(waited >> q & 1u)) {
            mbarrier_wait(&landed[q], 0);
            waited |= 1u << q;
        }
        float acc[2][4] = {};
        for (int h = 0; h < 2; ++h) {  // half h: columns kb 128 + 64 h + 16 t .. + 15 of each lane's rows
            const int64_t c = (int64_t(kb) * kBlockK + 64 * h) * 2;
            const uint4 x0 = shared16(xs + c), x1 = shared16(xs + c + 16);
            uint4 w[2][2];
            for (int nt = 0; nt < 2; ++nt) w[nt][0] = shared16(ws[nt] + c), w[nt][1] = shared16(ws[nt] + c + 16);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const uint4& xj = j / 2 ? x1 : x0;
                const uint32_t a[4] = {word(xj, 2 * (j % 2)), 0u, word(xj, 2 * (j % 2) + 1), 0u};
#pragma unroll
                for (int nt = 0; nt < 2; ++nt)
                    mma_16816(acc[nt], a, word(w[nt][j / 2], 2 * (j % 2)), word(w[nt][j / 2], 2 * (j % 2) + 1));
            }
        }
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e)  // c0, c1: row g, columns 2 t, 2 t + 1 (c2, c3 are the padding rows')
                if (g < m) staged[(int64_t(kb) * m + g) * kExpertsPerCta + nt * 8 + 2 * t + e] = acc[nt][e];
    }
    // A warp without blocks (K of fewer than 8 blocks) still waits for every copy before the CTA may exit.
    for (int q = 0; q < kQuarters; ++q)
        if (!(waited >> q & 1u)) mbarrier_wait(&landed[q], 0);
    phase_mark(p.phase_clock, 1);
    __syncthreads();

    // 3. The sums in ascending kb from +0 (bf16_act_mma's chain), stored; then the cluster barrier, after which every
    // CTA's logits are visible to rank 0.
    for (int i = threadIdx.x; i < m * kExpertsPerCta; i += kThreads) {
        const int row = i / kExpertsPerCta, col = i % kExpertsPerCta;
        if (n0 + col >= args.n) continue;
        float total = 0.0f;
        for (int kb = 0; kb < kb_count; ++kb)
            total = __fadd_rn(total, staged[(int64_t(kb) * m + row) * kExpertsPerCta + col]);
        args.y[row * args.ldy + n0 + col] = total;
    }
    phase_mark(p.phase_clock, 2);
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
    phase_mark(p.phase_clock, 4);
    if (blockIdx.x == 0) routing::route_one_block(p);
}

}  // namespace

namespace detail {

bool router_cluster_fits(const Bf16LinearParams& router, const MoeRoutingParams& params) {
    const int64_t ctas = (router.n + kExpertsPerCta - 1) / kExpertsPerCta;
    if (router.m < 1 || router.m > kMaxRouterClusterTokens || ctas > 16 || router.k % (kQuarters * kBlockK) != 0 ||
        router.ldx % 8 != 0 || reinterpret_cast<uintptr_t>(router.x) % 16 != 0 ||
        reinterpret_cast<uintptr_t>(router.w) % 16 != 0 || !moe_routing_fits_one_block(params) ||
        device_compute_capability() < 90)
        return false;
    const int64_t smem = layout(router.m, router.k).bytes;
    int max_smem = 0;
    if (cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) != cudaSuccess) return false;
    // The routing's own arrays are static shared memory beside the dynamic.
    cudaFuncAttributes attributes{};
    if (cudaFuncGetAttributes(&attributes, router_cluster_kernel) != cudaSuccess) return false;
    if (smem + int64_t(attributes.sharedSizeBytes) > max_smem) return false;
    return resident_clusters(reinterpret_cast<const void*>(router_cluster_kernel), kThreads, int(ctas), int(smem)) > 0;
}

cudaError_t launch_router_cluster(const Bf16LinearParams& router, const MoeRoutingParams& params,
                                  cudaStream_t stream) {
    RouterClusterArgs args{};
    args.x = router.x;
    args.ldx = router.ldx;
    args.w = router.w;
    args.y = router.y;
    args.ldy = router.ldy;
    args.m = router.m;
    args.n = router.n;
    args.k = router.k;
    args.routing = params;
    const int ctas = int((router.n + kExpertsPerCta - 1) / kExpertsPerCta);
    const int64_t smem = layout(router.m, router.k).bytes;
    resident_clusters(reinterpret_cast<const void*>(router_cluster_kernel), kThreads, ctas, int(smem));  // limits
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(unsigned(ctas));
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = size_t(smem);
    config.stream = stream;
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = unsigned(ctas);
    attribute.val.clusterDim.y = attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, router_cluster_kernel, args);
}

}  // namespace detail
}  // namespace dsv4::cuda
