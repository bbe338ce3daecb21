// Host-side contract checks of repack_expert_tiles (expert_layout.h); the kernel is in expert_layout.cu.
#include "kernels/cuda/expert_layout/expert_layout.h"

#include "core/error.h"
#include "kernels/cuda/common/cuda_check.h"

namespace dsv4::cuda {

namespace {
int max_optin_smem() {
    int device = 0, bytes = 0;
    DSV4_CUDA_CHECK(cudaGetDevice(&device));
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    return bytes;
}
}  // namespace

bool expert_tiles_repackable(int64_t k_half) {
    return k_half > 0 && size_t(kExpertTileRows * k_half) <= size_t(max_optin_smem());
}

void repack_expert_tiles(uint8_t* w, int64_t rows, int64_t k_half, cudaStream_t stream) {
    DSV4_CHECK(w && rows > 0 && rows % kExpertTileRows == 0 && k_half > 0 && k_half % kExpertBlockBytes == 0,
               "repack_expert_tiles: {} rows of {} bytes do not make whole 64-row tiles of 128-column blocks", rows,
               k_half);
    const size_t smem = size_t(kExpertTileRows * k_half);
    const int max_smem = max_optin_smem();
    DSV4_CHECK(smem <= size_t(max_smem),
               "repack_expert_tiles: a tile of 64 rows x {} bytes exceeds the {} bytes of shared memory a CTA may hold",
               k_half, max_smem);
    detail::launch_repack_expert_tiles(w, rows, k_half, smem, stream);
}

}  // namespace dsv4::cuda
