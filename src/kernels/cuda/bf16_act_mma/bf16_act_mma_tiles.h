// Tile choice and contract of the bf16-activation tensor-core product (bf16_act_mma.cuh), host side
// (bf16_act_mma_tiles.cpp). Tiles change
// only speed: every tile runs the same per-output chain.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/int_math.h"

namespace dsv4::cuda::bf16_act_mma {

// 16 rows with 8, 16 or 32 columns, the CTA's warps sharing out the K blocks (decode), or 64 rows with 64 or 128
// columns (batches), or 128 x 128 on the warpgroup MMA (common/wgmma_linear.cuh: sm_90, e4m3 weights, K % 128 ==
// 0; grouped_linear only); a tile's columns never straddle two column groups (group_n < n: grouped products;
// group_n == n: one group, any tile).
struct Tiles {
    int block_m = 16;
    int block_n = 8;
};

// 16-row tiles stage at most this much shared memory (two CTAs per SM), as gemm_fp8's.
inline constexpr size_t kMaxStagedSmem = size_t(96) << 10;

// 16-row tiles stage [ceil(k / 128), min(m, 16), block_n] f32; 64-row tiles sum in registers.
inline size_t staged_smem_bytes(const Tiles& t, int64_t m, int64_t k) {
    if (t.block_m != 16) return 0;
    return size_t(ceil_div(k, 128)) * size_t(std::min<int64_t>(m, 16)) * size_t(t.block_n) * sizeof(float);
}

// Split 16-row tiles (Args::splits): the f32 staging their CTAs need in global memory, and the arrival counters
// (one a tile).
inline int64_t split_tiles(const Tiles& t, int64_t m, int64_t n) {
    return ceil_div(std::max<int64_t>(m, 1), t.block_m) * ceil_div(n, t.block_n);
}
inline int64_t split_staged_floats(const Tiles& t, int64_t m, int64_t n, int64_t k) {
    return split_tiles(t, m, n) * ceil_div(k, 128) * std::min<int64_t>(std::max<int64_t>(m, 1), 16) * t.block_n;
}

// gemm_fp8's kMma cost model (gemm_fp8.cpp, fp8_gemm_config), with the weight's bytes per value: 16-row tiles
// stream W once per 16 rows at about 3 TB/s; a 64-row CTA (one per SM) takes about 1.1 us per 128-column K block
// for 128 columns; the cheaper by that estimate runs. 64-row tiles take 64 columns where 128 would leave SMs idle.
// `wgmma`: the caller runs the 128 x 128 tile, taken (as gemm_fp8's) where K % 128 == 0 and it needs fewer waves
// than the 64 x 128 tile by more than 1.4x.
Tiles choose_tiles(int64_t m, int64_t n, int64_t k, int64_t group_n, int w_bytes, int num_sms, bool wgmma = false);

// Empty when `t` can run an [m, n] x [n, k] product with column groups of `group_n`, else the reason (`wgmma`: the
// caller runs the 128 x 128 tile on this device).
std::string tiles_can_run(const Tiles& t, int64_t m, int64_t n, int64_t k, int64_t group_n, bool wgmma = false);

}  // namespace dsv4::cuda::bf16_act_mma
