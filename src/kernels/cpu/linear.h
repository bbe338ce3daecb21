// Reference matrix product y = x W^T for a weight in any checkpoint format: each weight row is decoded once
// and dotted with every token in f32 (threaded over output rows). Activation quantization and output rounding
// are the caller's (model numerics), so this computes exactly sum_k x[t,k] * W[n,k] in f32.
#pragma once

#include <cstdint>

#include "core/quantized_matrix.h"
#include "core/thread_pool.h"

namespace dsv4::cpu {

// x: [tokens, w.cols] f32 row-major; y: [tokens, w.rows] f32 row-major.
void linear(ThreadPool& pool, const float* x, int64_t tokens, const QuantizedMatrix& w, float* y);

}  // namespace dsv4::cpu
