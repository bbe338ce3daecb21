// Quantization simulations of the official numerics (spec §3, §11.3), in place on f32 buffers whose values
// are bf16: FP8 activation quantization with UE8M0 scales (act_quant), FP4 round trip (fp4_act_quant), and
// the 128-point Walsh-Hadamard rotation. Tested in tests/kernels/quant_sim_test.cpp.
#pragma once

#include <cstdint>

namespace dsv4::cpu {

// For each block of `block` consecutive values: amax = max(|x|, 1e-4); s = 2^ceil(log2(amax / 448)) (UE8M0);
// x = e4m3(clamp(x / s, -448, 448)) * s. `n` must be a multiple of `block`.
void fp8_round_trip(float* x, int64_t n, int64_t block);

// For each block: amax = max(|x|, 6 * 2^-126); s = 2^ceil(log2(amax / 6)); x = e2m1(clamp(x / s, -6, 6)) * s.
void fp4_round_trip(float* x, int64_t n, int64_t block);

// x = H_n x * n^-0.5 (Sylvester order, H_2n = [[H, H], [H, -H]]), n a power of two.
void hadamard_transform(float* x, int64_t n);

// Rounds every value to bf16 (the official activation dtype).
void round_bf16(float* x, int64_t n);

}  // namespace dsv4::cpu
