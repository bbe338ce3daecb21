// Host-side contract checks of the RMSNorm launchers (rms_norm.h); the kernels are in rms_norm.cu.
#include "kernels/cuda/rms_norm/rms_norm.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4::cuda {

namespace {

void check(const RmsNormParams& p) {
    DSV4_CHECK(p.x && p.y, "rms_norm: null pointer");
    DSV4_CHECK(p.rows >= 0 && p.dim > 0, "rms_norm: bad shape [{}, {}]", p.rows, p.dim);
    DSV4_CHECK(p.x_stride >= p.dim && p.y_stride >= p.dim, "rms_norm: strides {} / {} smaller than dim {}", p.x_stride,
               p.y_stride, p.dim);
    DSV4_CHECK(static_cast<const void*>(p.x) != static_cast<const void*>(p.y) || p.x_stride == p.y_stride,
               "rms_norm: in place needs equal strides");
    DSV4_CHECK(!p.q == !p.q_scales, "rms_norm: a quantized output needs both its codes and its scales");
}

}  // namespace

void rms_norm(const RmsNormParams& p, cudaStream_t stream) {
    check(p);
    if (p.rows) detail::launch_rms_norms(std::span(&p, 1), stream);
}

void rms_norms(std::span<const RmsNormParams> norms, cudaStream_t stream) {
    DSV4_CHECK(!norms.empty() && norms.size() <= kMaxRmsNorms, "rms_norms: {} norms (1 to {} per launch)", norms.size(),
               kMaxRmsNorms);
    int64_t rows = 0;
    for (const RmsNormParams& p : norms) {
        check(p);
        rows = std::max(rows, p.rows);
    }
    if (rows) detail::launch_rms_norms(norms, stream);
}

void head_rms_norm(const HeadRmsNormParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.q, "head_rms_norm: null pointer");
    DSV4_CHECK(p.head_dim > 0, "head_rms_norm: head_dim {} is not positive", p.head_dim);
    DSV4_CHECK(p.rows >= 0 && p.heads > 0, "head_rms_norm: bad shape [{}, {}, {}]", p.rows, p.heads, p.head_dim);
    DSV4_CHECK(p.row_stride >= p.heads * p.head_dim, "head_rms_norm: row stride {} < heads * head_dim {}", p.row_stride,
               p.heads * p.head_dim);
    if (p.rows) detail::launch_head_rms_norm(p, stream);
}

}  // namespace dsv4::cuda
