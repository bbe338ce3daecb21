// bf16_act_mma tile choice and contract (see bf16_act_mma_tiles.h).
#include "kernels/cuda/bf16_act_mma/bf16_act_mma_tiles.h"

#include <fmt/format.h>

namespace dsv4::cuda::bf16_act_mma {

Tiles choose_tiles(int64_t m, int64_t n, int64_t k, int64_t group_n, int w_bytes, int num_sms, bool wgmma) {
    const int64_t kb = ceil_div(k, 128), sms = std::max(num_sms, 1);
    const int64_t m_tiles = ceil_div(std::max<int64_t>(m, 1), 16);
    const auto fits = [&](int bn) { return group_n == n || group_n % bn == 0; };
    int decode_n = 0;
    for (int bn : {32, 16, 8}) {
        if (!fits(bn) || staged_smem_bytes({16, bn}, m, k) > kMaxStagedSmem || (bn == 32 && kb > 8)) continue;
        decode_n = bn;
        if (2 * ceil_div(n, bn) * m_tiles >= 3 * sms) break;
    }
    const double decode_us = double(m_tiles) * double(n) * double(k) * w_bytes / 3e6;
    const double tiles_us = 1.1 * w_bytes * double(ceil_div(ceil_div(m, 64) * ceil_div(n, 128), sms) * kb);
    if (fits(64) && (!decode_n || tiles_us < decode_us)) {
        const bool wide = fits(128) && ceil_div(m, 64) * ceil_div(n, 128) >= sms;
        const int64_t waves64 = ceil_div(ceil_div(m, 64) * ceil_div(n, 128), sms),
                      waves128 = ceil_div(ceil_div(m, 128) * ceil_div(n, 128), sms);
        if (wgmma && wide && k % 128 == 0 && 1.4 * double(waves128) < double(waves64)) return {128, 128};
        return {64, wide ? 128 : 64};
    }
    return {16, decode_n};
}

std::string tiles_can_run(const Tiles& t, int64_t m, int64_t n, int64_t k, int64_t group_n, bool wgmma) {
    if (!((t.block_m == 16 && (t.block_n == 8 || t.block_n == 16 || t.block_n == 32)) ||
          (t.block_m == 64 && (t.block_n == 64 || t.block_n == 128)) ||
          (wgmma && t.block_m == 128 && t.block_n == 128)))
        return fmt::format("no {}x{} tile", t.block_m, t.block_n);
    if (t.block_m == 128 && k % 128) return fmt::format("the 128x128 (wgmma) tile needs K % 128 == 0, got {}", k);
    if (k % 16) return fmt::format("K must be a multiple of 16, got {}", k);
    if (group_n != n && group_n % t.block_n)
        return fmt::format("a {}-column tile would straddle groups of {}", t.block_n, group_n);
    if (ceil_div(n, t.block_n) > 65535 || ceil_div(m, t.block_m) > int64_t{0x7FFFFFFF})
        return fmt::format("grid too large for M={} N={}", m, n);
    if (staged_smem_bytes(t, m, k) > kMaxStagedSmem)
        return fmt::format("K={} needs more staged shared memory than {} bytes with 16-row tiles", k, kMaxStagedSmem);
    return {};
}

}  // namespace dsv4::cuda::bf16_act_mma
