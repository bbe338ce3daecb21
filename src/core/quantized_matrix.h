// QuantizedMatrix: a read-only view of a 2-D weight [rows = out_features, cols = in_features] in one of the
// checkpoint formats of spec §11.3/§11.5, as stored (never expanded in memory). Decoders live in
// kernels/cpu/dequantize.h (reference) and kernels/cuda (GPU).
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace dsv4 {

enum class WeightFormat : uint8_t {
    kF32,       // data: f32 [rows, cols]
    kBF16,      // data: bf16 [rows, cols]
    kF16,       // data: f16 [rows, cols]
    kFp8Block,  // data: e4m3 [rows, cols]; scale [ceil(rows/128), ceil(cols/128)] E8M0 or F32 (Base checkpoints)
    kFp4Mx,     // data: packed e2m1 [rows, cols/2], low nibble = even column; scale E8M0 [rows, cols/32]
    kNvfp4,     // data: packed e2m1 [rows, cols/2], low nibble first; scale E4M3 [rows, cols/16]; x global_scale
};

const char* weight_format_name(WeightFormat f);

struct QuantizedMatrix {
    std::string name;  // native tensor name of the weight, for messages
    WeightFormat format = WeightFormat::kF32;
    int64_t rows = 0;
    int64_t cols = 0;
    const uint8_t* data = nullptr;
    const uint8_t* scale = nullptr;
    DType scale_dtype = DType::kF8E8M0;
    int64_t scale_cols = 0;        // elements per row of the scale tensor
    int64_t block_rows = 1;        // rows covered by one scale (128 for kFp8Block, else 1)
    int64_t block_cols = 1;        // cols covered by one scale (128, 32 or 16)
    float global_scale = 1.0f;     // NVFP4 weight_scale_2
    float input_scale = 0.0f;      // NVFP4 static activation scale (unused by the reference numerics)

    bool empty() const { return data == nullptr; }
    // True for the formats the official reference feeds with FP8-quantized activations (spec §3).
    bool is_low_precision() const {
        return format == WeightFormat::kFp8Block || format == WeightFormat::kFp4Mx || format == WeightFormat::kNvfp4;
    }
};

}  // namespace dsv4
