// Small-tensor decoders: see tensor_decode.h.
#include "io/tensor_decode.h"

#include <cstring>

#include "core/error.h"
#include "core/number_formats.h"

namespace dsv4 {
namespace {

template <typename T>
T load(const std::byte* p, int64_t i) {
    T v;
    std::memcpy(&v, p + size_t(i) * sizeof(T), sizeof(T));
    return v;
}

}  // namespace

std::vector<float> decode_f32(const TensorRef& t) {
    const int64_t n = t.numel();
    DSV4_ASSERT(t.nbytes == size_t(n) * dtype_size(t.dtype), "tensor {} byte count does not match its shape", t.name);
    std::vector<float> out(static_cast<size_t>(n));
    switch (t.dtype) {
        case DType::kF32:
            if (n) std::memcpy(out.data(), t.data, size_t(n) * sizeof(float));
            break;
        case DType::kBF16:
            for (int64_t i = 0; i < n; ++i) out[size_t(i)] = bf16_to_f32(load<uint16_t>(t.data, i));
            break;
        case DType::kF16:
            for (int64_t i = 0; i < n; ++i) out[size_t(i)] = f16_to_f32(load<uint16_t>(t.data, i));
            break;
        default:
            fail("{}: tensor '{}' has dtype {}, expected F32, BF16 or F16", t.file, t.name, dtype_name(t.dtype));
    }
    return out;
}

float decode_scalar_f32(const TensorRef& t) {
    DSV4_CHECK(t.numel() == 1 && t.shape.size() <= 1, "{}: tensor '{}' has shape {}, expected a scalar ([] or [1])",
               t.file, t.name, t.shape_string());
    return decode_f32(t)[0];
}

std::vector<int32_t> decode_index_i32(const TensorRef& t, int64_t lo, int64_t hi) {
    const int64_t n = t.numel();
    DSV4_ASSERT(t.nbytes == size_t(n) * dtype_size(t.dtype), "tensor {} byte count does not match its shape", t.name);
    DSV4_CHECK(t.dtype == DType::kI64 || t.dtype == DType::kI32, "{}: tensor '{}' has dtype {}, expected I64 or I32",
               t.file, t.name, dtype_name(t.dtype));
    std::vector<int32_t> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        int64_t v = t.dtype == DType::kI64 ? load<int64_t>(t.data, i) : load<int32_t>(t.data, i);
        DSV4_CHECK(v >= lo && v < hi, "{}: tensor '{}': element {} is {}, outside [{}, {})", t.file, t.name, i, v, lo,
                   hi);
        out[size_t(i)] = int32_t(v);
    }
    return out;
}

}  // namespace dsv4
