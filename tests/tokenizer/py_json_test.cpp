// Python-compatible JSON text (json.dumps(ensure_ascii=False)) and float repr; expected strings were printed
// by CPython 3.11.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/py_json.h"

namespace dsv4::tok {
namespace {

TEST(PyJson, FloatReprMatchesPython) {
    const std::pair<double, const char*> cases[] = {
        {100.0, "100.0"}, {1.5, "1.5"}, {1e16, "1e+16"}, {1e15, "1000000000000000.0"}, {1e-5, "1e-05"},
        {0.0001, "0.0001"}, {1.23e-7, "1.23e-07"}, {1e100, "1e+100"}, {-0.0, "-0.0"}, {0.1, "0.1"},
        {5e-324, "5e-324"}, {1.7976931348623157e308, "1.7976931348623157e+308"}, {123456789.123, "123456789.123"},
        {-2.5e-10, "-2.5e-10"}, {9999999999999998.0, "9999999999999998.0"},
        {1234567890123456.7, "1234567890123456.8"}, {0.30000000000000004, "0.30000000000000004"}};
    for (const auto& [x, want] : cases) EXPECT_EQ(py_float_repr(x), want);
    EXPECT_EQ(py_float_repr(std::numeric_limits<double>::infinity()), "Infinity");
    EXPECT_EQ(py_float_repr(std::nan("")), "NaN");
}

TEST(PyJson, DumpsLikePython) {
    const auto v = ordered_json::parse(
        R"({"a": "\u0000\u001f\u007f\u2028/\\\"é😀\b\f\n\r\t", "b": [1, 2.5, null, true, false], "c": {}})");
    EXPECT_EQ(to_json(v), "{\"a\": \"\\u0000\\u001f\x7f\xE2\x80\xA8/\\\\\\\"é😀\\b\\f\\n\\r\\t\", "
                          "\"b\": [1, 2.5, null, true, false], \"c\": {}}");
    EXPECT_EQ(to_json(ordered_json::parse("[12345678901234567890, -0, 1e2, -0.0]")),
              "[12345678901234567890, 0, 100.0, -0.0]");
    // Duplicate keys: first position, last value (Python dict semantics).
    EXPECT_EQ(to_json(ordered_json::parse(R"({"x": 1, "y": 2, "x": 3})")), "{\"x\": 3, \"y\": 2}");
}

TEST(PyJson, StrOfScalars) {
    EXPECT_EQ(py_str(ordered_json(nullptr), "v"), "None");
    EXPECT_EQ(py_str(ordered_json(true), "v"), "True");
    EXPECT_EQ(py_str(ordered_json(42), "v"), "42");
    EXPECT_EQ(py_str(ordered_json(2.0), "v"), "2.0");
    EXPECT_EQ(py_str(ordered_json("s"), "v"), "s");
    EXPECT_THROW(py_str(ordered_json::array({1}), "v"), Error);
}

}  // namespace
}  // namespace dsv4::tok
