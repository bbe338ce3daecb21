// The typed reading of a request's JSON fields (see request_fields.h). Tested through
// tests/server/openai_protocol_test.cpp.
#include "server/request_fields.h"

namespace dsv4::server {

std::string describe(const ordered_json& v) {
    switch (v.type()) {
        case ordered_json::value_t::null:
            return "null";
        case ordered_json::value_t::boolean:
            return v.get<bool>() ? "true" : "false";
        case ordered_json::value_t::string:
            return "a string";
        case ordered_json::value_t::array:
            return "an array";
        case ordered_json::value_t::object:
            return "an object";
        default:
            return v.dump();  // a number
    }
}

void check_model(const Fields& f, const std::string& served_model) {
    const auto model = f.string("model");
    if (model && *model != served_model)
        throw ApiError(404, "invalid_request_error",
                       fmt::format("The model '{}' does not exist: this server serves '{}'", *model, served_model),
                       "model", "model_not_found");
}

}  // namespace dsv4::server
