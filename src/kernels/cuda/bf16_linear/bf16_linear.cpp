// bf16_linear launcher: contract checks, tiles, launch (see bf16_linear.h; the kernel in bf16_linear_kernels.cu).
#include "kernels/cuda/bf16_linear/bf16_linear.h"

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/cuda/bf16_linear/bf16_linear_kernels.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/resident_ctas.h"

namespace dsv4::cuda {

bf16_act_mma::Tiles bf16_linear_tiles(int64_t m, int64_t n, int64_t k, int num_sms) {
    return bf16_act_mma::choose_tiles(m, n, k, n, 2, num_sms);
}

std::string bf16_linear_can_run(const Bf16LinearParams& p) {
    if (!p.x || !p.w || !p.y) return "null operand pointer";
    if (p.m <= 0 || p.n <= 0 || p.k <= 0) return fmt::format("empty shape m={} n={} k={}", p.m, p.n, p.k);
    if (p.k % 16 || p.n % 8) return fmt::format("needs k % 16 == 0 and n % 8 == 0, got k={} n={}", p.k, p.n);
    if (reinterpret_cast<uintptr_t>(p.x) % 16 || reinterpret_cast<uintptr_t>(p.w) % 16 || p.ldx % 8)
        return "x and W must be 16-byte aligned, x's row stride a multiple of 8 values";
    if (reinterpret_cast<uintptr_t>(p.y) % 8 || p.ldy % 2) return "y must be 8-byte aligned with an even row stride";
    if (p.ldx < p.k || p.ldy < p.n) return fmt::format("row strides {} / {} below k={} / n={}", p.ldx, p.ldy, p.k, p.n);
    return {};
}

void bf16_linear(const Bf16LinearParams& p, cudaStream_t stream) {
    if (std::string why = bf16_linear_can_run(p); !why.empty()) fail("bf16_linear: {}", why);
    const bf16_act_mma::Tiles tiles = bf16_linear_tiles(p.m, p.n, p.k, multiprocessor_count());
    if (std::string why = bf16_act_mma::tiles_can_run(tiles, p.m, p.n, p.k, p.n); !why.empty())
        fail("bf16_linear: {}", why);
    DSV4_CUDA_CHECK(launch_bf16_linear(p, tiles, stream));
}

}  // namespace dsv4::cuda
