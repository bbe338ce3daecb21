// Quantization simulations of the official numerics (spec §3, §11.3), following DeepSeek's kernel.py:
//   act_quant (UE8M0 path): amax = max(max|x|, 1e-4); s = 2^ceil(log2(amax * f32(1/448))) from the exponent
//     bits of the f32 product (a multiply by the rounded reciprocal, not a division; for every f32 amax the
//     two give the same power of two, which quant_sim_test checks around 448 * 2^k); q = e4m3(clamp(x / s,
//     -448, 448)) with round-to-nearest-even; result q * s. With a power-of-two s >= amax / 448 the clamp
//     never binds; it is kept because the kernel has it.
//   fp4_act_quant: the same with 6, the floor 6 * 2^-126 and E2M1.
// q * s is exactly representable in bf16 (q has at most 4 significant bits), so no final rounding is needed.
// Tested in tests/kernels/quant_sim_test.cpp against tools/refgen/quant_vectors.py and hand-worked cases.
#include "kernels/cpu/quant_sim.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/number_formats.h"

namespace dsv4::cpu {
namespace {

float block_amax(const float* x, int64_t n) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
    return amax;
}

}  // namespace

void fp8_round_trip(float* x, int64_t n, int64_t block) {
    DSV4_ASSERT(block > 0 && n % block == 0, "fp8_round_trip: n {} is not a multiple of block {}", n, block);
    const float kMaxInv = 1.0f / kE4M3Max;  // the kernel's fp8_max_inv, rounded to f32
    for (int64_t b = 0; b < n; b += block) {
        float* blk = x + b;
        float amax = std::max(block_amax(blk, block), 1e-4f);
        float s = ue8m0_ceil_pow2(amax * kMaxInv);
        for (int64_t i = 0; i < block; ++i) blk[i] = round_e4m3(std::clamp(blk[i] / s, -kE4M3Max, kE4M3Max)) * s;
    }
}

void fp4_round_trip(float* x, int64_t n, int64_t block) {
    DSV4_ASSERT(block > 0 && n % block == 0, "fp4_round_trip: n {} is not a multiple of block {}", n, block);
    const float kMaxInv = 1.0f / kE2M1Max;
    const float kFloor = kE2M1Max * std::ldexp(1.0f, -126);
    for (int64_t b = 0; b < n; b += block) {
        float* blk = x + b;
        float amax = std::max(block_amax(blk, block), kFloor);
        float s = ue8m0_ceil_pow2(amax * kMaxInv);
        for (int64_t i = 0; i < block; ++i) blk[i] = round_e2m1(std::clamp(blk[i] / s, -kE2M1Max, kE2M1Max)) * s;
    }
}

void hadamard_transform(float* x, int64_t n) {
    DSV4_ASSERT(n > 0 && (n & (n - 1)) == 0, "hadamard_transform: n {} is not a power of two", n);
    // In-place butterflies; after the pass of width h the vector holds (H_2h (x) I) x, which builds the
    // Sylvester matrix H_2n = [[H_n, H_n], [H_n, -H_n]] in natural order.
    for (int64_t h = 1; h < n; h *= 2) {
        for (int64_t i = 0; i < n; i += 2 * h) {
            for (int64_t j = i; j < i + h; ++j) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
        }
    }
    const float scale = float(1.0 / std::sqrt(double(n)));  // the official scale argument n^-0.5, as f32
    for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

void round_bf16(float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = dsv4::round_bf16(x[i]);
}

}  // namespace dsv4::cpu
