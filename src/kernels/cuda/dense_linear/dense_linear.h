// y[m, n] f32 = x[m, k] W[n, k]^T for dense weights (f32 or bf16), chunk-invariant by construction: every output
// element is one f32 dot product summed in column order, k = 0, 1, ..., each product and each sum rounded on its
// own (no FMA): the arithmetic of cpu::linear (src/kernels/cpu/linear.cpp), so the result depends on neither the row
// count m nor the tiling, and equals the CPU reference bitwise. Used for every dense linear of the executor but a
// bf16 head (compressor wkv/wgate, router gate, the F32 fixtures' projections and heads; a bf16 head runs on
// bf16_linear's tensor cores). Decode (M = 1) streams W at near copy bandwidth through cp.async-staged shared memory
// (dense_linear.cu); at large M it is CUDA-core bound, slow next to a tensor-core GEMM.
// Tested in tests/gpu/dense_linear_test.cpp (m = 1 against m = 37 bitwise, and against cpu::linear bitwise).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

enum class DenseType { kF32, kBF16 };

struct DenseLinearParams {
    DenseType type = DenseType::kF32;  // of w
    const __nv_bfloat16* x = nullptr;  // [m, k] bf16 activations, row stride ldx (upcast to f32 exactly)
    const void* w = nullptr;           // [n, k] f32 or bf16, row stride ldw
    float* y = nullptr;                // [m, n] f32, row stride ldy
    int64_t m = 0, n = 0, k = 0, ldx = 0, ldw = 0, ldy = 0;
};

void dense_linear(const DenseLinearParams& p, cudaStream_t stream);

namespace detail {
void launch_dense_linear(const DenseLinearParams& p, cudaStream_t stream);
// The alignment-agnostic path alone (8 tokens x 32 outputs per block, scalar loads): the staged path's fallback,
// kept callable so a benchmark can set the two side by side. Same arithmetic, same bits.
void launch_dense_linear_tiled(const DenseLinearParams& p, cudaStream_t stream);
}  // namespace detail

}  // namespace dsv4::cuda
