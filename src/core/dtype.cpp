// Safetensors dtype names <-> DType.
#include "core/dtype.h"

#include <array>
#include <utility>

namespace dsv4 {
namespace {

struct DTypeInfo {
    DType type;
    std::string_view name;
    size_t size;
};

constexpr std::array<DTypeInfo, 12> kDTypes = {{
    {DType::kF64, "F64", 8},    {DType::kF32, "F32", 4},         {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},  {DType::kF8E4M3, "F8_E4M3", 1},  {DType::kF8E8M0, "F8_E8M0", 1},
    {DType::kI64, "I64", 8},    {DType::kI32, "I32", 4},         {DType::kI16, "I16", 2},
    {DType::kI8, "I8", 1},      {DType::kU8, "U8", 1},           {DType::kBool, "BOOL", 1},
}};

const DTypeInfo& info(DType t) {
    for (const auto& i : kDTypes)
        if (i.type == t) return i;
    return kDTypes[0];  // unreachable: every enumerator is in the table
}

}  // namespace

size_t dtype_size(DType t) { return info(t).size; }
std::string_view dtype_name(DType t) { return info(t).name; }

std::optional<DType> parse_dtype(std::string_view name) {
    for (const auto& i : kDTypes)
        if (i.name == name) return i.type;
    return std::nullopt;
}

}  // namespace dsv4
