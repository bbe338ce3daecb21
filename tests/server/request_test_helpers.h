// What the request parsers' tests share (openai_protocol_test.cpp, request_options_test.cpp,
// chat_request_test.cpp): the limits and model name they parse under, bodies from JSON text, and the check that a
// request is a 400 naming its field.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "server/openai_protocol.h"

namespace dsv4::server::request_test {

inline const RequestLimits kLimits{
    .max_context = 4096, .max_output = 1024, .vocab_size = 129280, .max_stop_strings = 4, .max_top_logprobs = 20};
inline const std::string kModel = "dsv4-test";

inline ordered_json parse(const std::string& text) {
    return ordered_json::parse(text);
}

inline ordered_json chat_body(const std::string& extra = "") {
    return parse(R"({"messages": [{"role": "user", "content": "hi"}])" + (extra.empty() ? "" : ", " + extra) + "}");
}

inline ChatRequest chat_json(const ordered_json& body) {
    return parse_chat_request(body, kLimits, kModel);
}
inline ChatRequest chat(const std::string& extra) {
    return chat_json(chat_body(extra));
}
inline CompletionRequest completion(const std::string& fields) {
    return parse_completion_request(parse("{" + fields + "}"), kLimits, kModel);
}

// The ApiError `run` throws; a failure when it throws nothing or anything else.
inline ApiError error_of(const std::function<void()>& run) {
    try {
        run();
    } catch (const ApiError& e) {
        return e;
    } catch (const std::exception& e) {
        ADD_FAILURE() << "threw a non-ApiError: " << e.what();
        return ApiError(0, "", "");
    }
    ADD_FAILURE() << "accepted";
    return ApiError(0, "", "");
}

// A 400 invalid_request_error naming `param`, with a message that names it too (so a user knows what to fix).
inline void expect_400(const std::function<void()>& run, const std::string& param, const std::string& what) {
    const ApiError e = error_of(run);
    EXPECT_EQ(e.status(), 400) << what;
    EXPECT_EQ(e.type(), "invalid_request_error") << what;
    EXPECT_EQ(e.param(), param) << what << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(param.substr(0, param.find('['))), std::string::npos)
        << what << ": message does not name the field: " << e.what();
}

inline void expect_chat_400(const std::string& extra, const std::string& param) {
    expect_400([&] { chat(extra); }, param, extra);
}

inline void expect_messages_400(const std::string& messages, const std::string& param) {
    expect_400([&] { chat_json(parse(R"({"messages": )" + messages + "}")); }, param, messages);
}

inline void expect_completion_400(const std::string& fields, const std::string& param) {
    expect_400([&] { completion(fields); }, param, fields);
}

}  // namespace dsv4::server::request_test
