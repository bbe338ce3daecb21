// Routed-expert GEMMs (spec §9 step 5): for every expert e and every gathered slot p in
// [expert_offsets[e], expert_offsets[e+1]): y[p, :] = bf16(W_e x[row(p)]) with x FP8-quantized (e4m3 + pow2 f32 scale
// per 128, as the official FP4 linear) and W_e MXFP4 (e2m1 + E8M0 per 32) or NVFP4 (e2m1 + e4m3 per 16, x f32
// global), decoded in the kernel (no bf16 copy of any weight), f32 accumulation. row(p) = row_index[p], or p when
// row_index is null (activations already gathered). Runs on the skinny kernel: tokens of an expert in passes of
// up to 16, K in ranges accumulated in registers; a persistent grid takes (active expert, 32-row tile) items from
// a list of the non-empty experts built on the device, so a decode step's few experts spread over the whole GPU
// without a host sync (moe_gemm_kernels.cu). The bits depend on k_span only (moe_gemm_config), never on the grid.
// Contract: K % 32 == 0. Tested in tests/gpu/moe_gemm_test.cpp against cpu::linear per expert, and bitwise against
// the former grid (detail::launch_moe_gemm_strided).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace dsv4::cuda {

enum class ExpertFormat { kMxfp4, kNvfp4 };

struct MoeGemmParams {
    const uint8_t* a = nullptr;               // [rows, k] e4m3, row stride k
    const float* a_scale = nullptr;           // [rows, ceil(k/128)] f32, powers of two
    const int32_t* row_index = nullptr;       // [slots] activation row of each slot, or null (slot p reads row p)
    const int32_t* expert_offsets = nullptr;  // [experts + 1] device, non-decreasing, offsets[0] = 0
    ExpertFormat format = ExpertFormat::kMxfp4;
    const uint8_t* w = nullptr;         // [experts, n, k/2] packed e2m1, low nibble = even column
    const uint8_t* w_scale = nullptr;   // [experts, n, k/32] E8M0 (MXFP4) or [experts, n, k/16] e4m3 (NVFP4)
    const float* w_global = nullptr;    // [experts] f32 (NVFP4 weight_scale_2); null for MXFP4
    __nv_bfloat16* y = nullptr;         // [slots, n] bf16, slot order
    int64_t experts = 0, n = 0, k = 0;
    int max_slots_per_expert = 1;  // host bound on any expert's slot count (the batch's token count); picks the tile
};

struct MoeGemmConfig {
    int m_tile = 1;          // slots per pass (1, 2, 4, 8, 16)
    int64_t k_span = 0;      // K columns staged at a time, multiple of 1024
    int expert_blocks = 1;   // grid.y of the former strided kernel (detail::launch_moe_gemm_strided)
};

MoeGemmConfig moe_gemm_config(int64_t experts, int64_t n, int64_t k, int max_slots_per_expert);
std::string moe_gemm_can_implement(const MoeGemmParams& p);
void moe_gemm(const MoeGemmParams& p, cudaStream_t stream);

}  // namespace dsv4::cuda
