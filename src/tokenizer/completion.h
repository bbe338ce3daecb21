// Parsing a DeepSeek-V4 completion into reasoning_content, content and DSML tool calls, whole or streamed.
// Well-formed text gives exactly the official parser's result (spec/dsv4-encoding.md §4); malformed text
// (missing </think> or EOS, bad or unterminated DSML, text after the tool calls or after EOS) never throws
// and never loses text: `error` carries the reference's exception type and message, and the text is returned
// leniently (see ParsedCompletion). Tested by tests/tokenizer/completion_test.cpp (spec vectors, streamed
// at every byte boundary).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/prompt.h"

namespace dsv4::tok {

struct ToolCall {
    std::string name;
    std::string arguments;  // JSON text, built as the reference does (non-string values copied verbatim)
};

struct CompletionError {
    std::string type;     // the reference's exception type: "AssertionError" or "ValueError"
    std::string message;  // the reference's message
};

// On success: the official parser's fields. On error, two cases:
//  - "Unexpected special token ..." (the text was split fine but a field holds BOS/EOS/<think>/</think>/｜DSML｜):
//    the split fields are kept as parsed;
//  - any other error: tool_calls is empty, reasoning_content is the text before the first </think> (thinking
//    mode; all of it if there is none), content the rest; one trailing EOS is removed. Nothing else is dropped.
struct ParsedCompletion {
    std::string reasoning_content;
    std::string content;
    std::vector<ToolCall> tool_calls;
    std::optional<CompletionError> error;

    bool ok() const { return !error.has_value(); }
    // {"role": "assistant", "content", "reasoning_content", "tool_calls": [{"type": "function", "function":
    // {"name", "arguments"}}]} as the reference returns it.
    ordered_json to_message() const;
};

// `text` is the generated text after the prompt (in thinking mode it starts inside the reasoning), including
// the EOS token's text when generation stopped on EOS.
ParsedCompletion parse_completion(std::string_view text, ThinkingMode mode);

// Incremental parsing of a stream of text chunks. feed() returns the reasoning and content text that is final
// already (never a partial UTF-8 character, never a prefix of a marker such as </think>, EOS or the tool-call
// opener); tool calls are known at finish(). Invariant: the deltas of all feed() calls plus finish()'s
// `last` concatenate to the fields of the returned result, which equals parse_completion(all text).
class CompletionStream {
public:
    struct Delta {
        std::string reasoning_content;
        std::string content;
    };

    explicit CompletionStream(ThinkingMode mode);

    Delta feed(std::string_view chunk);
    ParsedCompletion finish(Delta* last = nullptr);

    // True once the tool-call block has started: a client can show "calling tools" while it streams.
    bool in_tool_calls() const { return state_ == State::kToolCalls; }
    // True while the text is still the reasoning (thinking mode, before "</think>").
    bool in_reasoning() const { return state_ == State::kReasoning; }
    const std::string& text() const { return text_; }

private:
    enum class State { kReasoning, kContent, kToolCalls, kAfterEos };

    ThinkingMode mode_;
    State state_;
    std::string text_;
    size_t content_begin_ = 0;    // where content starts in text_
    size_t reasoning_sent_ = 0;   // bytes of reasoning emitted (from 0)
    size_t content_sent_ = 0;     // bytes of content emitted (from content_begin_)
};

}  // namespace dsv4::tok
