// DeepSeek-V4 prompt rendering, byte-exact with the official encoder (encoding/encoding_dsv4.py) as specified
// in spec/dsv4-encoding.md §2-§3: roles system/developer/user/assistant/tool/latest_reminder, chat and thinking
// modes, reasoning effort, drop-thinking, tools (DSML), tool results, response_format, quick-instruction tasks,
// both encoder eras. Messages are OpenAI-style JSON objects. Tested by tests/tokenizer/prompt_test.cpp against
// every encoding vector of the spec (tests/tokenizer/data/encoding_vectors.json).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace dsv4::tok {

using ordered_json = nlohmann::ordered_json;

enum class ThinkingMode { kChat, kThinking };

// kPreview: the encoder of the first V4-Flash/V4-Pro release (effort: only "max" adds text).
// k0731: the encoder of V4-Flash-0731 (effort table low/high/max, default low; list contents and images).
enum class EncoderEra { kPreview, k0731 };

struct RenderOptions {
    ThinkingMode thinking_mode = ThinkingMode::kChat;
    std::optional<std::string> reasoning_effort;  // nullopt = Python None
    bool drop_thinking = true;
    bool add_default_bos_token = true;
    EncoderEra era = EncoderEra::k0731;
};

inline constexpr std::string_view kBosToken = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEosToken = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsmlToken = "｜DSML｜";

// The prompt string for `messages` (a JSON array). `context` holds messages already sent in an earlier call
// (a cached prefix): they count for every index rule but are not rendered, and BOS is then omitted.
// Tokenize the result with Tokenizer::encode (no BOS added: it is in the string). Throws dsv4::Error where
// the reference raises (invalid effort, unknown role, empty developer content, non-object tool arguments, ...).
// Deliberate deviations, each an error instead of Python's output: non-string contents that the preview era
// would insert as a Python repr, dict/list values where the reference would print str(value), and tool call
// arguments with a number outside a double's range (Python reads inf and writes Infinity, which is not JSON).
std::string render_prompt(const ordered_json& messages, const RenderOptions& options,
                          const ordered_json& context = ordered_json::array());

EncoderEra parse_encoder_era(std::string_view name);  // "preview" | "0731"; throws otherwise

// How an assistant turn's tool calls begin, as the encoder renders them (spec §2.5) and the completion parser reads
// them (§4): the block's opening and the first invoke of `name`, up to its parameters.
std::string tool_call_opening(std::string_view name);
// An invoke's end, and what ends the block after its last invoke.
inline constexpr std::string_view kInvokeClose = "</｜DSML｜invoke>";
inline constexpr std::string_view kToolCallsClose = "\n</｜DSML｜tool_calls>";

}  // namespace dsv4::tok
