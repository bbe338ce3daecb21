// One request's reply as tokens arrive from the engine: token ids to text (never half a UTF-8 character), stop
// strings (the text ends before the first one), and for chat the split into reasoning_content, content and DSML
// tool calls (never leaking markup into content). Streams deltas as they become final and builds the whole reply
// at the end, so the concatenated deltas equal the non-streamed reply. Tested by tests/server/reply_builder_test.cpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "server/openai_protocol.h"
#include "tokenizer/completion.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

class ReplyBuilder {
  public:
    // chat: parse the text as a DeepSeek-V4 completion in `mode`; otherwise plain text (completions). From `options`:
    // stop strings (counted from the min_tokens-th token on), stop_token_ids (each ends the reply as EOS does),
    // logprobs.
    ReplyBuilder(const tok::Tokenizer& tokenizer, int32_t eos_id, bool chat, tok::ThinkingMode mode,
                 const GenerationOptions& options);

    struct Delta {
        std::string reasoning_content, content;  // content: the text of completions
        std::vector<TokenLogprob> logprobs;      // the tokens pushed since the last delta
        bool empty() const { return reasoning_content.empty() && content.empty() && logprobs.empty(); }
    };
    // A sampled token (EOS included). Returns what can be sent now.
    Delta push(const SampledToken& token);
    // True once a stop string completed: the caller cancels the engine request and finishes.
    bool stopped() const { return stop_.stopped(); }
    int64_t tokens() const { return tokens_; }
    // Chat: the tokens after which the reply was still reasoning (its "</think>" is not one of them).
    int64_t reasoning_tokens() const { return reasoning_tokens_; }

    struct Final {
        Delta last;                    // what was held back
        tok::ParsedCompletion parsed;  // chat: the whole reply; completions: content = the whole text
        std::string finish_reason;     // "stop" | "length" | "tool_calls"
        std::string stop_sequence;     // the stop string that ended the reply (empty: none did)
        std::vector<TokenLogprob> logprobs;  // every token's, in order (when asked)
    };
    // `reason`: how the engine ended (kEos or kLength; a stop string wins over both).
    Final finish(FinishReason reason);

  private:
    void feed_text(const std::string& text, Delta& d);

    const tok::Tokenizer& tokenizer_;
    int32_t eos_id_;
    std::vector<int32_t> stop_ids_;
    int64_t min_tokens_;
    bool chat_, logprobs_, include_stop_;
    tok::IncrementalDecoder decoder_;
    StopMatcher stop_;
    tok::CompletionStream stream_;
    std::string text_;  // completions: everything sent
    std::vector<TokenLogprob> all_logprobs_;
    bool saw_eos_ = false;
    int64_t tokens_ = 0, reasoning_tokens_ = 0;
};

}  // namespace dsv4::server
