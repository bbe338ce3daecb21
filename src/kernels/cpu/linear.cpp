// Reference y = x W^T for any weight format: threaded over output rows; each thread decodes one weight row at a
// time into its own buffer and dots it with every token, accumulating in f32 in column order.
// Tested in tests/kernels/linear_test.cpp against a double-precision product.
#include "kernels/cpu/linear.h"

#include <vector>

#include "kernels/cpu/dequantize.h"

namespace dsv4::cpu {

void linear(ThreadPool& pool, const float* x, int64_t tokens, const QuantizedMatrix& w, float* y) {
    const int64_t rows = w.rows, cols = w.cols;
    pool.parallel_for(
        rows,
        [&](int64_t begin, int64_t end) {
            std::vector<float> weight_row(static_cast<size_t>(cols));  // [cols] f32, this thread's decode buffer
            for (int64_t n = begin; n < end; ++n) {
                dequantize_row(w, n, weight_row.data());
                for (int64_t t = 0; t < tokens; ++t) {
                    const float* xt = x + t * cols;
                    float acc = 0.0f;
                    for (int64_t k = 0; k < cols; ++k) acc += xt[k] * weight_row[size_t(k)];
                    y[t * rows + n] = acc;
                }
            }
        },
        /*min_chunk=*/8);
}

}  // namespace dsv4::cpu
