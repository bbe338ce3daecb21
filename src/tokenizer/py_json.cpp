// json.dumps / repr / str of Python, for the values the DeepSeek-V4 encoder serializes.
#include "tokenizer/py_json.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace dsv4::tok {

std::string py_float_repr(double x) {
    if (std::isnan(x)) return "NaN";
    if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
    char buf[64];
    // Shortest round-trip digits in scientific form "d.ddde±XX", then laid out the way repr does.
    auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    const size_t e = sci.find('e');
    std::string mant = sci.substr(0, e);
    const int exp = std::atoi(sci.c_str() + e + 1);
    std::string sign;
    if (mant[0] == '-') {
        sign = "-";
        mant.erase(0, 1);
    }
    std::string digits;
    for (char c : mant)
        if (c != '.') digits.push_back(c);
    if (exp >= -4 && exp < 16) {
        std::string out;
        if (exp < 0) {
            out = "0." + std::string(-exp - 1, '0') + digits;
        } else if (static_cast<int>(digits.size()) <= exp + 1) {
            out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
        } else {
            out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
        }
        return sign + out;
    }
    std::string out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const std::string e_digits = std::to_string(std::abs(exp));  // |exp| <= 324
    return sign + out + (exp < 0 ? "e-" : "e+") + (e_digits.size() < 2 ? "0" : "") + e_digits;
}

void append_json_string(std::string& out, const std::string& s) {
    out.push_back('"');
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out.push_back(static_cast<char>(c));
                }
        }
    }
    out.push_back('"');
}

namespace {

void dump(std::string& out, const ordered_json& v) {
    switch (v.type()) {
        case ordered_json::value_t::null: out += "null"; break;
        case ordered_json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
        case ordered_json::value_t::number_integer: out += std::to_string(v.get<int64_t>()); break;
        case ordered_json::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); break;
        case ordered_json::value_t::number_float: out += py_float_repr(v.get<double>()); break;
        case ordered_json::value_t::string: append_json_string(out, v.get_ref<const std::string&>()); break;
        case ordered_json::value_t::array: {
            out.push_back('[');
            bool first = true;
            for (const auto& e : v) {
                if (!first) out += ", ";
                first = false;
                dump(out, e);
            }
            out.push_back(']');
            break;
        }
        case ordered_json::value_t::object: {
            out.push_back('{');
            bool first = true;
            for (const auto& [k, e] : v.items()) {
                if (!first) out += ", ";
                first = false;
                append_json_string(out, k);
                out += ": ";
                dump(out, e);
            }
            out.push_back('}');
            break;
        }
        default: fail("cannot serialize a binary or discarded JSON value");
    }
}

}  // namespace

std::string to_json(const ordered_json& value) {
    std::string out;
    dump(out, value);
    return out;
}

std::string py_str(const ordered_json& v, const char* what) {
    switch (v.type()) {
        case ordered_json::value_t::null: return "None";
        case ordered_json::value_t::boolean: return v.get<bool>() ? "True" : "False";
        case ordered_json::value_t::string: return v.get<std::string>();
        case ordered_json::value_t::number_float: {
            const std::string r = py_float_repr(v.get<double>());
            return r == "NaN" ? "nan" : r == "Infinity" ? "inf" : r == "-Infinity" ? "-inf" : r;
        }
        case ordered_json::value_t::number_integer:
        case ordered_json::value_t::number_unsigned: return to_json(v);
        default: fail("{} must be a string (got {})", what, v.type_name());
    }
}

}  // namespace dsv4::tok
