// The OpenAI-compatible request and response shapes of `dsv4 serve`: JSON bodies of /v1/chat/completions and
// /v1/completions validated into plain structs (every field type checked; anything a client can get wrong is an
// ApiError with OpenAI's error object), and the JSON of responses, streamed chunks, logprobs and usage built from
// what the engine produced. No I/O and no model here: the HTTP layer (http_server.cpp) and the engine
// (runtime/engine.h) sit on either side. Conventions follow OpenAI's API and vLLM's DeepSeek-V4 request mapping
// (spec/dsv4-encoding.md §3.8). Requests in openai_protocol.cpp (completions, tokenize), chat_request.cpp and
// request_options.cpp (the generation options both share), responses in openai_response.cpp; tested by
// tests/server/openai_protocol_test.cpp and openai_response_test.cpp (each against hand-written OpenAI JSON).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/logit_adjust.h"
#include "runtime/sampler.h"
#include "structured/choice_constraint.h"
#include "structured/json_schema.h"
#include "structured/tool_call_cursor.h"
#include "tokenizer/completion.h"
#include "tokenizer/prompt.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// Something a client got wrong (or a state the server is in): the HTTP status and OpenAI's error object
// {"error": {"message", "type", "param", "code"}}. type: "invalid_request_error" (400, 404, 413),
// "authentication_error" (401), "service_unavailable" (503), "internal_error" (500).
class ApiError : public std::runtime_error {
  public:
    ApiError(int status, std::string type, const std::string& message, std::string param = {}, std::string code = {});
    int status() const { return status_; }
    const std::string& type() const { return type_; }
    const std::string& param() const { return param_; }
    const std::string& code() const { return code_; }
    ordered_json to_json() const;  // param / code are null when empty; the message is made valid UTF-8

  private:
    int status_;
    std::string type_, param_, code_;
};

// 400 invalid_request_error naming the offending field.
[[noreturn]] void bad_request(const std::string& param, const std::string& message);

// A field of the chat request and its name in another API that is parsed through it (the Responses and Messages
// APIs), e.g. {"stop", "stop_sequences"} or {".function.", "."}.
struct FieldName {
    std::string_view chat, other;
};

// A 400 of the chat parser in another API's terms: each of `names`, in order, renamed in the error's param and in the
// field names its message quotes ('...'), wherever it stands as whole parts of a path ("stop" is renamed in "stop" and
// "stop[1]", not in "stop_token_ids"). The message's prose, outside quotes, is left as it is.
ApiError with_fields_renamed(const ApiError& e, std::span<const FieldName> names);

// The request body as JSON, keys in the client's order (the order of a tool's schema reaches the prompt). 400 for
// text that is not JSON, not an object, or nested deeper than 128 levels (copying and dumping recurse).
ordered_json parse_json_body(std::string_view text);

// json.dump() that never throws: invalid UTF-8 in a string becomes U+FFFD instead of a type_error.
std::string safe_dump(const ordered_json& j);

// What the server allows; requests outside it are 400s that say the limit.
struct RequestLimits {
    int64_t max_context = 0;    // positions per sequence (prompt + output must fit)
    int64_t max_output = 0;     // most tokens one request may generate; 0: only the context bounds it
    int64_t vocab_size = 0;     // token ids in prompts must be below it
    int max_stop_strings = 16;  // OpenAI allows 4; vLLM more
    int max_top_logprobs = 20;  // as OpenAI
    int max_choices = 16;       // n: choices per request
    int max_prompts = 64;       // prompts of one completion request (each with its n choices)
};

// Decoding options shared by both endpoints.
// response_format: the reply's content as the model writes it ("text"), one JSON object ("json_object"), or one JSON
// value that satisfies a schema ("json_schema": structured/json_schema.h has the subset), which the server enforces
// token by token (structured/reply_constraints.h; after the reasoning of a thinking reply).
// kChoice: vLLM's guided_choice, the reply exactly one of a list of strings.
enum class ResponseFormat { kText, kJsonObject, kJsonSchema, kChoice };

