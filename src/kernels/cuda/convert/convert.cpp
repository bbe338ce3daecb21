// Host-side contract of the conversion launchers (see convert.h); kernels in convert.cu.
#include "kernels/cuda/convert/convert.h"

#include "core/error.h"

namespace dsv4::cuda {

void bf16_to_f32(const Bf16ToF32Params& p, cudaStream_t stream) {
    DSV4_CHECK(p.rows >= 0 && p.cols >= 0 && p.x_stride >= p.cols, "bf16_to_f32: rows {} cols {} stride {}", p.rows,
               p.cols, p.x_stride);
    if (p.rows == 0 || p.cols == 0) return;
    DSV4_CHECK(p.x && p.y, "bf16_to_f32: null pointer");
    detail::launch_bf16_to_f32(p, stream);
}

void f32_to_bf16(const F32ToBf16Params& p, cudaStream_t stream) {
    DSV4_CHECK(p.rows >= 0 && p.cols >= 0 && p.x_stride >= p.cols && p.y_stride >= p.cols,
               "f32_to_bf16: rows {} cols {} strides {} {}", p.rows, p.cols, p.x_stride, p.y_stride);
    if (p.rows == 0 || p.cols == 0) return;
    DSV4_CHECK(p.x && p.y, "f32_to_bf16: null pointer");
    detail::launch_f32_to_bf16(p, stream);
}

void fill_f32(float* x, int64_t n, float value, cudaStream_t stream) {
    DSV4_CHECK(n >= 0 && (n == 0 || x), "fill_f32: n {} or null pointer", n);
    if (n) detail::launch_fill_f32(x, n, value, stream);
}

void gather_rows_bf16(const GatherRowsParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.count >= 0 && p.cols >= 0, "gather_rows_bf16: count {} cols {}", p.count, p.cols);
    if (p.count == 0 || p.cols == 0) return;
    DSV4_CHECK(p.x && p.rows && p.y, "gather_rows_bf16: null pointer");
    detail::launch_gather_rows_bf16(p, stream);
}

}  // namespace dsv4::cuda
