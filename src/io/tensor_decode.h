// Decoding small checkpoint tensors into host vectors: norms, biases, ape, sinks and hc_* parameters to f32
// (from F32, BF16 or F16), index tables to int32 (from I64 or I32), scalars. Reads through memcpy, so tensors
// need no particular alignment in the file. Tested in tests/io/tensor_decode_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "io/tensor_ref.h"

namespace dsv4 {

// Any F32/BF16/F16 tensor, flattened, as f32. Other dtypes are a dsv4::Error naming the tensor and file.
std::vector<float> decode_f32(const TensorRef& t);

// A one-element F32/BF16/F16 tensor (shape [] or [1]) as f32.
float decode_scalar_f32(const TensorRef& t);

// Any I64/I32 tensor, flattened, as int32; values outside [lo, hi) are a dsv4::Error naming the tensor, the
// element and the value.
std::vector<int32_t> decode_index_i32(const TensorRef& t, int64_t lo, int64_t hi);

}  // namespace dsv4