struct GenerationOptions {
    SamplingParams sampling;  // greedy when temperature == 0 (the default temperature is 1, as OpenAI's); seed
                              // from the request, else a fresh random one; min_p, top_k, top_p as given
    std::optional<int64_t> max_tokens;  // max_tokens or max_completion_tokens (the latter wins); >= 1
    std::vector<std::string> stop;      // stop strings: output ends before the first one (not included)
    std::vector<int32_t> stop_token_ids;  // vLLM's: each ends the reply as EOS does (its text not included)
    int64_t min_tokens = 0;  // vLLM's: before this many tokens, no EOS, stop id or stop string ends the reply
    bool include_stop_str = false;      // vLLM's include_stop_str_in_output: the stop string (or a stop id's text) that
                                        // ended the reply stays in it
    std::vector<std::string> bad_words;  // vLLM's: never generated (adjust.bad_words holds them as ids, made by the
                                         // server's tokenizer: tokenize_bad_words)
    int64_t truncate_prompt_tokens = 0;  // vLLM's: > 0: only the prompt's last this many tokens run (asked for, so
                                         // not silent); -1: the last max_context; 0: the whole prompt
    bool logprobs = false;              // chat: logprobs: true; completions: logprobs: N (then top_logprobs = N)
    int top_logprobs = 0;               // 0..max_top_logprobs
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage (only with stream)
    bool ignore_eos = false;     // vLLM's extension: keep generating past EOS
    int n = 1;                   // choices; choice i samples with sampling.seed + i (the same prompt, prefilled once)
    LogitAdjustments adjust;     // presence / frequency / repetition penalties, logit_bias
    ResponseFormat response_format = ResponseFormat::kText;
    std::shared_ptr<const CompiledSchema> schema;  // kJsonSchema: response_format.json_schema.schema, compiled
    std::shared_ptr<const ChoiceList> choices;     // kChoice: guided_choice
    // The reply's tool calls, enforced token by token (null: the model's own). Set for tool_choice "required" (the
    // reply is a call of a declared tool) or a named function (of it), for parallel_tool_calls: false (at most one
    // call) and where a tool is "strict" (its calls' arguments satisfy its parameters schema); every call's block is
    // then one the completion parser reads.
    std::shared_ptr<const ToolCallGrammar> tool_calls;
};

struct ChatRequest {
    std::string model;
    ordered_json messages;      // OpenAI messages, ready for tok::render_prompt (request-level tools attached, §3.8)
    tok::RenderOptions render;  // thinking mode and effort from `thinking` / `chat_template_kwargs` /
                                // `reasoning_effort` (§3.8 mapping)
    bool has_tools = false;     // tools given and tool_choice != "none": the reply may hold DSML tool calls
    // The reply continues the last message, an assistant's partial content ("prefix": true, continue_final_message,
    // or "wo_eos"): rendered without its EOS, its reasoning (thinking mode) closed; the reply is content.
    bool continues_final = false;
    GenerationOptions options;
};

// One prompt of a completion request: a text or token ids.
struct CompletionPrompt {
    std::optional<std::string> text;  // "text"
    std::vector<int32_t> ids;         // [ids] (validated against vocab_size); empty when text
};

struct CompletionRequest {
    std::string model;
    // "prompt": one (a string, an array of ids, or an array holding one of those) or several (an array of strings
    // and id arrays, up to max_prompts): choice p * n + j of the reply is prompt p's j-th.
    std::vector<CompletionPrompt> prompts;
    bool echo = false;                       // the reply's text (and logprobs) begin with the prompt's; then max_tokens
                                             // may be 0: the prompt scored, nothing generated
    GenerationOptions options;
};

