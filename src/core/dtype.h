// Element types of checkpoint tensors, named as safetensors names them. Tested in tests/core/dtype_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv4 {

enum class DType : uint8_t {
    kF64, kF32, kF16, kBF16,
    kF8E4M3,  // "F8_E4M3": FP8 E4M3FN (no infinities; 0x7F/0xFF are NaN)
    kF8E8M0,  // "F8_E8M0": unsigned power-of-two scale 2^(e-127); 0xFF is NaN
    kI64, kI32, kI16, kI8, kU8, kBool,
};

// Bytes per element (every supported type is whole bytes; packed FP4 is stored as I8/U8 pairs).
size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view safetensors_name);

}  // namespace dsv4
