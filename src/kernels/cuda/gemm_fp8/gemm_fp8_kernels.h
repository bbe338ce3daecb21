// Host entry points of the gemm_fp8 kernels (gemm_fp8_kernels.cu, mma_gemm.cu), for the launcher in gemm_fp8.cpp
// and for the grouped_linear / moe_gemm launchers that reuse the split reduction. Contracts are checked by the
// callers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/gemm_fp8/gemm_fp8.h"

namespace dsv4::cuda {

// Skinny FP8 GEMM; `partial` ([splits, m, n] f32) is used when config.splits > 1.
cudaError_t launch_fp8_skinny(const Fp8GemmParams& p, const Fp8GemmConfig& config, float* partial,
                              cudaStream_t stream);

// Tensor-core FP8 GEMM (mma_gemm.cu) with config.block_m / block_n as chosen by fp8_gemm_config; no workspace.
cudaError_t launch_fp8_mma(const Fp8GemmParams& p, const Fp8GemmConfig& config, cudaStream_t stream);
// The 128 x 128 warpgroup tile (wgmma_gemm.cu; sm_90a, K % 128 == 0), which launch_fp8_mma takes for block_m 128.
cudaError_t launch_fp8_wgmma(const Fp8GemmParams& p, cudaStream_t stream);
// Dynamic shared memory of that launch: decode tiles (block_m 16) stage [ceil(k/128), min(m, 16), block_n] f32.
size_t fp8_mma_smem_bytes(int block_m, int block_n, int64_t m, int64_t k);

// CUDA-core FP8 GEMM for any shape (generic_gemm.cu): one thread per output, K in order.
cudaError_t launch_fp8_generic(const Fp8GemmParams& p, cudaStream_t stream);

// y[i] = bf16(sum_s partial[s * count + i]), summed in split order.
cudaError_t launch_reduce_splits(const float* partial, int splits, int64_t count, __nv_bfloat16* y,
                                 cudaStream_t stream);

// cuBLASLt scale order: a_out[kb][round_up(m,4)] = a_scale[m][kb] (zero padding), w_out[nb][round_up(kb,4)].
cudaError_t launch_repack_scales(const float* a_scale, int64_t m, int64_t kb, const float* w_scale, int64_t nb,
                                 float* a_out, float* w_out, cudaStream_t stream);

}  // namespace dsv4::cuda
