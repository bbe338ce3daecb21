// The contracts completion_fuzz and tokenizer_fuzz check, each a function that returns what broke ("" when the input
// keeps it), so that the fuzz targets abort on it and tests/tokenizer/fuzz_corpus_test.cpp replays the committed
// corpora through the same checks (request_contract.h: the server's). A completion input's first byte is a mode
// (the thinking mode and the chunking).
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/completion.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace dsv4::fuzz {

// A model's output: parse_completion never throws, and CompletionStream fed the text in chunks of 1-8 bytes (sizes
// from a generator the mode byte seeds) gives deltas that concatenate to its result's fields, a result equal to the
// whole parse.
inline std::string completion_violation(std::string_view input) {
    if (input.empty()) return "";
    const auto mode_byte = uint8_t(input[0]);
    const tok::ThinkingMode mode = (mode_byte & 1) ? tok::ThinkingMode::kThinking : tok::ThinkingMode::kChat;
    const std::string_view text = input.substr(1);
    try {
        const tok::ParsedCompletion whole = tok::parse_completion(text, mode);
        tok::CompletionStream stream(mode);
        std::string reasoning, content;
        uint32_t cut = mode_byte | 1u;
        for (size_t at = 0; at < text.size();) {
            cut = cut * 1103515245u + 12345u;
            const size_t n = std::min<size_t>(1 + (cut >> 16) % 8, text.size() - at);
            const tok::CompletionStream::Delta d = stream.feed(text.substr(at, n));
            reasoning += d.reasoning_content;
            content += d.content;
            at += n;
        }
        tok::CompletionStream::Delta last;
        const tok::ParsedCompletion streamed = stream.finish(&last);
        reasoning += last.reasoning_content;
        content += last.content;
        if (reasoning != streamed.reasoning_content || content != streamed.content)
            return "the stream's deltas are not its result's fields";
        if (streamed.reasoning_content != whole.reasoning_content || streamed.content != whole.content ||
            streamed.ok() != whole.ok() || streamed.tool_calls.size() != whole.tool_calls.size())
            return "the streamed result differs from the whole parse";
        for (size_t i = 0; i < whole.tool_calls.size(); ++i)
            if (streamed.tool_calls[i].name != whole.tool_calls[i].name ||
                streamed.tool_calls[i].arguments != whole.tool_calls[i].arguments)
                return "a streamed tool call differs from the whole parse's";
    } catch (const std::exception& e) {
        return std::string("the parser threw: ") + e.what();
    }
    return "";
}

// The tokenizer on any bytes: encode does not throw, the tokens' bytes are the input, decode is the input's lossy
// UTF-8, and IncrementalDecoder's pieces plus finish() are decode.
inline std::string tokenizer_violation(const tok::Tokenizer& tokenizer, std::string_view text) {
    try {
        const std::vector<int32_t> ids = tokenizer.encode(text);
        std::string joined;
        for (int32_t id : ids) joined += tokenizer.token_bytes(id);
        if (joined != text) return "the tokens' bytes are not the input";
        const std::string decoded = tokenizer.decode(ids);
        if (decoded != tok::utf8_lossy(text)) return "decode is not the input's lossy UTF-8";
        tok::IncrementalDecoder stream(tokenizer);
        std::string pieces;
        for (int32_t id : ids) pieces += stream.push(id);
        pieces += stream.finish();
        if (pieces != decoded) return "the streamed decode differs from decode";
    } catch (const std::exception& e) {
        return std::string("the tokenizer threw: ") + e.what();
    }
    return "";
}

// A tokenizer.json a user's model directory holds: text that is JSON loads into a tokenizer or is refused with
// dsv4::Error or a JSON type error (what Tokenizer::from_file turns into its message), and a tokenizer that loaded
// encodes and decodes text with special tokens, emoji and invalid UTF-8 without throwing anything else.
inline std::string tokenizer_json_violation(std::string_view input) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(input);
    } catch (const nlohmann::json::exception&) {
        return "";
    }
    try {
        const tok::Tokenizer t = tok::Tokenizer::from_json(j);
        for (std::string_view text :
             {std::string_view("Hello, world! 123 \xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x98\x80 <|endoftext|> "),
              std::string_view("\xff\xfe a\0"
                               "b",
                               6)}) {
            const std::vector<int32_t> ids = t.encode(text);
            (void)t.decode(ids);
            for (int32_t id : ids) (void)t.token_bytes(id);
        }
    } catch (const Error&) {
    } catch (const nlohmann::json::exception&) {
    } catch (const std::exception& e) {
        return std::string("an exception outside the contract: ") + e.what();
    }
    return "";
}

}  // namespace dsv4::fuzz
