// Routed-expert GEMMs (spec §9 step 5): for every expert e and every gathered slot p in
// [expert_offsets[e], expert_offsets[e+1]): y[p, :] = bf16(W_e x[row(p)]) with x FP8-quantized (e4m3 + pow2 f32 scale
// per 128, as the official FP4 linear) and W_e MXFP4 (e2m1 + E8M0 per 32) or NVFP4 (e2m1 + e4m3 per 16, x f32
// global), decoded in the kernel (no bf16 copy of any weight), f32 accumulation. row(p) = row_index[p], or p when
// row_index is null (activations already gathered). Two paths, each batch-invariant (a slot's bits never depend on
// the other slots of the launch), with different summation structures:
//   kMma (default)  tensor cores, the official FP4 linear's structure: per 32-column block (16 for NVFP4) a partial
//                   product from zero, rescaled by a_scale x w_scale and added in ascending K (moe_mma.cu).
//   kCudaCore       the former kernel: f32 FMA chains on the CUDA cores, K in ranges of k_span summed by warp trees
//                   (moe_gemm_kernels.cu); kept as the second opinion the tests and benchmarks compare with.
// Both take persistent grids over a list of the non-empty experts built on the device, so a decode step's few
// experts spread over the whole GPU without a host sync, and the launch is capturable.
// `second` (optional): another matrix of the same shape and format read from the same activations and slots (w3
// beside w1): one launch computes both, each output as if launched alone.
// Contract: K % 32 == 0. Tested in tests/gpu/moe_gemm_test.cpp against cpu::linear per expert, rows independent of
// the batch, and the CUDA-core grids bitwise against each other (detail::launch_moe_gemm_strided).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace dsv4::cuda {

enum class ExpertFormat { kMxfp4, kNvfp4 };
enum class MoeGemmPath { kMma, kCudaCore };

// One more matrix for the same launch (see `second` above).
struct MoeGemmMatrix {
    const uint8_t* w = nullptr;
    const uint8_t* w_scale = nullptr;
    const float* w_global = nullptr;
    __nv_bfloat16* y = nullptr;
};

// The activations as the SwiGLU of two earlier products instead of `a` / `a_scale` (w2 of a decode step reading W1 x
// and W3 x): slot p's row is swiglu_element(gate[p], up[p]) (moe_expert/swiglu_math.cuh: the limit and the slot's
// routing weight routing_weights[sorted_assignment[p]]) quantized per 128 columns as act_quant quantizes: the bits of
// cuda::swiglu followed by this product, without its launch. Slots are rows (row_index null). Only where
// moe_gemm_computes_swiglu holds (the warp-MMA kernel's single-slot passes: no expert holds two slots; K % 128 == 0).
struct MoeGemmSwiglu {
    const __nv_bfloat16* gate = nullptr;         // [slots, k] bf16, row stride `stride` (null: off)
    const __nv_bfloat16* up = nullptr;           // [slots, k] bf16, row stride `stride`
    int64_t stride = 0;                          // 0: k
    const float* routing_weights = nullptr;      // optional: [assignments] f32
    const int32_t* sorted_assignment = nullptr;  // [slots], with routing_weights
    float limit = 0.0f;                          // swiglu_limit; <= 0: no clamp
};

struct MoeGemmParams {
    const uint8_t* a = nullptr;          // [rows, k] e4m3, row stride k
    const float* a_scale = nullptr;      // [rows, ceil(k/128)] f32, powers of two
    const int32_t* row_index = nullptr;  // [slots] activation row of each slot, or null (slot p reads row p)
    // [experts + 1] device, non-decreasing; offsets[0] > 0 where the experts are one rank's share of a layer's
    // (slots before it belong to other ranks and are not touched)
    const int32_t* expert_offsets = nullptr;
    ExpertFormat format = ExpertFormat::kMxfp4;
    const uint8_t* w = nullptr;        // [experts, n, k/2] packed e2m1, low nibble = even column
    const uint8_t* w_scale = nullptr;  // [experts, n, k/32] E8M0 (MXFP4) or [experts, n, k/16] e4m3 (NVFP4)
    const float* w_global = nullptr;   // [experts] f32 (NVFP4 weight_scale_2); null for MXFP4
    __nv_bfloat16* y = nullptr;        // [slots, n] bf16, slot order
    int64_t experts = 0, n = 0, k = 0;
    int max_slots_per_expert = 1;  // host bound on any expert's slot count (the batch's token count); picks the tile
    int expected_slots_per_expert = 0;  // optional: slots a busy active expert holds (picks the pass width; no bits)
    int expected_active_experts = 0;    // optional: non-empty experts of this launch (picks the row tile; no bits)
    MoeGemmMatrix second;               // optional: w == nullptr for one matrix
    MoeGemmSwiglu swiglu;               // optional: the activations computed from W1 x and W3 x (a, a_scale unused)
    // The single-slot passes (a batch-1 step) copy each weight stage of a 64-row tile as one 2D copy of the
    // tensor-memory accelerator (sm_90+; N % 64 == 0, K % 128 == 0). The same bits; off: their 16-byte copies.
    bool tensor_copies = true;
    // The wide passes (32 and 64 slots on sm_90) fold power-of-two block scales into the decoded weights where an
    // item's codes allow it (scale_fold.h: the factors whose folded sums the tensor cores give bit for bit). Off: they
    // promote the scales as every other pass does; the same bits.
    bool fold_scales = true;
    MoeGemmPath path = MoeGemmPath::kMma;
};

struct MoeGemmConfig {
    int m_tile = 1;         // slots per pass (1, 2, 4, 8, 16)
    int64_t k_span = 0;     // K columns staged at a time, multiple of 1024
    int expert_blocks = 1;  // grid.y of the former strided kernel (detail::launch_moe_gemm_strided)
};

MoeGemmConfig moe_gemm_config(int64_t experts, int64_t n, int64_t k, int max_slots_per_expert);
std::string moe_gemm_can_implement(const MoeGemmParams& p);
// Whether moe_gemm can take p.swiglu for these parameters on the current device (p.swiglu itself not looked at).
bool moe_gemm_computes_swiglu(const MoeGemmParams& p);
void moe_gemm(const MoeGemmParams& p, cudaStream_t stream);

}  // namespace dsv4::cuda
