// Anthropic's Messages API (POST /v1/messages), which DeepSeek's own API also speaks (for Claude Code and the
// Anthropic SDK), over the chat machinery. A request is translated into the chat request it means and parsed by
// parse_chat_request: `system` a system message; `messages` of text, tool_use (an assistant's tool call, its input
// the call's arguments), tool_result (a tool message) and thinking (the assistant's reasoning_content) blocks;
// `tools` ({name, description, input_schema}) chat's tools; `tool_choice` auto / any (required) / tool (named) /
// none, `disable_parallel_tool_use`; `stop_sequences`; `thinking` {"type": "enabled"} turns thinking on
// (budget_tokens is not enforced: max_tokens bounds the whole reply); `max_tokens` (required, as Anthropic's).
// The reply is a message of thinking / text / tool_use blocks with stop_reason end_turn, max_tokens, stop_sequence
// or tool_use, or, streamed, its events (MessageEvents). Errors are Anthropic's error objects. Model names that
// begin with "claude" are taken as the served model, as DeepSeek's API maps them. Tested in
// tests/server/anthropic_messages_test.cpp and tests/server_e2e/test_messages.py.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/openai_protocol.h"
#include "tokenizer/completion.h"

namespace dsv4::server {

// What a Messages body is parsed for: a reply (POST /v1/messages: max_tokens required), or only its prompt's length
// (POST /v1/messages/count_tokens: max_tokens may be left out).
enum class MessagesUse { kGenerate, kCountTokens };

// 400s name the Messages API's fields.
ChatRequest parse_messages_request(const ordered_json& body, const RequestLimits& limits,
                                   const std::string& served_model, MessagesUse use = MessagesUse::kGenerate);

// An error as Anthropic's API writes it: {"type": "error", "error": {"type": ..., "message": ...}}.
ordered_json anthropic_error(const ApiError& e);

// A finished reply, as a message reports it.
struct MessageOutcome {
    tok::ParsedCompletion parsed;
    std::string finish_reason;  // chat's: "stop", "length", "tool_calls"
    std::string stop_sequence;  // the stop string that ended it, if one did
    Usage usage;
};

// The message object: its content blocks (thinking, text, tool_use: the call's arguments as its input object, or the
// text as given where it is not a JSON object), stop_reason, stop_sequence, usage.
ordered_json message_object(const std::string& id, const std::string& model, const MessageOutcome& outcome);

// A streamed message's events: message_start; a thinking block and a text block opened at their first text, their
// deltas; at the end what was held back, the open block closed, a tool_use block per call (its input as one
// input_json_delta), message_delta (stop_reason, usage) and message_stop. Blocks equal the final object's content.
class MessageEvents {
  public:
    MessageEvents(std::string id, std::string model, int64_t input_tokens);
    std::vector<ordered_json> start();
    std::vector<ordered_json> delta(const std::string& thinking, const std::string& text);
    std::vector<ordered_json> finish(const MessageOutcome& outcome);

  private:
    void close_block(std::vector<ordered_json>& out);
    void open_block(std::vector<ordered_json>& out, ordered_json block, char kind);

    std::string id_, model_;
    int64_t input_tokens_;
    int index_ = -1;  // the open block's
    char open_ = 0;   // 't' thinking, 'x' text, 0 none
    bool text_sent_ = false;
};

}  // namespace dsv4::server
