// libFuzzer target for parsing a model's output (tokenizer/completion.h): parse_completion never throws on any
// text, and CompletionStream fed the same text in arbitrary chunks (cut where the input's bytes say) returns deltas
// that concatenate to the whole parse's fields and a result equal to it. The first byte picks the thinking mode and
// the chunk sizes' seed; the rest is the generated text. Built with -DDSV4_FUZZ=ON (clang); seeds in
// tests/fuzz/corpus/completion, see README.md.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tokenizer/completion.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    using dsv4::tok::ThinkingMode;
    const ThinkingMode mode = (data[0] & 1) ? ThinkingMode::kThinking : ThinkingMode::kChat;
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    const dsv4::tok::ParsedCompletion whole = dsv4::tok::parse_completion(text, mode);

    dsv4::tok::CompletionStream stream(mode);
    std::string reasoning, content;
    uint32_t cut = data[0] | 1u;  // chunk sizes 1..8 from a small generator seeded by the first byte
    for (size_t at = 0; at < text.size();) {
        cut = cut * 1103515245u + 12345u;
        const size_t n = std::min<size_t>(1 + (cut >> 16) % 8, text.size() - at);
        const dsv4::tok::CompletionStream::Delta d = stream.feed(text.substr(at, n));
        reasoning += d.reasoning_content;
        content += d.content;
        at += n;
    }
    dsv4::tok::CompletionStream::Delta last;
    const dsv4::tok::ParsedCompletion streamed = stream.finish(&last);
    reasoning += last.reasoning_content;
    content += last.content;
    if (reasoning != streamed.reasoning_content || content != streamed.content) std::abort();  // deltas != fields
    if (streamed.reasoning_content != whole.reasoning_content || streamed.content != whole.content ||
        streamed.tool_calls.size() != whole.tool_calls.size() || streamed.ok() != whole.ok())
        std::abort();  // streamed != whole
    for (size_t i = 0; i < whole.tool_calls.size(); ++i)
        if (streamed.tool_calls[i].name != whole.tool_calls[i].name ||
            streamed.tool_calls[i].arguments != whole.tool_calls[i].arguments)
            std::abort();
    return 0;
}
