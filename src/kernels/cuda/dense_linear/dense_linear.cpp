// Host-side contract of dense_linear (see dense_linear.h); kernel in dense_linear.cu.
#include "kernels/cuda/dense_linear/dense_linear.h"

#include "core/error.h"

namespace dsv4::cuda {

void dense_linear(const DenseLinearParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.m >= 0 && p.n > 0 && p.k > 0 && p.ldx >= p.k && p.ldw >= p.k && p.ldy >= p.n,
               "dense_linear: m {} n {} k {} ldx {} ldw {} ldy {}", p.m, p.n, p.k, p.ldx, p.ldw, p.ldy);
    if (p.m == 0) return;
    DSV4_CHECK(p.x && p.w && p.y, "dense_linear: null operand");
    DSV4_CHECK(p.m <= int64_t(65535) * 8, "dense_linear: m {} exceeds the grid", p.m);
    detail::launch_dense_linear(p, stream);
}

}  // namespace dsv4::cuda
