// The typed reading of a request's JSON fields, shared by the files that parse the OpenAI-compatible requests
// (openai_protocol.cpp, request_options.cpp, chat_request.cpp): every mistake becomes a 400 that names the field.
// The server's interface is openai_protocol.h; this header is the parsers' own. Tested through
// tests/server/openai_protocol_test.cpp.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "server/openai_protocol.h"

namespace dsv4::server {

// What a JSON value is, for an error message: "null", "true", "a string", "an array", "an object", or the number.
std::string describe(const ordered_json& v);

// The fields of one JSON object, each read as the type it must have. A JSON null is the field left out: clients
// send explicit nulls for what they do not set. `prefix` makes nested params ("stream_options.include_usage").
class Fields {
  public:
    Fields(const ordered_json& object, std::string prefix = {}) : object_(object), prefix_(std::move(prefix)) {}

    std::string param(std::string_view key) const { return prefix_ + std::string(key); }

    const ordered_json* get(const char* key) const {
        const auto it = object_.find(key);
        return it == object_.end() || it->is_null() ? nullptr : &*it;
    }

    [[noreturn]] void wrong(const char* key, std::string_view what) const {
        bad_request(param(key), fmt::format("'{}' must be {}, got {}", param(key), what, describe(*get(key))));
    }

    std::optional<bool> boolean(const char* key) const {
        const ordered_json* v = get(key);
        if (!v) return std::nullopt;
        if (!v->is_boolean()) wrong(key, "a boolean");
        return v->get<bool>();
    }

    std::optional<double> number(const char* key) const {
        const ordered_json* v = get(key);
        if (!v) return std::nullopt;
        if (!v->is_number()) wrong(key, "a number");
        return v->get<double>();
    }

    // An integer; 100.0 counts (some clients write every number as a float), 1.5 does not. Values beyond int64
    // saturate, so range checks still say "too large".
    std::optional<int64_t> integer(const char* key) const {
        const ordered_json* v = get(key);
        if (!v) return std::nullopt;
        if (v->is_number_unsigned()) return int64_t(std::min<uint64_t>(v->get<uint64_t>(), INT64_MAX));
        if (v->is_number_integer()) return v->get<int64_t>();
        if (!v->is_number_float() || v->get<double>() != std::floor(v->get<double>())) wrong(key, "an integer");
        const double d = v->get<double>();
        return d >= 0x1p63 ? INT64_MAX : d < -0x1p63 ? INT64_MIN : int64_t(d);
    }

    std::optional<std::string> string(const char* key) const {
        const ordered_json* v = get(key);
        if (!v) return std::nullopt;
        if (!v->is_string()) wrong(key, "a string");
        return v->get<std::string>();
    }

    const ordered_json* object(const char* key) const {
        const ordered_json* v = get(key);
        if (v && !v->is_object()) wrong(key, "an object");
        return v;
    }

    const ordered_json* array(const char* key) const {
        const ordered_json* v = get(key);
        if (v && !v->is_array()) wrong(key, "an array");
        return v;
    }

  private:
    const ordered_json& object_;
    std::string prefix_;
};

// A 404 unless the request's optional "model" is the served model's name.
void check_model(const Fields& f, const std::string& served_model);

// Everything but ApiError becomes one: a JSON access the checks missed is still the client's bad request.
template <typename F>
auto guarded(F&& parse) {
    try {
        return parse();
    } catch (const ApiError&) {
        throw;
    } catch (const ordered_json::exception& e) {
        bad_request("", fmt::format("invalid request: {}", e.what()));
    } catch (const std::exception& e) {
        throw ApiError(500, "internal_error", fmt::format("the request could not be read: {}", e.what()));
    }
}

}  // namespace dsv4::server
