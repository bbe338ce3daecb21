// Reference decoders of every weight format (spec §11.3, §11.5): one logical row to f32.
// Tested in tests/kernels/dequantize_test.cpp against hand-encoded values.
#pragma once

#include <cstdint>

#include "core/quantized_matrix.h"

namespace dsv4::cpu {

// out[0..w.cols) = W[row, :] as f32.
void dequantize_row(const QuantizedMatrix& w, int64_t row, float* out);

}  // namespace dsv4::cpu
