// The safetensors reader and writer: round trips through a real file, and one hand-made broken file per class of
// error the reader promises to catch, each checked to name the file and, where there is one, the tensor.
#include <gtest/gtest.h>

#include <cstring>

#include "io/safetensors.h"
#include "io_test_util.h"

namespace dsv4 {
namespace {

using test::expect_error;
using test::raw_safetensors;
using test::TempDir;

TEST(SafetensorsWriter, RoundTripsThroughTheReader) {
    TempDir dir;
    std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
    std::vector<uint16_t> b = {0x3F80, 0xC000, 0x4040};
    std::vector<int64_t> c = {5, -1};
    uint8_t scalar = 0x7F;
    write_safetensors(dir.file("t.safetensors"),
                      {{"a", DType::kF32, {2, 3}, a.data(), a.size() * 4},
                       {"b", DType::kBF16, {3}, b.data(), b.size() * 2},
                       {"empty", DType::kF32, {0, 4}, nullptr, 0},
                       {"c", DType::kI64, {1, 2}, c.data(), c.size() * 8},
                       {"s", DType::kF8E8M0, {}, &scalar, 1}},
                      {{"format", "pt"}});
    auto f = SafetensorsFile::open(dir.file("t.safetensors"));
    ASSERT_EQ(f->tensors().size(), 5u);  // sorted by name: a, b, c, empty, s
    EXPECT_EQ(f->metadata().at("format"), "pt");
    const TensorRef& ta = f->tensors()[0];
    EXPECT_EQ(ta.name, "a");
    EXPECT_EQ(ta.dtype, DType::kF32);
    EXPECT_EQ(ta.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(ta.file, dir.file("t.safetensors"));
    ASSERT_EQ(ta.nbytes, 24u);
    EXPECT_EQ(std::memcmp(ta.data, a.data(), 24), 0);
    // The header is padded so the data region starts 8-byte aligned in the file.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ta.data) % 8, 0u);
    EXPECT_EQ(std::memcmp(f->tensors()[1].data, b.data(), 6), 0);
    EXPECT_EQ(std::memcmp(f->tensors()[2].data, c.data(), 16), 0);
    EXPECT_EQ(f->tensors()[3].nbytes, 0u);
    EXPECT_EQ(f->tensors()[4].shape.size(), 0u);
    EXPECT_EQ(f->tensors()[4].nbytes, 1u);
    EXPECT_EQ(std::to_integer<uint8_t>(*f->tensors()[4].data), 0x7F);
}

TEST(SafetensorsWriter, RejectsInconsistentTensors) {
    std::vector<float> a(4);
    expect_error([&] { serialize_safetensors({{"a", DType::kF32, {2, 3}, a.data(), 16}}); }, {"'a'", "16 bytes"});
    expect_error(
        [&] {
            serialize_safetensors({{"a", DType::kF32, {4}, a.data(), 16}, {"a", DType::kF32, {4}, a.data(), 16}});
        },
        {"'a'", "repeated"});
    expect_error([&] { serialize_safetensors({{"bad\xff", DType::kF32, {4}, a.data(), 16}}); }, {"cannot encode"});
    expect_error([&] { serialize_safetensors({{"a", DType::kF32, {-1}, a.data(), 16}}); }, {"'a'", "negative"});
}

// A header with one tensor "w" F32 [2] at [0, 8), over 8 data bytes; tests break one part at a time.
const std::string kData(8, '\0');

void expect_bad(const std::string& image, std::initializer_list<std::string> words) {
    TempDir dir;
    std::string path = dir.write("bad.safetensors", image);
    std::vector<std::string> all = {"bad.safetensors"};
    all.insert(all.end(), words.begin(), words.end());
    try {
        SafetensorsFile::open(path);
        ADD_FAILURE() << "accepted a broken file; expected an error mentioning " << *words.begin();
    } catch (const Error& e) {
        std::string msg = e.what();
        for (const auto& w : all) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
    }
    // The in-memory parser must agree with the file reader.
    expect_error([&] { parse_safetensors(reinterpret_cast<const std::byte*>(image.data()), image.size(), "mem"); },
                 {"mem"});
}

TEST(SafetensorsReader, AcceptsTheBaseCase) {
    std::string image = raw_safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", kData);
    auto h = parse_safetensors(reinterpret_cast<const std::byte*>(image.data()), image.size(), "mem");
    ASSERT_EQ(h.tensors.size(), 1u);
    EXPECT_EQ(h.tensors[0].nbytes, 8u);
}

TEST(SafetensorsReader, RejectsTruncatedAndOversizedHeaders) {
    expect_bad("abc", {"shorter than the 8-byte header"});
    std::string image = raw_safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", kData);
    image[0] = char(0xFF);  // header length now far beyond the file
    expect_bad(image, {"runs past the end of the file"});
    std::string huge(8, char(0xFF));
    expect_bad(huge + "{}", {"runs past the end of the file"});
    expect_bad(raw_safetensors("", ""), {"too short"});
}

TEST(SafetensorsReader, RejectsMalformedJson) {
    expect_bad(raw_safetensors(R"({"w":{"dtype":"F32",)", kData), {"not valid JSON"});
    expect_bad(raw_safetensors(R"([1, 2])", kData), {"expected an object"});
    expect_bad(raw_safetensors(R"({"w":[[[[[[[[[[[[1]]]]]]]]]]]})"), {"nested deeper"});
    expect_bad(raw_safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                               kData),
               {"'w'", "twice"});
}

TEST(SafetensorsReader, RejectsBadEntries) {
    expect_bad(raw_safetensors(R"({"w":[1,2]})", kData), {"'w'", "expected an object"});
    expect_bad(raw_safetensors(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", kData), {"'w'", "no 'dtype'"});
    expect_bad(raw_safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", kData),
               {"'w'", "unknown header field 'x'"});
    expect_bad(raw_safetensors(R"({"w":{"dtype":"F4","shape":[2],"data_offsets":[0,8]}})", kData),
               {"'w'", "unsupported dtype 'F4'"});
    expect_bad(raw_safetensors(R"({"w":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", kData),
               {"'w'", "dtype is a JSON number"});
}

TEST(SafetensorsReader, RejectsBadShapes) {
    expect_bad(raw_safetensors(R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", kData),
               {"'w'", "shape is a JSON number"});
    expect_bad(raw_safetensors(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", kData),
               {"'w'", "not a non-negative integer"});
    expect_bad(raw_safetensors(R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", kData),
               {"'w'", "not a non-negative integer"});
    expect_bad(raw_safetensors(R"({"w":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", kData),
               {"'w'", "not a non-negative integer"});
    expect_bad(raw_safetensors(
                   R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})", kData),
               {"'w'", "overflows"});
}

TEST(SafetensorsReader, RejectsBadOffsets) {
    expect_bad(raw_safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", kData),
               {"'w'", "[begin, end]"});
    expect_bad(raw_safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", kData),
               {"'w'", "begin <= end"});
    expect_bad(raw_safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", kData),
               {"'w'", "begin <= end"});
    expect_bad(raw_safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", kData),
               {"'w'", "run past the data region"});
    expect_bad(raw_safetensors(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", kData),
               {"'w'", "span 8 bytes", "needs 12"});
    expect_bad(raw_safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("v":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                               kData),
               {"'v'", "overlaps tensor 'w'"});
}

TEST(SafetensorsReader, RejectsBadMetadata) {
    const std::string w = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
    expect_bad(raw_safetensors("{" + w + R"(,"__metadata__":{"format":1}})", kData),
               {"__metadata__ entry 'format'", "expected a string"});
    expect_bad(raw_safetensors("{" + w + R"(,"__metadata__":["pt"]})", kData), {"__metadata__", "expected an object"});
}

TEST(SafetensorsReader, RejectsFilesThatAreNotThere) {
    TempDir dir;
    expect_error([&] { SafetensorsFile::open(dir.file("none.safetensors")); }, {"none.safetensors", "cannot open"});
    expect_error([&] { SafetensorsFile::open(dir.path()); }, {dir.path(), "not a regular file"});
}

}  // namespace
}  // namespace dsv4
