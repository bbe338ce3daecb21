// OpenAI's Responses API (POST /v1/responses) over the chat machinery. A request is translated into the chat request
// it means and parsed by parse_chat_request: `instructions` a system message first; `input` (a string, or items:
// messages of text parts, function_call, function_call_output, reasoning) the messages; flat function tools chat's
// tools, strict unless they say otherwise (the Responses API's default); `tool_choice`, `parallel_tool_calls`;
// `text.format` response_format; `reasoning.effort` reasoning_effort; `max_output_tokens` max_completion_tokens. The
// reply comes back as a response object of output items (reasoning, message, function_call) or, streamed, as its
// events (ResponseEvents). Nothing is stored: `previous_response_id`, `conversation`, `background` and hosted tools
// are 400s. Tested in tests/server/openai_responses_test.cpp and tests/server_e2e/test_responses.py.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/openai_protocol.h"
#include "tokenizer/completion.h"

namespace dsv4::server {

struct ResponsesRequest {
    ChatRequest chat;
    // The request's fields a response object repeats (instructions, tools, tool_choice, text, reasoning,
    // temperature, top_p, max_output_tokens, parallel_tool_calls, metadata), as given.
    ordered_json echo;
};

// 400s name the Responses API's fields (input[2].content[0].type, max_output_tokens, text.format, ...).
ResponsesRequest parse_responses_request(const ordered_json& body, const RequestLimits& limits,
                                         const std::string& served_model);

// A finished reply, as a response reports it.
struct ResponseOutcome {
    tok::ParsedCompletion parsed;  // reasoning_content, content, tool_calls
    std::string finish_reason;     // chat's: "stop", "length" (status "incomplete"), "tool_calls"
    Usage usage;
    int64_t reasoning_tokens = 0;  // generated tokens of the reasoning
};

// The response object ("object": "response"): in progress (outcome null: no output yet) or finished.
ordered_json response_object(const std::string& id, int64_t created, const std::string& model,
                             const ResponseOutcome* outcome, const ordered_json& echo);

// A streamed response's events, in order, each with its sequence number: created and in_progress; a reasoning item
// and a message item opened at their first text, their deltas; at the end what was held back, every open item
// closed, the function calls, and completed (or incomplete). Items and ids equal the final object's output.
class ResponseEvents {
  public:
    ResponseEvents(std::string id, int64_t created, std::string model, ordered_json echo);
    std::vector<ordered_json> start();
    std::vector<ordered_json> delta(const std::string& reasoning, const std::string& content);
    std::vector<ordered_json> finish(const ResponseOutcome& outcome);
    std::vector<ordered_json> failed(const std::string& message);

  private:
    ordered_json event(const char* type, ordered_json fields);
    void open_reasoning(std::vector<ordered_json>& out);
    void open_message(std::vector<ordered_json>& out);
    void close_reasoning(std::vector<ordered_json>& out);
    void close_message(std::vector<ordered_json>& out);

    std::string id_, model_;
    int64_t created_;
    ordered_json echo_;
    int64_t sequence_ = 0;
    int next_index_ = 0;
    int reasoning_index_ = -1, message_index_ = -1;  // output indices of the open items (-1: not opened)
    bool reasoning_closed_ = false, message_closed_ = false;
    std::string reasoning_, content_;  // sent so far
};

}  // namespace dsv4::server
