// ReplyBuilder: see reply_builder.h. Text flows decoder -> stop matcher -> (chat) completion stream. EOS (or a stop
// id) is not text for the stop matcher: EOS's marker goes straight to the completion stream, which needs it to end
// the reply the way the reference parser expects.
#include "server/reply_builder.h"

#include <algorithm>

namespace dsv4::server {

ReplyBuilder::ReplyBuilder(const tok::Tokenizer& tokenizer, int32_t eos_id, bool chat, tok::ThinkingMode mode,
                           const GenerationOptions& options)
    : tokenizer_(tokenizer),
      eos_id_(eos_id),
      stop_ids_(options.stop_token_ids),
      min_tokens_(options.min_tokens),
      chat_(chat),
      logprobs_(options.logprobs),
      include_stop_(options.include_stop_str),
      decoder_(tokenizer),
      stop_(options.stop, /*armed=*/options.min_tokens <= 1, options.include_stop_str),
      stream_(mode) {}

void ReplyBuilder::feed_text(const std::string& text, Delta& d) {
    if (text.empty()) return;
    if (chat_) {
        const tok::CompletionStream::Delta c = stream_.feed(text);
        d.reasoning_content += c.reasoning_content;
        d.content += c.content;
    } else {
        text_ += text;
        d.content += text;
    }
}

ReplyBuilder::Delta ReplyBuilder::push(const SampledToken& token) {
    Delta d;
    if (stop_.stopped() || saw_eos_) return d;  // tokens the engine produced before it saw the cancel
    ++tokens_;
    if (logprobs_) {
        std::vector<std::pair<int32_t, float>> top;
        for (const TokenChoice& c : token.top) top.emplace_back(c.id, c.logprob);
        d.logprobs.push_back(make_token_logprob(token.id, token.logprob, top, tokenizer_));
        all_logprobs_.push_back(d.logprobs.back());
    }
    if (tokens_ >= min_tokens_) stop_.arm();  // vLLM's min_tokens: stop strings count from this token's text on
    const bool ends = token.id == eos_id_ || std::find(stop_ids_.begin(), stop_ids_.end(), token.id) != stop_ids_.end();
    if (ends) {  // a stop id ends the reply as EOS does: its text is not part of it, unless asked for (not EOS's,
                 // nor a special token's: vLLM skips those)
        saw_eos_ = true;
        if (include_stop_ && token.id != eos_id_ && !tokenizer_.is_special(token.id))
            feed_text(stop_.push(decoder_.push(token.id)), d);
        feed_text(stop_.push(decoder_.finish()), d);
        feed_text(stop_.finish(), d);
        if (chat_) feed_text(std::string(tok::kEosToken), d);  // how the completion parser knows the end
        return d;
    }
    feed_text(stop_.push(decoder_.push(token.id)), d);
    if (chat_ && stream_.in_reasoning()) ++reasoning_tokens_;
    return d;
}

ReplyBuilder::Final ReplyBuilder::finish(FinishReason reason) {
    Final f;
    if (!saw_eos_ && !stop_.stopped()) {
        feed_text(stop_.push(decoder_.finish()), f.last);
        feed_text(stop_.finish(), f.last);
    }
    if (chat_) {
        tok::CompletionStream::Delta last;
        f.parsed = stream_.finish(&last);
        f.last.reasoning_content += last.reasoning_content;
        f.last.content += last.content;
    } else {
        f.parsed.content = text_;
    }
    f.stop_sequence = stop_.matched();
    if (stop_.stopped() || reason == FinishReason::kEos)
        f.finish_reason = "stop";
    else
        f.finish_reason = "length";
    if (chat_ && !f.parsed.tool_calls.empty()) f.finish_reason = "tool_calls";
    f.logprobs = all_logprobs_;
    return f;
}

}  // namespace dsv4::server
