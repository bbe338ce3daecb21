// The meaning of structured/json_schema.h's subset, written over parsed values (nlohmann::json) for the tests to judge
// what the cursors accept. `root` resolves "$ref" ("#", "#/$defs/...", "#/definitions/...").
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace dsv4::testing {

inline bool validates(const nlohmann::json& v, const nlohmann::json& s, const nlohmann::json& root) {
    using nlohmann::json;
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref")) {
        const std::string ref = s.at("$ref");
        if (ref == "#") return validates(v, root, root);
        const std::string container = ref.starts_with("#/$defs/") ? "$defs" : "definitions";
        return validates(v, root.at(container).at(ref.substr(container.size() + 3)), root);
    }
    if (s.contains("allOf")) {
        for (const json& b : s.at("allOf"))
            if (!validates(v, b, root)) return false;
        return true;
    }
    for (const char* any : {"anyOf", "oneOf"})
        if (s.contains(any)) {
            for (const json& b : s.at(any))
                if (validates(v, b, root)) return true;
            return false;
        }
    if (s.contains("enum") || s.contains("const")) {
        const json values = s.contains("const") ? json::array({s.at("const")}) : s.at("enum");
        for (const json& e : values)
            if (e == v && e.type() == v.type()) return true;
        return false;
    }
    if (s.contains("type")) {
        const json types = s.at("type").is_array() ? s.at("type") : json::array({s.at("type")});
        bool ok = false;
        for (const json& t : types)
            ok = ok || (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
                 (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
                 (t == "integer" && v.is_number_integer()) || (t == "boolean" && v.is_boolean()) ||
                 (t == "null" && v.is_null());
        if (s.value("nullable", false)) ok = ok || v.is_null();
        if (!ok) return false;
    }
    if (v.is_object()) {
        for (const auto& [k, x] : v.items()) {
            const json* sub =
                s.contains("properties") && s.at("properties").contains(k) ? &s.at("properties").at(k) : nullptr;
            const json extra = s.value("additionalProperties", json(true));
            if (!validates(x, sub ? *sub : extra, root)) return false;
        }
        for (const json& r : s.value("required", json::array()))
            if (!v.contains(r.get<std::string>())) return false;
    }
    if (v.is_array()) {
        if (int(v.size()) < s.value("minItems", 0) || int(v.size()) > s.value("maxItems", 1 << 30)) return false;
        for (const json& x : v)
            if (!validates(x, s.value("items", json(true)), root)) return false;
    }
    if (v.is_string()) {
        int chars = 0;
        for (const char c : v.get<std::string>()) chars += (uint8_t(c) & 0xC0) != 0x80;
        if (chars < s.value("minLength", 0) || chars > s.value("maxLength", 1 << 30)) return false;
    }
    return true;
}

}  // namespace dsv4::testing
