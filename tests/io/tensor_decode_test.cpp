// Small-tensor decoders: F32/BF16/F16 to f32 with hand-picked bit patterns (unaligned source included),
// scalars, and index tables with range checks.
#include <gtest/gtest.h>

#include <cstring>

#include "io/tensor_decode.h"
#include "io_test_util.h"

namespace dsv4 {
namespace {

TensorRef ref(DType dtype, std::vector<int64_t> shape, const std::string& bytes) {
    TensorRef t;
    t.name = "t";
    t.file = "f.safetensors";
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.data = reinterpret_cast<const std::byte*>(bytes.data());
    t.nbytes = bytes.size();
    return t;
}

TEST(TensorDecode, DecodesFloatFormats) {
    // One byte of offset: decoders must not assume aligned data.
    std::string bf = std::string("\x00\x80\x3F\x00\xC0", 5);  // [pad] 0x3F80 = 1.0, 0xC000 = -2.0 (little endian)
    EXPECT_EQ(decode_f32(ref(DType::kBF16, {2}, bf.substr(1))), (std::vector<float>{1.0f, -2.0f}));
    std::string h("\x00\x3C\x00\xC4", 4);  // f16 1.0, -4.0
    EXPECT_EQ(decode_f32(ref(DType::kF16, {2}, h)), (std::vector<float>{1.0f, -4.0f}));
    float f[2] = {0.5f, -7.25f};
    std::string fs(reinterpret_cast<const char*>(f), 8);
    EXPECT_EQ(decode_f32(ref(DType::kF32, {1, 2}, fs)), (std::vector<float>{0.5f, -7.25f}));
    EXPECT_EQ(decode_scalar_f32(ref(DType::kF32, {}, fs.substr(4))), -7.25f);
    EXPECT_TRUE(decode_f32(ref(DType::kF32, {0}, "")).empty());
}

TEST(TensorDecode, RejectsOtherDtypesAndNonScalars) {
    test::expect_error([] { decode_f32(ref(DType::kI32, {1}, std::string(4, '\0'))); },
                       {"f.safetensors", "'t'", "I32"});
    test::expect_error([] { decode_scalar_f32(ref(DType::kF32, {2}, std::string(8, '\0'))); },
                       {"f.safetensors", "'t'", "scalar"});
}

TEST(TensorDecode, DecodesIndicesWithRangeChecks) {
    int64_t a[3] = {0, 5, 2};
    std::string as(reinterpret_cast<const char*>(a), 24);
    EXPECT_EQ(decode_index_i32(ref(DType::kI64, {3}, as), 0, 6), (std::vector<int32_t>{0, 5, 2}));
    test::expect_error([&] { decode_index_i32(ref(DType::kI64, {3}, as), 0, 5); }, {"'t'", "element 1 is 5"});
    int32_t b[2] = {-1, 1};
    std::string bs(reinterpret_cast<const char*>(b), 8);
    test::expect_error([&] { decode_index_i32(ref(DType::kI32, {2}, bs), 0, 5); }, {"'t'", "element 0 is -1"});
    test::expect_error([&] { decode_index_i32(ref(DType::kU8, {8}, bs), 0, 5); }, {"'t'", "I64 or I32"});
}

}  // namespace
}  // namespace dsv4