// Validate a parsed body. Throw ApiError 400 with the field's name for: a body that is not an object, a missing
// or mistyped required field, a value out of range (temperature outside [0, 2], top_p outside (0, 1], top_k < -1
// (-1 or 0: no limit), min_p outside [0, 1], max_tokens < 1, n outside [1, max_choices], top_logprobs outside
// 0..max_top_logprobs or without logprobs, more than max_stop_strings stops or an empty stop string, stream_options
// without stream, seed not an integer, token ids outside the vocabulary or empty prompts, messages not a non-empty
// array of objects with a string role, tools not an array of {"type":"function","function":{"name",...}}, tool_choice
// naming a function that is not in tools, reasoning_effort not a string or null). A JSON null is the field left out.
// Unknown fields are ignored, as OpenAI's SDK sends extras; known ones we cannot honour are 400s rather than
// silently ignored (best_of != n, suffix, non-text content parts, a json_schema keyword outside the subset of
// structured/json_schema.h, response_format beside tools, a strict tool's schema outside that subset, a
// conversation that ends with an assistant message it does not ask to continue with "prefix" or
// continue_final_message, vLLM's extras that ask for what this server does not do: guided_regex, guided_grammar,
// prompt_logprobs, use_beam_search, logits_processors, truncate_prompt_tokens with echo, allowed_token_ids with a
// structured reply). vLLM's stop_token_ids, min_tokens, include_stop_str_in_output, truncate_prompt_tokens,
// allowed_token_ids, bad_words, guided_json and guided_choice are honoured.
// `model` must equal `served_model` (404 model_not_found otherwise) when given; it may be absent. Nothing but
// ApiError is thrown. `body` is an ordered_json (see parse_json_body); a plain json converts, losing key order.
//
// Thinking (chat): off unless turned on by `thinking` (true or {"type":"enabled"}) or chat_template_kwargs
// `thinking` / `enable_thinking` (on if any given one is true); with none of these, a reasoning_effort string other
// than "none" turns it on (a client asking for effort wants reasoning). When on, reasoning_effort maps as vLLM's
// §3.8: "none" -> chat mode; "max" -> max; "low"/"minimal"/"medium" -> low; other strings -> high; absent or null
// -> nullopt (the encoder's default).
ChatRequest parse_chat_request(const ordered_json& body, const RequestLimits& limits, const std::string& served_model);
CompletionRequest parse_completion_request(const ordered_json& body, const RequestLimits& limits,
                                           const std::string& served_model);

// The generation budget once the prompt is tokenized: max_tokens when given, else what the context (and
// max_output) leaves. 400 (code "context_length_exceeded", param `prompt_param`: "messages" or "prompt") when the
// prompt leaves no room for one token, or prompt + max_tokens exceeds max_context (0: no context limit).
int64_t resolve_max_tokens(int64_t prompt_tokens, const GenerationOptions& options, const RequestLimits& limits,
                           const std::string& prompt_param);

// One generated token's log-probability and the most likely alternatives at its step (natural log, after
// temperature 1 softmax of the raw logits, as vLLM reports by default).
// Made by make_token_logprob from the engine's numbers (runtime/engine.h computes them from the raw logits).
struct TokenLogprob {
    int32_t id = 0;
    std::string text;      // the token's bytes when they are valid UTF-8; else OpenAI's form: "bytes:" then the valid
                           // characters as they are and each invalid byte as the 4 characters \xNN (e.g. "bytes:\xe4")
    std::string bytes;     // raw; `bytes` in the JSON lists them as ints
    float logprob = 0.0f;  // below -9999 (-inf) it is written as -9999.0, as OpenAI and vLLM do
    bool scored = true;    // false: the first id of an echoed prompt (nothing before it): logprob and top are null
    std::vector<TokenLogprob> top;  // top_logprobs alternatives, most likely first (empty when not asked)
};

TokenLogprob make_token_logprob(int32_t id, float logprob, const std::vector<std::pair<int32_t, float>>& top,
                                const tok::Tokenizer& tokenizer);

// Characters (UTF-8 sequences started: every byte but continuation bytes) in `bytes`: the unit of text_offset.
int64_t utf8_characters(std::string_view bytes);

