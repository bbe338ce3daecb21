// The contract openai_request_fuzz checks, a function that returns what broke ("" when the input keeps it), so that
// the fuzz target aborts on it and tests/server/fuzz_corpus_test.cpp replays the committed corpus through the same
// check. An input's first byte is a mode (the endpoint and the encoder era); the rest is the body.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "core/error.h"
#include "server/openai_protocol.h"

namespace dsv4::fuzz {

// A request body to `dsv4 serve` parses into a chat or completion request or is an ApiError; a parsed chat's
// messages render into a prompt or are a dsv4::Error (what the encoder refuses). Nothing else is thrown.
inline std::string openai_request_violation(std::string_view input) {
    if (input.empty()) return "";
    const auto mode = uint8_t(input[0]);
    server::RequestLimits limits;
    limits.max_context = 4096;
    limits.vocab_size = 129280;
    try {
        const server::ordered_json json = server::parse_json_body(input.substr(1));
        if (mode & 1) {
            server::parse_completion_request(json, limits, "served");
            return "";
        }
        server::ChatRequest request = server::parse_chat_request(json, limits, "served");
        if (mode & 2) request.render.era = tok::EncoderEra::kPreview;  // the default is 0731
        try {
            (void)tok::render_prompt(request.messages, request.render);
        } catch (const Error&) {
        }
    } catch (const server::ApiError&) {
    } catch (const std::exception& e) {
        return std::string("an exception outside the contract: ") + e.what();
    }
    return "";
}

}  // namespace dsv4::fuzz
