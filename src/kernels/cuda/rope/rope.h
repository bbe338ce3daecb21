// Rotary embedding on the GPU: interleaved pairs (2i, 2i+1) of the trailing rope_dim channels of every head of
// [tokens, heads, head_dim] bf16, in place, forward or inverse (conjugate), as cpu::apply_rope followed by the bf16
// cast of model numerics. The inv_freq table is cpu::make_rope_table's, uploaded; angle = f32(position) * inv_freq
// in f32; cos and sin are evaluated in double and rounded to f32 (libm's cosf/sinf are within an ulp of that).
// Tested in tests/gpu/rope_test.cpp (apply_ropes bitwise against apply_rope).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <span>

namespace dsv4::cuda {

struct ApplyRopeParams {
    __nv_bfloat16* x = nullptr;          // [tokens, heads, head_dim] bf16, token stride token_stride elements
    const float* inv_freq = nullptr;     // [rope_dim / 2] f32 (cpu::make_rope_table(...).inv_freq)
    const int32_t* positions = nullptr;  // [tokens] absolute positions
    int64_t tokens = 0, heads = 0, head_dim = 0, rope_dim = 0, token_stride = 0;
    bool inverse = false;
};
void apply_rope(const ApplyRopeParams& p, cudaStream_t stream);

// Up to kMaxRopes independent rotations in one launch (the executor's q and window kv: same positions and table),
// each tensor rotated by the code that rotates it alone (per token: the same cos/sin table and pair operations), so
// the same bits. Tensors whose paths (below) differ run as one launch each. No tensor may overlap another.
inline constexpr size_t kMaxRopes = 2;
void apply_ropes(std::span<const ApplyRopeParams> ropes, cudaStream_t stream);

// kPaired: V4 and the fixtures (even head_dim and token stride, rope_dim <= 1024): one cos/sin table per token in
// shared memory, bf16 pairs loaded as one word. kGeneric: any head_dim (an odd one leaves the pairs unaligned) and
// any rope_dim: element loads, cos/sin evaluated per pair; the same operations, so the same bits.
enum class RopePath { kPaired, kGeneric };
RopePath rope_path(const ApplyRopeParams& p);

namespace detail {
// Unchecked (rope.cu): 1 .. kMaxRopes tensors of one path, tokens > 0 for at least one.
void launch_apply_ropes(std::span<const ApplyRopeParams> ropes, RopePath path, cudaStream_t stream);
}  // namespace detail

}  // namespace dsv4::cuda
