// The tiled layout's repack kernel (expert_layout.h); its checks are in expert_layout.cpp.
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/expert_layout/expert_layout.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 512;

// One tile: its 64 rows into shared memory in 16-byte pieces, then out again to their tiled places.
__global__ void __launch_bounds__(kThreads) repack_tile_kernel(uint8_t* w, int64_t k_half) {
    extern __shared__ __align__(16) uint8_t tile[];
    uint8_t* base = w + int64_t(blockIdx.x) * kExpertTileRows * k_half;
    const int64_t pieces = kExpertTileRows * k_half / 16;
    for (int64_t i = threadIdx.x; i < pieces; i += kThreads)
        reinterpret_cast<uint4*>(tile)[i] = reinterpret_cast<const uint4*>(base)[i];
    __syncthreads();
    for (int64_t i = threadIdx.x; i < pieces; i += kThreads) {
        const int64_t row = i * 16 / k_half, col = i * 16 % k_half;  // the piece's row and byte in row order
        const int64_t at =
            expert_chunk_offset(true, row, k_half, col / kExpertBlockBytes, int(col % kExpertBlockBytes / 16));
        *reinterpret_cast<uint4*>(base + at) = reinterpret_cast<const uint4*>(tile)[i];
    }
}

}  // namespace

namespace detail {
void launch_repack_expert_tiles(uint8_t* w, int64_t rows, int64_t k_half, size_t smem_bytes, cudaStream_t stream) {
    DSV4_CUDA_CHECK(
        cudaFuncSetAttribute(repack_tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes)));
    repack_tile_kernel<<<unsigned(rows / kExpertTileRows), kThreads, smem_bytes, stream>>>(w, k_half);
    DSV4_CUDA_CHECK(cudaGetLastError());
}
}  // namespace detail

}  // namespace dsv4::cuda
