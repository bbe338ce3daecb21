// Python-compatible text forms of JSON values, as DeepSeek's reference encoder produces them:
// to_json = json.dumps(v, ensure_ascii=False) (", "/": " separators, floats as repr, NaN/Infinity bare, only
// control characters escaped) and py_str = str(v) for the scalar fields the encoder formats with "{}".
// Tested by tests/tokenizer/py_json_test.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace dsv4::tok {

using ordered_json = nlohmann::ordered_json;

std::string to_json(const ordered_json& value);
void append_json_string(std::string& out, const std::string& s);
// Python repr() of a float: shortest round-trip digits, fixed notation for 1e-4 <= |x| < 1e16 (".0" kept).
std::string py_float_repr(double x);
// str(v) for None/bool/int/float/str; throws dsv4::Error for arrays and objects (their Python repr is not
// reproduced: the encoder only meets them in malformed requests).
std::string py_str(const ordered_json& value, const char* what);

}  // namespace dsv4::tok