struct Usage {
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache (prompt_tokens_details.cached_tokens)
};

// finish_reason: "stop" (EOS or a stop string), "length" (max_tokens or the context), "tool_calls" (the reply
// ended with DSML tool calls), "abort" is never sent (a cancelled request has no response).
struct ChatResult {
    tok::ParsedCompletion parsed;  // reasoning_content, content, tool_calls
    std::string finish_reason;
    std::vector<TokenLogprob> logprobs;  // one per generated token when asked
    Usage usage;
};

// The id of the i-th tool call of choice c of response `response_id`: "call_<response_id without its chatcmpl-
// prefix>_<i>" for choice 0, "call_<...>_<c>_<i>" for the others; unique as long as response ids are; the same in a
// response and in the chunks of a stream.
std::string tool_call_id(const std::string& response_id, size_t index, int choice = 0);

// Response bodies. `id` is "chatcmpl-..." / "cmpl-..." (made by the caller), `created` seconds since the epoch.
// Chat: {"id","object":"chat.completion","created","model","choices":[{"index":0,"message":{"role":"assistant",
// "content","reasoning_content","tool_calls":[{"id":tool_call_id(id, i),"type":"function","function":{"name",
// "arguments"}}]},"logprobs":{"content":[...]}|null,"finish_reason"}],"usage":{...}}. content is null when only tool
// calls came back; reasoning_content is omitted when empty (always in chat mode); tool_calls omitted when none.
// A logprobs entry: {"token","logprob","bytes":[ints],"top_logprobs":[{"token","logprob","bytes"}]}.
// With n choices: one entry per choice, "index" 0..n-1, and `usage` for them all (each ChatResult's own is unused).
ordered_json chat_response(const std::string& id, int64_t created, const std::string& model,
                           const std::vector<ChatResult>& choices, const Usage& usage, bool logprobs);
ordered_json chat_response(const std::string& id, int64_t created, const std::string& model, const ChatResult& r,
                           bool logprobs);
// Completions: {"id","object":"text_completion","created","model","choices":[{"index":0,"text","logprobs":
// {"tokens","token_logprobs","top_logprobs":[{token: logprob}],"text_offset"}|null,"finish_reason"}],"usage"}.
// text_offset counts characters (UTF-8 sequences started) before each token, from the start of the output.
ordered_json completion_response(const std::string& id, int64_t created, const std::string& model,
                                 const std::string& text, const std::string& finish_reason,
                                 const std::vector<TokenLogprob>& logprobs, bool want_logprobs, const Usage& usage);
struct CompletionChoice {
    std::string text, finish_reason;
    std::vector<TokenLogprob> logprobs;
};
ordered_json completion_response(const std::string& id, int64_t created, const std::string& model,
                                 const std::vector<CompletionChoice>& choices, bool want_logprobs, const Usage& usage);

// Streaming chunks (SSE "data: <json>" lines, the HTTP layer frames them). Chat: "chat.completion.chunk" objects;
// the first carries delta {"role":"assistant","content":""}; content / reasoning_content deltas as they become
// final; tool calls in the last delta ({"tool_calls":[{"index","id","type","function":{"name","arguments"}}]});
// the finishing chunk has an empty delta and finish_reason; with include_usage a last chunk with "choices": [] and
// "usage" (every other chunk has "usage": null then). Delta keys: role when set; content when set or with role
// (the first chunk's ""); reasoning_content and tool_calls when non-empty. "logprobs": {"content":[...]} when asked
// and the delta has tokens, else null. Completion chunks are "text_completion" objects; `text_offset` is the
// characters streamed before this chunk (the offsets continue across chunks).
struct ChatDelta {
    std::string role;  // "assistant" on the first chunk only
    std::string reasoning_content, content;
    std::vector<tok::ToolCall> tool_calls;
    std::vector<TokenLogprob> logprobs;  // the tokens this chunk's text came from
};
// `choice`: the chunk's "index" (n > 1: every choice streams its own chunks, the first of each carrying the role).
ordered_json chat_chunk(const std::string& id, int64_t created, const std::string& model, const ChatDelta& delta,
                        const std::optional<std::string>& finish_reason, bool include_usage_field, bool logprobs,
                        int choice = 0);
