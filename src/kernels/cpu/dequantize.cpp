// Reference decoders of every weight format (spec §11.3, §11.5). Scale lookups use the block sizes carried by
// the QuantizedMatrix, so a grid of ceil(rows/128) x ceil(cols/128) scales covers odd shapes.
// Tested in tests/kernels/dequantize_test.cpp.
#include "kernels/cpu/dequantize.h"

#include <cstring>

#include "core/error.h"
#include "core/number_formats.h"

namespace dsv4::cpu {
namespace {

uint16_t load_u16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, sizeof v);  // little-endian, as safetensors stores it
    return v;
}

float load_f32(const uint8_t* p) {
    float v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// The scale of block (row / block_rows, col / block_cols), decoded to f32.
float block_scale(const QuantizedMatrix& w, int64_t row, int64_t col) {
    int64_t index = (row / w.block_rows) * w.scale_cols + col / w.block_cols;
    switch (w.scale_dtype) {
        case DType::kF8E8M0:
            return e8m0_to_f32(w.scale[index]);
        case DType::kF8E4M3:
            return e4m3_to_f32(w.scale[index]);
        case DType::kF32:
            return load_f32(w.scale + 4 * index);
        default:
            DSV4_ASSERT(false, "{}: unsupported scale dtype {}", w.name, dtype_name(w.scale_dtype));
    }
    return 0.0f;
}

// Logical element `col` of a row packed two E2M1 values per byte: even columns in the low nibble.
uint8_t fp4_nibble(const uint8_t* packed_row, int64_t col) {
    uint8_t byte = packed_row[col / 2];
    return (col % 2 == 0) ? uint8_t(byte & 0x0F) : uint8_t(byte >> 4);
}

}  // namespace

void dequantize_row(const QuantizedMatrix& w, int64_t row, float* out) {
    DSV4_ASSERT(row >= 0 && row < w.rows, "{}: row {} out of [0, {})", w.name, row, w.rows);
    const int64_t cols = w.cols;
    switch (w.format) {
        case WeightFormat::kF32: {
            std::memcpy(out, w.data + 4 * row * cols, size_t(4 * cols));
            return;
        }
        case WeightFormat::kBF16: {
            const uint8_t* p = w.data + 2 * row * cols;
            for (int64_t c = 0; c < cols; ++c) out[c] = bf16_to_f32(load_u16(p + 2 * c));
            return;
        }
        case WeightFormat::kF16: {
            const uint8_t* p = w.data + 2 * row * cols;
            for (int64_t c = 0; c < cols; ++c) out[c] = f16_to_f32(load_u16(p + 2 * c));
            return;
        }
        case WeightFormat::kFp8Block: {
            // W[n, k] = e4m3(w[n, k]) * scale[n / 128, k / 128]
            const uint8_t* p = w.data + row * cols;
            for (int64_t c = 0; c < cols; ++c) out[c] = e4m3_to_f32(p[c]) * block_scale(w, row, c);
            return;
        }
        case WeightFormat::kFp4Mx: {
            // W[n, k] = e2m1(nibble) * 2^(e[n, k / 32] - 127)
            DSV4_ASSERT(cols % 2 == 0, "{}: packed FP4 needs an even column count, got {}", w.name, cols);
            const uint8_t* p = w.data + row * (cols / 2);
            for (int64_t c = 0; c < cols; ++c) out[c] = e2m1_to_f32(fp4_nibble(p, c)) * block_scale(w, row, c);
            return;
        }
        case WeightFormat::kNvfp4: {
            // W[n, k] = e2m1(nibble) * e4m3(scale[n, k / 16]) * global_scale; the first product is exact.
            DSV4_ASSERT(cols % 2 == 0, "{}: packed FP4 needs an even column count, got {}", w.name, cols);
            const uint8_t* p = w.data + row * (cols / 2);
            for (int64_t c = 0; c < cols; ++c)
                out[c] = e2m1_to_f32(fp4_nibble(p, c)) * block_scale(w, row, c) * w.global_scale;
            return;
        }
    }
    DSV4_ASSERT(false, "{}: unknown weight format", w.name);
}

}  // namespace dsv4::cpu
