// grouped_linear launcher: path, tiles, contract checks, launch (see grouped_linear.h).
#include "kernels/cuda/grouped_linear/grouped_linear.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/grouped_linear/grouped_linear_kernels.h"

namespace dsv4::cuda {
namespace {

// 16-row tiles stage at most this much shared memory (two CTAs per SM), as gemm_fp8's.
constexpr size_t kMaxStagedSmem = size_t(96) << 10;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

// The tensor-core kernel reads x and W in 16-byte chunks along each group's K and keeps a tile's columns in one
// group.
GroupedLinearPath grouped_linear_path(const GroupedLinearParams& p) {
    const bool mma = p.in % 16 == 0 && p.out % 8 == 0 && aligned16(p.x) && aligned16(p.w);
    return mma ? GroupedLinearPath::kMma : GroupedLinearPath::kGeneric;
}

// gemm_fp8's kMma tile choice (gemm_fp8.cpp, fp8_gemm_config) restricted to tiles whose columns divide `out`:
// 16-row tiles stream W once per 16 rows at about 3 TB/s; a 64 x 128 CTA (one per SM) takes about 1.1 us per
// 128-column K block; the cheaper by that estimate runs.
GroupedLinearConfig grouped_linear_config(int64_t m, int64_t groups, int64_t in, int64_t out, int num_sms) {
    const int64_t n = groups * out, kb = ceil_div(in, 128), sms = std::max(num_sms, 1);
    const int64_t m_tiles = ceil_div(std::max<int64_t>(m, 1), 16);
    GroupedLinearConfig c;
    int decode_n = 0;
    for (int bn : {32, 16, 8}) {
        const GroupedLinearConfig tile{16, bn};
        if (out % bn || grouped_linear_mma_smem_bytes(tile, m, in) > kMaxStagedSmem || (bn == 32 && kb > 8)) continue;
        decode_n = bn;
        if (2 * ceil_div(n, bn) * m_tiles >= 3 * sms) break;
    }
    const double decode_us = double(m_tiles) * double(n) * double(in) / 3e6;
    const double tiles_us = 1.1 * double(ceil_div(ceil_div(m, 64) * ceil_div(n, 128), sms) * kb);
    if (out % 128 == 0 && (!decode_n || tiles_us < decode_us)) return {64, 128};
    c.block_n = decode_n;
    return c;
}

std::string grouped_linear_can_implement(const GroupedLinearParams& p, const GroupedLinearConfig& c) {
    if (!p.x || !p.w || !p.w_scale || !p.y) return "null operand pointer";
    if (p.m <= 0 || p.groups <= 0 || p.in <= 0 || p.out <= 0)
        return fmt::format("empty shape m={} groups={} in={} out={}", p.m, p.groups, p.in, p.out);
    if (p.in % 16 || p.out % 8)
        return fmt::format("mma path needs in % 16 == 0 and out % 8 == 0, got in={} out={}", p.in, p.out);
    if (!aligned16(p.x) || !aligned16(p.w)) return "x and W must be 16-byte aligned";
    if (!((c.block_m == 16 && (c.block_n == 8 || c.block_n == 16 || c.block_n == 32)) ||
          (c.block_m == 64 && c.block_n == 128)))
        return fmt::format("mma path has no {}x{} tile", c.block_m, c.block_n);
    if (p.out % c.block_n) return fmt::format("a {}-column tile would straddle groups of {}", c.block_n, p.out);
    if (ceil_div(p.groups * p.out, c.block_n) > 65535 || ceil_div(p.m, c.block_m) > int64_t{0x7FFFFFFF})
        return fmt::format("grid too large for M={} N={}", p.m, p.groups * p.out);
    if (grouped_linear_mma_smem_bytes(c, p.m, p.in) > kMaxStagedSmem)
        return fmt::format("in={} needs more staged shared memory than {} bytes with 16-row tiles", p.in,
                           kMaxStagedSmem);
    return {};
}

void grouped_linear(const GroupedLinearParams& p, cudaStream_t stream) {
    if (grouped_linear_path(p) == GroupedLinearPath::kGeneric) {
        DSV4_CHECK(p.x && p.w && p.w_scale && p.y, "grouped_linear: null operand pointer");
        DSV4_CHECK(p.m > 0 && p.m <= 65535 && p.groups > 0 && p.in > 0 && p.out > 0,
                   "grouped_linear: shape m={} groups={} in={} out={} (generic path: m in [1, 65535])", p.m, p.groups,
                   p.in, p.out);
        DSV4_CUDA_CHECK(launch_grouped_linear_generic(p, stream));
        return;
    }
    int device = 0, sms = 0;
    DSV4_CUDA_CHECK(cudaGetDevice(&device));
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const GroupedLinearConfig config = grouped_linear_config(p.m, p.groups, p.in, p.out, sms);
    if (std::string why = grouped_linear_can_implement(p, config); !why.empty()) fail("grouped_linear: {}", why);
    DSV4_CUDA_CHECK(launch_grouped_linear_mma(p, config, stream));
}

}  // namespace dsv4::cuda