ordered_json completion_chunk(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                              const std::optional<std::string>& finish_reason,
                              const std::vector<TokenLogprob>& logprobs, bool want_logprobs, bool include_usage_field,
                              int64_t text_offset = 0, int choice = 0);
ordered_json usage_chunk(const std::string& id, int64_t created, const std::string& model, bool chat,
                         const Usage& usage);
ordered_json usage_json(const Usage& usage);  // {"prompt_tokens","completion_tokens","total_tokens",
                                              //  "prompt_tokens_details":{"cached_tokens"}}

// GET /v1/models: {"object":"list","data":[{"id","object":"model","created","owned_by":"dsv4","max_model_len"}]}.
ordered_json models_response(const std::string& model, int64_t created, int64_t max_model_len);

// vLLM's /tokenize: the ids a prompt runs as. Either {"prompt": text, "add_special_tokens": true} (as /v1/completions
// runs a text prompt: BOS first unless add_special_tokens is false) or a chat body ({"messages": [...]} and any field
// of /v1/chat/completions that shapes the prompt: tools, thinking, reasoning_effort, chat_template_kwargs, a prefix
// message), validated as that endpoint validates it, so the count equals its usage.prompt_tokens.
struct TokenizeRequest {
    std::optional<std::string> prompt_text;
    bool add_bos = true;
    std::optional<ChatRequest> chat;
};
TokenizeRequest parse_tokenize_request(const ordered_json& body, const RequestLimits& limits,
                                       const std::string& served_model);
// {"count", "max_model_len", "tokens", "token_strs": null}, as vLLM answers.
ordered_json tokenize_response(const std::vector<int32_t>& ids, int64_t max_model_len);
// vLLM's /detokenize: {"tokens": [ids]} (each in the vocabulary) -> their text, {"prompt": text}.
std::vector<int32_t> parse_detokenize_request(const ordered_json& body, const RequestLimits& limits,
                                              const std::string& served_model);
ordered_json detokenize_response(const std::string& text);

// vLLM's bad words as token sequences (LogitAdjustments::bad_words): each word as it would begin the text and, where
// that gives another first token and as many tokens, after a space (so it is banned at the start and inside text).
std::vector<std::vector<int32_t>> tokenize_bad_words(const std::vector<std::string>& words,
                                                     const tok::Tokenizer& tokenizer);

// Stop strings over streamed text: push() returns the text that can be sent now (held back while it could be the
// start of a stop string), and says when a stop string was completed (the text before it is returned, the stop
// string and everything after it never are). finish() returns what was held back at the end. The stop that ends
// the text is the first to complete (the earliest end; of two ending together, the longer): so the result does
// not depend on how the text was split into pushes, as when the whole text is checked token by token. Valid UTF-8
// in, valid UTF-8 out (a stop string starts on a character boundary, so the cut is one).
//
// Not `armed` (vLLM's min_tokens, until the reply has that many tokens): no stop string ends in the text pushed so
// far; one that ends after arm() may begin before it (as vLLM checks the text each token adds once armed).
class StopMatcher {
  public:
    // `include`: the text returned when a stop string completes ends with it (vLLM's include_stop_str_in_output).
    explicit StopMatcher(std::vector<std::string> stops, bool armed = true, bool include = false);
    std::string push(std::string_view text);
    void arm() { armed_ = true; }
    bool stopped() const { return stopped_; }
    const std::string& matched() const { return matched_; }  // the stop string that ended the text
    std::string finish();

  private:
    std::vector<std::string> stops_;
    std::string held_;
    bool armed_, include_;
    size_t min_end_ = 0;  // a stop string counts only if it ends past this many bytes of held_
    bool stopped_ = false;
    std::string matched_;
};

}  // namespace dsv4::server
