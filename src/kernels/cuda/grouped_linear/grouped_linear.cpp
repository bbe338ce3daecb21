// grouped_linear launcher: path, tiles, contract checks, launch (see grouped_linear.h).
#include "kernels/cuda/grouped_linear/grouped_linear.h"

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/grouped_linear/grouped_linear_kernels.h"

namespace dsv4::cuda {
namespace {

bool aligned16(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

// The tensor-core kernel reads x and W in 16-byte chunks along each group's K and keeps a tile's columns in one
// group.
GroupedLinearPath grouped_linear_path(const GroupedLinearParams& p) {
    const bool mma = p.in % 16 == 0 && p.out % 8 == 0 && aligned16(p.x) && aligned16(p.w);
    return mma ? GroupedLinearPath::kMma : GroupedLinearPath::kGeneric;
}

bf16_act_mma::Tiles grouped_linear_tiles(int64_t m, int64_t groups, int64_t in, int64_t out, int num_sms) {
    // On sm_90 the 128 x 128 warpgroup tile joins the choice (same bits).
    return bf16_act_mma::choose_tiles(m, groups * out, in, out, 1, num_sms, device_has_wgmma());
}

std::string grouped_linear_can_implement(const GroupedLinearParams& p, const bf16_act_mma::Tiles& tiles) {
    if (!p.x || !p.w || !p.w_scale || !p.y) return "null operand pointer";
    if (p.m <= 0 || p.groups <= 0 || p.in <= 0 || p.out <= 0)
        return fmt::format("empty shape m={} groups={} in={} out={}", p.m, p.groups, p.in, p.out);
    if (p.out % 8) return fmt::format("mma path needs out % 8 == 0, got {}", p.out);
    if (!aligned16(p.x) || !aligned16(p.w)) return "x and W must be 16-byte aligned";
    return bf16_act_mma::tiles_can_run(tiles, p.m, p.groups * p.out, p.in, p.out, device_has_wgmma());
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
    const bf16_act_mma::Tiles tiles = grouped_linear_tiles(p.m, p.groups, p.in, p.out, multiprocessor_count());
    if (std::string why = grouped_linear_can_implement(p, tiles); !why.empty()) fail("grouped_linear: {}", why);
    DSV4_CUDA_CHECK(launch_grouped_linear_mma(p, tiles, stream));
}

}  // namespace dsv4::cuda
