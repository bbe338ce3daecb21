// grouped_linear launcher: heuristic, contract checks, launch (see grouped_linear.h).
#include "kernels/cuda/grouped_linear/grouped_linear.h"

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/grouped_linear/grouped_linear_kernels.h"

namespace dsv4::cuda {

// The skinny kernel reads W in 16-byte and x in 8-byte chunks along each group's K.
GroupedLinearPath grouped_linear_path(const GroupedLinearParams& p) {
    const bool chunked =
        p.in % 16 == 0 && reinterpret_cast<uintptr_t>(p.w) % 16 == 0 && reinterpret_cast<uintptr_t>(p.x) % 8 == 0;
    return chunked ? GroupedLinearPath::kSkinny : GroupedLinearPath::kGeneric;
}

Fp8GemmConfig grouped_linear_config(int64_t m, int64_t groups, int64_t in, int64_t out, int num_sms) {
    return fp8_gemm_config(m, groups * out, in, num_sms, Fp8GemmPath::kSkinny);
}

size_t grouped_linear_workspace_bytes(const Fp8GemmConfig& c, int64_t m, int64_t groups, int64_t out) {
    return c.splits > 1 ? size_t(c.splits) * m * groups * out * sizeof(float) : 0;
}

std::string grouped_linear_can_implement(const GroupedLinearParams& p, const Fp8GemmConfig& c) {
    if (!p.x || !p.w || !p.w_scale || !p.y) return "null operand pointer";
    if (p.m <= 0 || p.groups <= 0 || p.in <= 0 || p.out <= 0)
        return fmt::format("empty shape m={} groups={} in={} out={}", p.m, p.groups, p.in, p.out);
    if (p.in % 16) return fmt::format("in_per_group must be a multiple of 16, got {}", p.in);
    if (reinterpret_cast<uintptr_t>(p.w) % 16 || reinterpret_cast<uintptr_t>(p.x) % 8)
        return "W must be 16-byte and x 8-byte aligned";
    if (p.workspace_bytes < grouped_linear_workspace_bytes(c, p.m, p.groups, p.out))
        return fmt::format("workspace of {} bytes, needs {}", p.workspace_bytes,
                           grouped_linear_workspace_bytes(c, p.m, p.groups, p.out));
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
    const Fp8GemmConfig config = grouped_linear_config(p.m, p.groups, p.in, p.out, sms);
    if (std::string why = grouped_linear_can_implement(p, config); !why.empty()) fail("grouped_linear: {}", why);
    DSV4_CUDA_CHECK(launch_grouped_linear(p, config, static_cast<float*>(p.workspace), stream));
}

}  // namespace dsv4::cuda
