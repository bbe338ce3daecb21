// Requests of the OpenAI-compatible protocol (see openai_protocol.h): the body is read field by field through typed
// getters (request_fields.h) that turn every mistake into a 400 naming the field, so nothing a client sends reaches
// the engine unchecked and nothing but ApiError leaves parse_*. Here: the errors, the body, completions, /tokenize,
// /detokenize and the output budget; the chat request is in chat_request.cpp, the generation options both share in
// request_options.cpp, the responses in openai_response.cpp. Tested by tests/server/openai_protocol_test.cpp.
#include "server/openai_protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <limits>

#include "server/request_fields.h"
#include "server/request_options.h"
#include "tokenizer/unicode.h"

namespace dsv4::server {

ApiError::ApiError(int status, std::string type, const std::string& message, std::string param, std::string code)
    : std::runtime_error(tok::utf8_lossy(message)),
      status_(status),
      type_(std::move(type)),
      param_(tok::utf8_lossy(param)),
      code_(std::move(code)) {}

ordered_json ApiError::to_json() const {
    auto or_null = [](const std::string& s) { return s.empty() ? ordered_json(nullptr) : ordered_json(s); };
    ordered_json error = {{"message", what()}, {"type", type_}, {"param", or_null(param_)}, {"code", or_null(code_)}};
    return {{"error", std::move(error)}};
}

void bad_request(const std::string& param, const std::string& message) {
    throw ApiError(400, "invalid_request_error", message, param);
}

namespace {

bool name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// `from` renamed `to` in s[begin, end) wherever it stands as whole path parts (an end of `from` that is a name
// character must not continue a name in s); returns the range's new end.
size_t rename_path_parts(std::string& s, size_t begin, size_t end, std::string_view from, std::string_view to) {
    for (size_t at = s.find(from, begin); at != std::string::npos && at + from.size() <= end; at = s.find(from, at)) {
        const size_t after = at + from.size();
        const bool whole = (!name_char(from.front()) || at == begin || !name_char(s[at - 1])) &&
                           (!name_char(from.back()) || after == end || !name_char(s[after]));
        if (!whole) {
            ++at;
            continue;
        }
        s.replace(at, from.size(), to);
        end = end - from.size() + to.size();
        at += to.size();
    }
    return end;
}

}  // namespace

ApiError with_fields_renamed(const ApiError& e, std::span<const FieldName> names) {
    std::string param = e.param(), message = e.what();
    for (const auto& [chat, other] : names) {
        rename_path_parts(param, 0, param.size(), chat, other);
        for (size_t open = message.find('\''); open != std::string::npos;) {
            const size_t close = message.find('\'', open + 1);
            if (close == std::string::npos) break;
            open = message.find('\'', rename_path_parts(message, open + 1, close, chat, other) + 1);
        }
    }
    return ApiError(e.status(), e.type(), message, param, e.code());
}

ordered_json parse_json_body(std::string_view text) {
    // Copying, comparing and dumping a JSON value recurse; parsing does not. A callback that refuses to keep a
    // too-deep container keeps a 1 MB body of '[' from overflowing the stack later.
    constexpr int kMaxDepth = 128;
    bool too_deep = false;
    const ordered_json::parser_callback_t keep = [&](int depth, ordered_json::parse_event_t event, ordered_json&) {
        const bool opens =
            event == ordered_json::parse_event_t::object_start || event == ordered_json::parse_event_t::array_start;
        if (opens && depth >= kMaxDepth) too_deep = true;
        return !too_deep;
    };
    ordered_json body;
    try {
        body = ordered_json::parse(text.begin(), text.end(), keep);
    } catch (const ordered_json::exception& e) {
        bad_request("", fmt::format("the request body is not valid JSON: {}", e.what()));
    }
    if (too_deep) bad_request("", fmt::format("the request body nests JSON deeper than {} levels", kMaxDepth));
    if (!body.is_object()) bad_request("", "the request body must be a JSON object");
    return body;
}

std::string safe_dump(const ordered_json& j) {
    return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

namespace {

std::vector<int32_t> parse_token_ids(const ordered_json& ids, const std::string& param, const RequestLimits& limits) {
    std::vector<int32_t> out;
    out.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        const ordered_json& id = ids[i];
        if (!id.is_number_integer())
            bad_request(param,
                        fmt::format("'{}' must be token ids (integers); element {} is {}", param, i, describe(id)));
        const bool in_range = id.is_number_unsigned() ? id.get<uint64_t>() < uint64_t(limits.vocab_size)
                                                      : id.get<int64_t>() >= 0 && id.get<int64_t>() < limits.vocab_size;
        if (!in_range)
            bad_request(param, fmt::format("token id {} (element {} of '{}') is outside the vocabulary [0, {})",
                                           id.dump(), i, param, limits.vocab_size));
        out.push_back(int32_t(id.get<int64_t>()));
    }
    return out;
}

}  // namespace

TokenizeRequest parse_tokenize_request(const ordered_json& body, const RequestLimits& limits,
                                       const std::string& served_model) {
    TokenizeRequest t;
    if (body.is_object() && body.contains("messages")) {
        t.chat = parse_chat_request(body, limits, served_model);
        return t;
    }
    return guarded([&] {
        if (!body.is_object()) bad_request("", "the request body must be a JSON object");
        const Fields f(body);
        check_model(f, served_model);
        const auto prompt = f.string("prompt");
        if (!prompt) bad_request("prompt", "'prompt' (a string) or 'messages' is required");
        t.prompt_text = *prompt;
        t.add_bos = f.boolean("add_special_tokens").value_or(true);
        return t;
    });
}

ordered_json tokenize_response(const std::vector<int32_t>& ids, int64_t max_model_len) {
    return {{"count", ids.size()}, {"max_model_len", max_model_len}, {"tokens", ids}, {"token_strs", nullptr}};
}

std::vector<int32_t> parse_detokenize_request(const ordered_json& body, const RequestLimits& limits,
                                              const std::string& served_model) {
    return guarded([&] {
        if (!body.is_object()) bad_request("", "the request body must be a JSON object");
        const Fields f(body);
        check_model(f, served_model);
        const ordered_json* ids = f.array("tokens");
        if (!ids) bad_request("tokens", "'tokens' (an array of token ids) is required");
        return parse_token_ids(*ids, "tokens", limits);
    });
}

ordered_json detokenize_response(const std::string& text) {
    return {{"prompt", text}};
}

CompletionRequest parse_completion_request(const ordered_json& body, const RequestLimits& limits,
                                           const std::string& served_model) {
    return guarded([&] {
        if (!body.is_object()) bad_request("", "the request body must be a JSON object");
        const Fields f(body);
        check_model(f, served_model);
        CompletionRequest r;
        r.model = served_model;
        const ordered_json* p = f.get("prompt");
        const char* forms = "a string, an array of token ids, or an array of those (several prompts)";
        if (!p) bad_request("prompt", fmt::format("'prompt' is required: {}", forms));
        if (p->is_array() && p->empty()) bad_request("prompt", "'prompt' must not be empty");
        // One prompt: a string or ids. Several: an array whose elements are strings or id arrays.
        const bool several = p->is_array() && (p->at(0).is_string() || p->at(0).is_array());
        if (several && int64_t(p->size()) > limits.max_prompts)
            bad_request("prompt",
                        fmt::format("at most {} prompts in one request, got {}", limits.max_prompts, p->size()));
        const auto one_prompt = [&](const ordered_json& v, const std::string& param) {
            CompletionPrompt prompt;
            if (v.is_string()) {
                if (v.get_ref<const std::string&>().empty())
                    bad_request(param, fmt::format("'{}' must not be empty", param));
                prompt.text = v.get<std::string>();
            } else if (v.is_array() && !v.empty() && !v.at(0).is_string() && !v.at(0).is_array()) {
                prompt.ids = parse_token_ids(v, param, limits);
            } else if (v.is_array() && v.empty()) {
                bad_request(param, fmt::format("'{}' must not be empty", param));
            } else {
                bad_request(param, fmt::format("'{}' must be {}, got {}", param,
                                               several ? "a string or an array of token ids" : forms, describe(v)));
            }
            return prompt;
        };
        if (several)
            for (size_t i = 0; i < p->size(); ++i)  // an array of one is one prompt, named as such
                r.prompts.push_back(one_prompt(p->at(i), p->size() == 1 ? "prompt" : fmt::format("prompt[{}]", i)));
        else
            r.prompts.push_back(one_prompt(*p, "prompt"));
        r.echo = f.boolean("echo").value_or(false);
        if (!f.string("suffix").value_or("").empty()) bad_request("suffix", "'suffix' is not supported by this server");
        r.options = parse_options(f, limits, /*chat=*/false, r.echo);
        if (const auto best_of = f.integer("best_of"); best_of && *best_of != r.options.n)
            bad_request("best_of", fmt::format("'best_of' must equal n ({}): choosing the best of more choices is not "
                                               "supported, got {}",
                                               r.options.n, *best_of));
        return r;
    });
}

int64_t resolve_max_tokens(int64_t prompt_tokens, const GenerationOptions& options, const RequestLimits& limits,
                           const std::string& prompt_param) {
    const int64_t context = limits.max_context;
    if (options.max_tokens == 0) {  // echo: the prompt is scored, nothing generated
        if (context > 0 && prompt_tokens > context)
            throw ApiError(400, "invalid_request_error",
                           fmt::format("This model's maximum context length is {} tokens, and the prompt has {} "
                                       "tokens. Shorten the prompt.",
                                       context, prompt_tokens),
                           prompt_param, "context_length_exceeded");
        return 0;
    }
    if (context > 0 && prompt_tokens >= context)
        throw ApiError(400, "invalid_request_error",
                       fmt::format("This model's maximum context length is {} tokens, and the prompt has {} tokens: "
                                   "no room is left for output. Shorten the prompt.",
                                   context, prompt_tokens),
                       prompt_param, "context_length_exceeded");
    if (options.max_tokens) {
        if (context > 0 && prompt_tokens + *options.max_tokens > context)
            throw ApiError(
                400, "invalid_request_error",
                fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                            "tokens ({} in the prompt, {} for the output). Reduce the prompt or max_tokens.",
                            context, prompt_tokens + *options.max_tokens, prompt_tokens, *options.max_tokens),
                "max_tokens", "context_length_exceeded");
        return *options.max_tokens;
    }
    int64_t budget = context > 0 ? context - prompt_tokens : std::numeric_limits<int64_t>::max();
    if (limits.max_output > 0) budget = std::min(budget, limits.max_output);
    return budget;
}

}  // namespace dsv4::server
