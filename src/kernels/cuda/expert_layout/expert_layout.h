// The routed experts' packed e2m1 nibbles in 64-row tiles (CudaOptions::tiled_experts), the order the decode kernels
// read them: for each tile of 64 weight rows (tiles never straddle two experts: N % 64 == 0), its 128-column blocks one
// after the other, each block the tile's 64 rows x 64 bytes back to back (4 KiB). Within a row's 64 bytes the four
// 16-byte chunks (32 columns each, one MXFP4 scale block) sit at chunk ^ ((row >> 1) & 3), so that the rows a warp's
// fragment reads take (rows g and g + 2 share banks at a 64-byte pitch) land on distinct banks when a stage is copied
// as it lies. A tile occupies the same bytes in both layouts (64 rows x K / 2), so the repack is a permutation inside
// each tile. Why: a batch-1 pass copies a stage of a tile as one 4 KiB bulk copy, which streams as fast as plain
// loads where sixteen-byte copies of 64-byte row pieces 2 KiB apart did not (docs/perf.md, "The single-slot pass's
// loading scheme, and what a bulk copy of a repacked stage buys"). The block scales keep the checkpoint's row order.
// An option (CudaOptions::tiled_experts, off): the batched and prefill passes read the tiles slower than rows.
// Tested in tests/gpu/expert_layout_test.cpp (the repack against expert_chunk_offset, every kernel's bits in both
// layouts).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

inline constexpr int kExpertTileRows = 64;
inline constexpr int64_t kExpertBlockBytes = 64;                                       // a row's bytes in one block
inline constexpr int64_t kExpertTileBlockBytes = kExpertTileRows * kExpertBlockBytes;  // 4 KiB

// Whether matrices of n rows and k columns per expert take the tiled layout: whole tiles and whole 128-column blocks.
inline bool expert_tiles_fit(int64_t n, int64_t k) {
    return n > 0 && k > 0 && n % kExpertTileRows == 0 && k % 128 == 0;
}

// Byte offset of 16-byte chunk `chunk` (0-3) of block `block` (128 columns) of weight row `row` (counted over all
// experts: e * n + r) in a matrix whose rows hold k_half bytes, in the tiled layout or (tiled false) row by row.
__host__ __device__ inline int64_t expert_chunk_offset(bool tiled, int64_t row, int64_t k_half, int64_t block,
                                                       int chunk) {
    if (!tiled) return row * k_half + block * kExpertBlockBytes + chunk * 16;
    return row / kExpertTileRows * kExpertTileRows * k_half + block * kExpertTileBlockBytes +
           row % kExpertTileRows * kExpertBlockBytes + ((chunk ^ int((row >> 1) & 3)) * 16);
}
// The same place found from a 64-row group's first row (a multiple of 64) as a kernel's copies walk a tile: the byte
// at `place` (0-3) of block `block` of the group's row `row_in_group`, which holds chunk
// expert_tile_chunk_at(row_in_group, place) of that row (the swizzle is its own inverse: the chunk's place is the same
// function of the chunk).
__host__ __device__ inline int64_t expert_tile_place_offset(int64_t group_row, int64_t k_half, int64_t block,
                                                            int row_in_group, int place) {
    return group_row * k_half + block * kExpertTileBlockBytes + row_in_group * kExpertBlockBytes + place * 16;
}
__host__ __device__ inline int expert_tile_chunk_at(int row_in_group, int place) {
    return place ^ ((row_in_group >> 1) & 3);
}

// Bytes from one block of a row to the next (a compile-time constant in the kernels, which take the layout as a
// template parameter).
__host__ __device__ constexpr int expert_block_stride(bool tiled) {
    return int(tiled ? kExpertTileBlockBytes : kExpertBlockBytes);
}

// Rewrites `rows` rows of k_half bytes (rows % 64 == 0, k_half % 64 == 0) from row order into the tiled layout, in
// place, one tile a CTA through shared memory (64 x k_half bytes). Throws dsv4::Error where a tile does not fit the
// device's shared memory (k_half above ~3.6 KB) or the shape does not tile.
void repack_expert_tiles(uint8_t* w, int64_t rows, int64_t k_half, cudaStream_t stream);
// Whether the current device's CTAs hold a tile of 64 rows of k_half bytes (repack_expert_tiles would run).
bool expert_tiles_repackable(int64_t k_half);

namespace detail {
// Unchecked (expert_layout.cu); smem_bytes = 64 x k_half.
void launch_repack_expert_tiles(uint8_t* w, int64_t rows, int64_t k_half, size_t smem_bytes, cudaStream_t stream);
}  // namespace detail

}  // namespace dsv4::cuda
