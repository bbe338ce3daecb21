// The contract openai_request_fuzz checks, a function that returns what broke ("" when the input keeps it), so that
// the fuzz target aborts on it and tests/server/fuzz_corpus_test.cpp replays the committed corpus through the same
// check. An input's first byte is a mode (the endpoint: bit 0 completions, bit 2 responses, bit 3 Anthropic's
// messages; bit 1 the encoder era);
// the rest is the body.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "core/error.h"
#include "server/anthropic_messages.h"
#include "server/openai_protocol.h"
#include "server/openai_responses.h"
#include "structured/schema_cursor.h"
#include "structured/tool_call_cursor.h"

namespace dsv4::fuzz {

// A walk over what the schema's cursor accepts, the first byte of a fixed list each step (closing what is open first).
inline void walk_schema(const server::GenerationOptions& o) {
    if (!o.schema) return;
    SchemaCursor c(o.schema.get());
    static constexpr std::string_view kBytes = "\"}]0:,tfnrulesa1-.e{[ ";
    for (int step = 0; step < 512 && !c.complete(); ++step) {
        bool fed = false;
        for (const char b : kBytes)
            if (c.feed(uint8_t(b))) {
                fed = true;
                break;
            }
        if (!fed) return;
    }
}

// A walk over what a request's tool-call grammar accepts: each step the first byte of a fixed order (what closes
// first, then every byte) that its cursor takes.
inline void walk_tool_calls(const server::GenerationOptions& o) {
    if (!o.tool_calls) return;
    ToolCallCursor c(o.tool_calls.get());
    static constexpr std::string_view kFirst = "\"<>/\n0";
    for (int step = 0; step < 1024 && !(c.complete() && !c.in_content()); ++step) {
        bool fed = false;
        for (const char b : kFirst) fed = fed || c.feed(uint8_t(b));
        for (int b = 0; b < 256 && !fed; ++b) fed = c.feed(uint8_t(b));
        if (!fed) return;
    }
}

// A request body to `dsv4 serve` parses into a chat or completion request or is an ApiError; a parsed chat's
// messages render into a prompt or are a dsv4::Error (what the encoder refuses); a json_schema it holds can be
// walked byte by byte (under the sanitizers), and so can its tool-call grammar. Nothing else is thrown.
inline std::string openai_request_violation(std::string_view input) {
    if (input.empty()) return "";
    const auto mode = uint8_t(input[0]);
    server::RequestLimits limits;
    limits.max_context = 4096;
    limits.vocab_size = 129280;
    try {
        const server::ordered_json json = server::parse_json_body(input.substr(1));
        if (mode & 8) {  // /v1/messages: translated into a chat request
            const server::ChatRequest request = server::parse_messages_request(json, limits, "served");
            walk_schema(request.options);
            walk_tool_calls(request.options);
            return "";
        }
        if (mode & 4) {  // /v1/responses: translated into a chat request
            server::ResponsesRequest request = server::parse_responses_request(json, limits, "served");
            walk_schema(request.chat.options);
            walk_tool_calls(request.chat.options);
            (void)server::response_object("resp_x", 0, "served", nullptr, request.echo);
            return "";
        }
        if (mode & 1) {
            walk_schema(server::parse_completion_request(json, limits, "served").options);
            return "";
        }
        server::ChatRequest request = server::parse_chat_request(json, limits, "served");
        walk_schema(request.options);
        walk_tool_calls(request.options);
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
