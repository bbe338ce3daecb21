// The MoE pieces between routing and the expert GEMMs on the device (spec §9; src/model/moe.cpp expert_forward and
// moe_forward), so a decode step needs no host synchronization (each slot's activation row comes from moe_routing):
//   swiglu             h = bf16(silu(min(g, L)) * clamp(u, -L, L) [* routing weight]), f32 math as the CPU
//   moe_combine        out[t] = bf16(sum of the token's routed outputs in ascending expert order (the CPU's
//                      accumulation order) + shared[t]), f32 sums
//   dense_expert_gemm  y[p] = bf16(W_e(p) x[row(p)]) for experts stored dense (f32 or bf16, the transformers
//                      fixtures): f32 products and sums, as Precision::linear on a dense weight
// Tested through tests/gpu/cuda_model_test.cpp (GPU vs CPU forward); moe_combine also bitwise against the CPU's
// accumulation in tests/gpu/moe_expert_test.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

struct SwigluParams {
    const __nv_bfloat16* gate = nullptr;  // [rows, inter] bf16 (W1 x), row stride gate_up_stride
    const __nv_bfloat16* up = nullptr;    // [rows, inter] bf16 (W3 x), row stride gate_up_stride
    __nv_bfloat16* out = nullptr;         // [rows, inter] bf16
    // Row stride of gate and up; 0: inter. The shared expert's stacked GEMM gives [rows, 2 inter], gate | up per row:
    // gate = y, up = y + inter, stride 2 inter.
    int64_t gate_up_stride = 0;
    // Routed experts: slot p is weighted by routing_weights[sorted_assignment[p]]; both null for the shared expert.
    const float* routing_weights = nullptr;      // [tokens * k] f32
    const int32_t* sorted_assignment = nullptr;  // [rows]
    // Device scalars bounding the rows computed: rows before *row_first or from *row_count on are skipped (the
    // slots of the experts this rank holds: expert_offsets[first] and expert_offsets[first + count]); null: 0 / rows.
    const int32_t* row_first = nullptr;
    const int32_t* row_count = nullptr;
    int64_t rows = 0, inter = 0;
    float limit = 0.0f;  // swiglu_limit; <= 0: no clamp
    // Optional: each computed row of `out` also quantized for the FP8 / FP4 GEMM that reads it next, exactly as
    // act_quant_fp8 would quantize it (e4m3 codes [rows, inter] dense, scales [rows, ceil(inter / 128)]; rows that
    // are skipped are not written). Both or neither.
    uint8_t* q = nullptr;
    float* q_scales = nullptr;
    // Optional: each skipped row r set to +0 in zero_rows [rows, zero_cols] bf16 instead. Under expert parallelism the
    // routed outputs of the slots another rank's experts hold, which this rank's w2 does not write and the exchange
    // adds as x + 0 = x (in place of a memset before w2: one launch fewer).
    __nv_bfloat16* zero_rows = nullptr;
    int64_t zero_cols = 0;
};
void swiglu(const SwigluParams& p, cudaStream_t stream);

struct MoeCombineParams {
    const __nv_bfloat16* routed = nullptr;     // [slots, dim] bf16 routed expert outputs in slot order
    const int32_t* experts = nullptr;          // [tokens, k] chosen experts (-1: dropped)
    const int32_t* assignment_slot = nullptr;  // [tokens, k] slot of each assignment (-1: dropped)
    const __nv_bfloat16* shared = nullptr;     // [tokens, dim] bf16 shared expert output
    __nv_bfloat16* out = nullptr;              // [tokens, dim] bf16
    int64_t tokens = 0, dim = 0;
    int32_t k = 0;  // at most kMaxCombineK
};
inline constexpr int kMaxCombineK = 16;
void moe_combine(const MoeCombineParams& p, cudaStream_t stream);
// moe_combine's contract (shape, k, pointers where there are tokens), for the launchers that run its code in their
// own kernels (hc_post_of_moe); throws naming `op`.
void check_moe_combine(const char* op, const MoeCombineParams& p);

struct DenseExpertGemmParams {
    const __nv_bfloat16* x = nullptr;    // [rows, k] bf16
    const int32_t* row_index = nullptr;  // [slots] row of x per slot; null: slot p reads row p
    // [experts + 1] device, non-decreasing; offsets[0] may be > 0 (the first expert a rank holds): slots before it are
    // another rank's and are left alone.
    const int32_t* expert_offsets = nullptr;
    const void* w = nullptr;  // [experts, n, k] f32 or bf16
    bool w_f32 = true;
    __nv_bfloat16* y = nullptr;                        // [slots, n] bf16
    int64_t experts = 0, n = 0, k = 0, max_slots = 0;  // max_slots: host bound on expert_offsets[experts]
};
void dense_expert_gemm(const DenseExpertGemmParams& p, cudaStream_t stream);

namespace detail {
void launch_swiglu(const SwigluParams& p, cudaStream_t stream);
void launch_moe_combine(const MoeCombineParams& p, cudaStream_t stream);
void launch_dense_expert_gemm(const DenseExpertGemmParams& p, cudaStream_t stream);
}  // namespace detail

}  // namespace dsv4::cuda
