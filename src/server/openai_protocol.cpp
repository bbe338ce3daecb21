// Requests of the OpenAI-compatible protocol (see openai_protocol.h): the body is read field by field through typed
// getters that turn every mistake into a 400 naming the field, so nothing a client sends reaches the engine
// unchecked and nothing but ApiError leaves parse_*. Responses are in openai_response.cpp. Tested by
// tests/server/openai_protocol_test.cpp.
#include "server/openai_protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <random>

#include "core/error.h"
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

std::string describe(const ordered_json& v) {
    switch (v.type()) {
        case ordered_json::value_t::null:
            return "null";
        case ordered_json::value_t::boolean:
            return v.get<bool>() ? "true" : "false";
        case ordered_json::value_t::string:
            return "a string";
        case ordered_json::value_t::array:
            return "an array";
        case ordered_json::value_t::object:
            return "an object";
        default:
            return v.dump();  // a number
    }
}

// The fields of one JSON object, each read as the type it must have. A JSON null is the field left out: clients
// send explicit nulls for what they do not set. `prefix` makes nested params ("stream_options.include_usage").
class Fields {
  public:
    Fields(const ordered_json& object, std::string prefix = {}) : object_(object), prefix_(std::move(prefix)) {}

    std::string param(std::string_view key) const { return prefix_ + std::string(key); }

    const ordered_json* get(const char* key) const {
        const auto it = object_.find(key);
        return it == object_.end() || it->is_null() ? nullptr : &*it;
    }

    [[noreturn]] void wrong(const char* key, std::string_view what) const {
        bad_request(param(key), fmt::format("'{}' must be {}, got {}", param(key), what, describe(*get(key))));
    }

    std::optional<bool> boolean(const char* key) const {
        const ordered_json* v = get(key);
        if (!v) return std::nullopt;
        if (!v->is_boolean()) wrong(key, "a boolean");
        return v->get<bool>();
    }

    std::optional<double> number(const char* key) const {
        const ordered_json* v = get(key);
        if (!v) return std::nullopt;
        if (!v->is_number()) wrong(key, "a number");
        return v->get<double>();
    }

    // An integer; 100.0 counts (some clients write every number as a float), 1.5 does not. Values beyond int64
    // saturate, so range checks still say "too large".
    std::optional<int64_t> integer(const char* key) const {
        const ordered_json* v = get(key);
        if (!v) return std::nullopt;
        if (v->is_number_unsigned()) return int64_t(std::min<uint64_t>(v->get<uint64_t>(), INT64_MAX));
        if (v->is_number_integer()) return v->get<int64_t>();
        if (!v->is_number_float() || v->get<double>() != std::floor(v->get<double>())) wrong(key, "an integer");
        const double d = v->get<double>();
        return d >= 0x1p63 ? INT64_MAX : d < -0x1p63 ? INT64_MIN : int64_t(d);
    }

    std::optional<std::string> string(const char* key) const {
        const ordered_json* v = get(key);
        if (!v) return std::nullopt;
        if (!v->is_string()) wrong(key, "a string");
        return v->get<std::string>();
    }

    const ordered_json* object(const char* key) const {
        const ordered_json* v = get(key);
        if (v && !v->is_object()) wrong(key, "an object");
        return v;
    }

    const ordered_json* array(const char* key) const {
        const ordered_json* v = get(key);
        if (v && !v->is_array()) wrong(key, "an array");
        return v;
    }

  private:
    const ordered_json& object_;
    std::string prefix_;
};

void check_model(const Fields& f, const std::string& served_model) {
    const auto model = f.string("model");
    if (model && *model != served_model)
        throw ApiError(404, "invalid_request_error",
                       fmt::format("The model '{}' does not exist: this server serves '{}'", *model, served_model),
                       "model", "model_not_found");
}

uint64_t random_seed() {
    std::random_device device;
    return (uint64_t(device()) << 32) ^ device();
}

// Penalties and biases on the logits (runtime/logit_adjust.h): OpenAI's presence_penalty, frequency_penalty and
// logit_bias ({"token id": bias}), vLLM's repetition_penalty and allowed_token_ids.
LogitAdjustments parse_adjustments(const Fields& f, const RequestLimits& limits) {
    LogitAdjustments a;
    auto in_range = [&](const char* key, double low, double high, float& to) {
        const auto v = f.number(key);
        if (!v) return;
        if (!(*v >= low && *v <= high))
            bad_request(key, fmt::format("'{}' must be in [{}, {}], got {}", key, low, high, *v));
        to = float(*v);
    };
    in_range("presence_penalty", -2.0, 2.0, a.presence_penalty);
    in_range("frequency_penalty", -2.0, 2.0, a.frequency_penalty);
    if (const auto v = f.number("repetition_penalty")) {
        if (!(*v > 0.0 && std::isfinite(*v)))
            bad_request("repetition_penalty",
                        fmt::format("'repetition_penalty' must be a positive number (1: off), got {}", *v));
        a.repetition_penalty = float(*v);
    }
    if (const ordered_json* bias = f.object("logit_bias")) {
        for (const auto& [key, value] : bias->items()) {
            int64_t id = -1;
            const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), id);
            if (error != std::errc() || end != key.data() + key.size() || id < 0 || id >= limits.vocab_size)
                bad_request("logit_bias", fmt::format("'logit_bias' keys must be token ids in [0, {}), got '{}'",
                                                      limits.vocab_size, key));
            if (!value.is_number() || !(value.get<double>() >= -100.0 && value.get<double>() <= 100.0))
                bad_request("logit_bias", fmt::format("'logit_bias' values must be numbers in [-100, 100], got {} for "
                                                      "token {}",
                                                      describe(value), key));
            a.logit_bias.emplace_back(int32_t(id), float(value.get<double>()));
        }
    }
    if (const ordered_json* ids = f.get("allowed_token_ids")) {  // vLLM's: only these ids may be drawn
        if (!ids->is_array() || ids->empty())
            bad_request(
                "allowed_token_ids",
                fmt::format("'allowed_token_ids' must be a non-empty array of token ids, got {}", describe(*ids)));
        for (const ordered_json& id : *ids) {
            if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= limits.vocab_size)
                bad_request("allowed_token_ids",
                            fmt::format("'allowed_token_ids' must hold token ids in [0, {}), got {}", limits.vocab_size,
                                        describe(id)));
            a.allowed_ids.push_back(int32_t(id.get<int64_t>()));
        }
        std::sort(a.allowed_ids.begin(), a.allowed_ids.end());
        a.allowed_ids.erase(std::unique(a.allowed_ids.begin(), a.allowed_ids.end()), a.allowed_ids.end());
    }
    try {
        validate_adjustments(a, limits.vocab_size);  // the checks above cover it; a disagreement is still a 400
    } catch (const Error& e) {
        bad_request("", e.what());
    }
    return a;
}

std::vector<std::string> parse_stop(const Fields& f, const RequestLimits& limits) {
    const ordered_json* v = f.get("stop");
    std::vector<std::string> stop;
    if (!v) return stop;
    if (v->is_string()) {
        stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
        for (const ordered_json& s : *v) {
            if (!s.is_string()) bad_request("stop", "'stop' must be a string or an array of strings");
            stop.push_back(s.get<std::string>());
        }
    } else {
        f.wrong("stop", "a string or an array of strings");
    }
    if (int64_t(stop.size()) > limits.max_stop_strings)
        bad_request("stop", fmt::format("'stop' holds {} strings; this server allows at most {}", stop.size(),
                                        limits.max_stop_strings));
    for (const std::string& s : stop)
        if (s.empty()) bad_request("stop", "stop strings must not be empty");
    return stop;
}

// vLLM's stop_token_ids (ids of the vocabulary, as many as stop strings), min_tokens (at most max_tokens),
// include_stop_str_in_output and bad_words (as many as stop strings).
void parse_vllm_stops(const Fields& f, const RequestLimits& limits, GenerationOptions& o) {
    if (const ordered_json* ids = f.array("stop_token_ids")) {
        if (int64_t(ids->size()) > limits.max_stop_strings)
            bad_request("stop_token_ids", fmt::format("'stop_token_ids' holds {} ids; this server allows at most {}",
                                                      ids->size(), limits.max_stop_strings));
        for (const ordered_json& id : *ids) {
            if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= limits.vocab_size)
                bad_request("stop_token_ids", fmt::format("'stop_token_ids' must hold token ids in [0, {}), got {}",
                                                          limits.vocab_size, id.dump()));
            o.stop_token_ids.push_back(int32_t(id.get<int64_t>()));
        }
    }
    if (const auto m = f.integer("min_tokens")) {
        if (*m < 0) bad_request("min_tokens", fmt::format("'min_tokens' must be at least 0, got {}", *m));
        if (o.max_tokens && *m > *o.max_tokens)
            bad_request("min_tokens",
                        fmt::format("'min_tokens' ({}) must not exceed the tokens asked for ({})", *m, *o.max_tokens));
        o.min_tokens = *m;
    }
    o.include_stop_str = f.boolean("include_stop_str_in_output").value_or(false);
    if (const ordered_json* words = f.array("bad_words")) {
        if (int64_t(words->size()) > limits.max_stop_strings)
            bad_request("bad_words", fmt::format("'bad_words' holds {} words; this server allows at most {}",
                                                 words->size(), limits.max_stop_strings));
        for (const ordered_json& w : *words) {
            if (!w.is_string() || w.get_ref<const std::string&>().find_first_not_of(' ') == std::string::npos)
                bad_request("bad_words", fmt::format("'bad_words' must hold words (strings with more than spaces), "
                                                     "got {}",
                                                     describe(w)));
            o.bad_words.push_back(w.get<std::string>());
        }
    }
}

// vLLM's truncate_prompt_tokens: k >= 1 keeps the prompt's last k tokens, -1 the last max_context. Not with echo,
// whose text is the prompt as sent.
void parse_truncation(const Fields& f, bool echo, GenerationOptions& o) {
    const auto t = f.integer("truncate_prompt_tokens");
    if (!t) return;
    if (*t == 0 || *t < -1)
        bad_request("truncate_prompt_tokens",
                    fmt::format("'truncate_prompt_tokens' must be at least 1 (the prompt's last tokens kept) or -1 "
                                "(the last max_model_len), got {}",
                                *t));
    if (echo)
        bad_request("truncate_prompt_tokens", "'truncate_prompt_tokens' with 'echo': the echo is the prompt as sent");
    o.truncate_prompt_tokens = *t;
}

constexpr int64_t kMaxChoices = 1024;

// vLLM's guided_choice: one of a list of strings (at least one, at most kMaxChoices).
void parse_guided_choice(const ordered_json& list, const std::string& param, GenerationOptions& o) {
    if (!list.is_array() || list.empty() || int64_t(list.size()) > kMaxChoices)
        bad_request(param, fmt::format("'{}' must be a list of 1 to {} strings", param, kMaxChoices));
    std::vector<std::string> choices;
    for (const ordered_json& c : list) {
        if (!c.is_string()) bad_request(param, fmt::format("'{}' must hold strings, got {}", param, c.dump()));
        choices.push_back(c.get<std::string>());
    }
    o.choices = std::make_shared<const ChoiceList>(std::move(choices));
    o.response_format = ResponseFormat::kChoice;
}

// vLLM's guided_json (a schema, or a JSON text of one) and guided_choice, and their newer spelling
// structured_outputs {"json": ...} / {"choice": [...]}: one structured reply, as response_format asks for one.
void parse_guided_json(const Fields& f, GenerationOptions& o) {
    const ordered_json* schema = f.get("guided_json");
    const ordered_json* choice = f.get("guided_choice");
    std::string param = schema ? "guided_json" : "guided_choice";
    if (const ordered_json* so = f.object("structured_outputs")) {
        for (const auto& [key, value] : so->items())
            if (key != "json" && key != "choice" && !value.is_null())
                bad_request("structured_outputs." + key,
                            fmt::format("'structured_outputs.{}' is not supported (\"json\", a JSON schema, and "
                                        "\"choice\", a list of strings, are enforced)",
                                        key));
        for (const char* key : {"json", "choice"})
            if (so->contains(key) && !so->at(key).is_null()) {
                (std::string_view(key) == "json" ? schema : choice) = &so->at(key);
                param = std::string("structured_outputs.") + key;
            }
    }
    if (!schema && !choice) return;
    if (o.response_format != ResponseFormat::kText || (schema && choice))
        bad_request(param, fmt::format("'{}' beside another structured output ('response_format', guided_json, "
                                       "guided_choice): ask for one",
                                       param));
    if (choice) return parse_guided_choice(*choice, param, o);
    try {
        const nlohmann::json s =
            schema->is_string() ? nlohmann::json::parse(schema->get<std::string>()) : nlohmann::json(*schema);
        o.schema = compile_schema(s);
    } catch (const nlohmann::json::exception& e) {
        bad_request(param, fmt::format("'{}' is not a JSON schema: {}", param, e.what()));
    } catch (const Error& e) {
        bad_request(param, fmt::format("'{}' {}", param, e.what()));
    }
    o.response_format = ResponseFormat::kJsonSchema;
}

// vLLM's extra fields this server knows and does not honour: a 400 when they ask for anything but their default,
// never silently ignored (a guided_regex left out would not be enforced).
void refuse_vllm_extras(const Fields& f) {
    struct Extra {
        const char* key;
        const char* why;
    };
    static constexpr Extra kRefused[] = {
        {"guided_regex", "only JSON and choices are enforced (guided_json, guided_choice, response_format)"},
        {"guided_grammar", "only JSON and choices are enforced (guided_json, guided_choice, response_format)"},
        {"structural_tag", "only JSON and choices are enforced (guided_json, guided_choice, response_format)"},
        {"logits_processors", "custom logits processors are not supported"},
        {"prompt_logprobs",
         "prompt_logprobs is not supported (/v1/completions with echo and logprobs scores a "
         "prompt)"},
    };
    for (const Extra& e : kRefused) {
        const ordered_json* v = f.get(e.key);
        const bool asked = v && !(v->is_boolean() && !v->get<bool>()) && !(v->is_array() && v->empty());
        if (asked) bad_request(e.key, fmt::format("'{}': {}", e.key, e.why));
    }
    if (f.boolean("use_beam_search").value_or(false))
        bad_request("use_beam_search", "'use_beam_search': beam search is not supported");
}

// The fields both endpoints share: sampling, length, stop strings, logprobs, streaming.
// echo: a completion that returns its prompt, which may ask for no tokens (max_tokens 0: the prompt scored only).
void parse_response_format(const Fields& body, GenerationOptions& o) {
    const ordered_json* rf = body.object("response_format");
    if (!rf) return;
    const Fields f(*rf, "response_format.");
    const std::optional<std::string> type = f.string("type");
    if (!type) bad_request("response_format.type", "'response_format.type' is required");
    if (*type == "text") return;
    if (*type == "json_object") {
        o.response_format = ResponseFormat::kJsonObject;
        return;
    }
    if (*type != "json_schema")
        bad_request(
            "response_format.type",
            fmt::format("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got \"{}\"",
                        *type));
    const ordered_json* js = f.object("json_schema");
    if (!js) bad_request("response_format.json_schema", "'response_format.json_schema' is required with its type");
    const Fields schema_fields(*js, "response_format.json_schema.");
    schema_fields.string("name");     // OpenAI requires it; it names the schema and changes nothing here
    schema_fields.boolean("strict");  // the schema is always enforced
    const ordered_json* schema = schema_fields.get("schema");
    if (!schema) bad_request("response_format.json_schema.schema", "'response_format.json_schema.schema' is required");
    try {
        o.schema = compile_schema(nlohmann::json(*schema));
    } catch (const Error& e) {
        bad_request("response_format.json_schema.schema",
                    fmt::format("'response_format.json_schema.schema' {}", e.what()));
    }
    o.response_format = ResponseFormat::kJsonSchema;
}

GenerationOptions parse_options(const Fields& f, const RequestLimits& limits, bool chat, bool echo = false) {
    GenerationOptions o;
    SamplingParams& s = o.sampling;
    const double temperature = f.number("temperature").value_or(1.0);
    if (!(temperature >= 0.0 && temperature <= 2.0))
        bad_request("temperature", fmt::format("'temperature' must be in [0, 2] (0: greedy), got {}", temperature));
    s.greedy = temperature == 0.0;
    if (!s.greedy) s.temperature = float(temperature);
    const double top_p = f.number("top_p").value_or(1.0);
    if (!(top_p > 0.0 && top_p <= 1.0)) bad_request("top_p", fmt::format("'top_p' must be in (0, 1], got {}", top_p));
    s.top_p = float(top_p);
    const int64_t top_k = f.integer("top_k").value_or(0);
    if (top_k < -1)
        bad_request("top_k", fmt::format("'top_k' must be -1 or 0 (no limit) or a positive count, got {}", top_k));
    s.top_k = std::max<int64_t>(top_k, 0);
    const double min_p = f.number("min_p").value_or(0.0);
    if (!(min_p >= 0.0 && min_p <= 1.0)) bad_request("min_p", fmt::format("'min_p' must be in [0, 1], got {}", min_p));
    s.min_p = float(min_p);
    const ordered_json* seed = f.get("seed");  // any 64-bit integer; negative ones wrap, as vLLM's
    s.seed = seed && seed->is_number_unsigned() ? seed->get<uint64_t>()
             : seed                             ? uint64_t(*f.integer("seed"))
                                                : random_seed();
    try {
        validate_sampling(s);  // the checks above cover it; a disagreement must still reach the client as a 400
    } catch (const Error& e) {
        bad_request("", e.what());
    }

    if (const auto n = f.integer("n"); n) {
        if (*n < 1 || *n > limits.max_choices)
            bad_request("n", fmt::format("'n' must be in [1, {}] (choices per request), got {}", limits.max_choices, *n));
        o.n = int(*n);
    }
    o.adjust = parse_adjustments(f, limits);

    for (const char* key : {"max_tokens", "max_completion_tokens"}) {
        if (!chat && std::string_view(key) == "max_completion_tokens") continue;
        const auto v = f.integer(key);
        if (!v) continue;
        if (*v < (echo ? 0 : 1))
            bad_request(key, fmt::format("'{}' must be at least {}, got {}", key, echo ? 0 : 1, *v));
        if (limits.max_output > 0 && *v > limits.max_output)
            bad_request(key, fmt::format("'{}' is {}; this server generates at most {} tokens per request", key, *v,
                                         limits.max_output));
        o.max_tokens = *v;  // max_completion_tokens comes second and wins
    }
    o.stop = parse_stop(f, limits);
    parse_vllm_stops(f, limits, o);

    const int max_top = limits.max_top_logprobs;
    if (chat) {
        o.logprobs = f.boolean("logprobs").value_or(false);
        const int64_t top = f.integer("top_logprobs").value_or(0);
        if (top < 0 || top > max_top)
            bad_request("top_logprobs", fmt::format("'top_logprobs' must be in [0, {}], got {}", max_top, top));
        if (top > 0 && !o.logprobs) bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        o.top_logprobs = int(top);
    } else if (const auto n = f.integer("logprobs")) {
        if (*n < 0 || *n > max_top)
            bad_request("logprobs", fmt::format("'logprobs' must be in [0, {}], got {}", max_top, *n));
        o.logprobs = true;
        o.top_logprobs = int(*n);
    }

    o.stream = f.boolean("stream").value_or(false);
    if (const ordered_json* so = f.object("stream_options")) {
        if (!o.stream) bad_request("stream_options", "'stream_options' is only allowed with 'stream': true");
        o.include_usage = Fields(*so, "stream_options.").boolean("include_usage").value_or(false);
    }
    o.ignore_eos = f.boolean("ignore_eos").value_or(false);
    parse_response_format(f, o);
    parse_guided_json(f, o);
    parse_truncation(f, echo, o);
    refuse_vllm_extras(f);
    if (!o.adjust.allowed_ids.empty() && o.response_format != ResponseFormat::kText)
        bad_request("allowed_token_ids",
                    "'allowed_token_ids' with a structured 'response_format' (or guided_json / guided_choice): the "
                    "format decides which ids may come");
    if (o.ignore_eos && o.response_format != ResponseFormat::kText)
        bad_request("ignore_eos",
                    "'ignore_eos' with 'response_format': a structured reply ends with its value (EOS "
                    "is all that may follow it)");
    return o;
}

// OpenAI's list content [{"type":"text","text":...}] as one string, joined as the 0731 encoder joins text blocks
// (spec §3.7: "\n\n"); done here so that both encoder eras accept it. Other part types (images, audio) are refused:
// the model reads text only.
std::string join_text_parts(const ordered_json& parts, const std::string& param) {
    std::string text;
    for (size_t i = 0; i < parts.size(); ++i) {
        const std::string part = fmt::format("{}[{}]", param, i);
        if (!parts[i].is_object())
            bad_request(part, fmt::format("'{}' must be an object {{\"type\": \"text\", \"text\": ...}}", part));
        const Fields f(parts[i], part + ".");
        const auto type = f.string("type");
        if (type != "text")
            bad_request(part + ".type", fmt::format("'{}.type' must be \"text\": only text content parts are "
                                                    "supported, got {}",
                                                    part, type ? "'" + *type + "'" : "none"));
        const auto t = f.string("text");
        if (!t) bad_request(part + ".text", fmt::format("'{}.text' is required", part));
        text += (i == 0 ? "" : "\n\n") + *t;
    }
    return text;
}

void check_tool_calls(const ordered_json& calls, const std::string& param) {
    for (size_t i = 0; i < calls.size(); ++i) {
        const std::string call = fmt::format("{}[{}]", param, i);
        if (!calls[i].is_object()) bad_request(call, fmt::format("'{}' must be an object", call));
        const Fields f(calls[i], call + ".");
        f.string("id");  // type check only (here and below): the renderer reads them as given
        if (const auto type = f.string("type"); type && *type != "function")
            bad_request(call + ".type", fmt::format("'{}.type' must be \"function\"", call));
        const ordered_json* fn = f.object("function");
        if (!fn) bad_request(call + ".function", fmt::format("'{}.function' is required", call));
        const Fields ff(*fn, call + ".function.");
        if (!ff.string("name")) bad_request(ff.param("name"), fmt::format("'{}' is required", ff.param("name")));
        const ordered_json* args = ff.get("arguments");
        if (!args || !(args->is_string() || args->is_object()))
            bad_request(ff.param("arguments"),
                        fmt::format("'{}' must be a JSON string (or an object)", ff.param("arguments")));
    }
}

// Messages checked for the types the renderer relies on, list contents joined; the rest (roles it does not know,
// an empty developer message, arguments that are not a JSON object) is the renderer's to refuse.
ordered_json parse_messages(const Fields& body) {
    const ordered_json* messages = body.array("messages");
    if (!messages || messages->empty())
        bad_request("messages", "'messages' must be a non-empty array of message objects");
    ordered_json out = ordered_json::array();
    for (size_t i = 0; i < messages->size(); ++i) {
        const ordered_json& m = (*messages)[i];
        const std::string param = fmt::format("messages[{}]", i);
        if (!m.is_object()) bad_request(param, fmt::format("'{}' must be an object, got {}", param, describe(m)));
        const Fields f(m, param + ".");
        const auto role = f.string("role");
        if (!role) bad_request(f.param("role"), fmt::format("'{}' is required", f.param("role")));
        f.string("name");  // type check only: the encoder does not render names
        ordered_json message = m;
        const ordered_json* content = f.get("content");
        if (content && content->is_array()) {
            message["content"] = join_text_parts(*content, f.param("content"));
        } else if (content && !content->is_string()) {
            f.wrong("content", "a string or an array of text parts");
        } else if (!content && (role == "system" || role == "developer" || role == "user" || role == "tool")) {
            bad_request(f.param("content"), fmt::format("'{}' is required in a {} message: a string or an array "
                                                        "of text parts",
                                                        f.param("content"), *role));
        }
        if (*role == "assistant") {
            // vLLM's copy of the encoder calls it `reasoning`; both spellings are read.
            const auto reasoning = f.string("reasoning_content");
            if (const auto alias = f.string("reasoning"); alias && !reasoning) message["reasoning_content"] = *alias;
            if (const ordered_json* calls = f.array("tool_calls")) check_tool_calls(*calls, f.param("tool_calls"));
        }
        if (*role == "tool" && !f.string("tool_call_id"))
            bad_request(f.param("tool_call_id"), fmt::format("a tool message needs '{}'", f.param("tool_call_id")));
        out.push_back(std::move(message));
    }
    return out;
}

ordered_json parse_tools(const Fields& body) {
    const ordered_json* tools = body.array("tools");
    if (!tools) return ordered_json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
        const std::string param = fmt::format("tools[{}]", i);
        const char* shape = R"(must be {"type": "function", "function": {"name": ..., "parameters": {...}}})";
        if (!(*tools)[i].is_object()) bad_request(param, fmt::format("'{}' {}", param, shape));
        const Fields f((*tools)[i], param + ".");
        if (f.string("type").value_or("function") != "function")
            bad_request(f.param("type"), fmt::format("'{}' must be \"function\"", f.param("type")));
        const ordered_json* fn = f.object("function");
        if (!fn) bad_request(f.param("function"), fmt::format("'{}' {}", param, shape));
        const Fields ff(*fn, param + ".function.");
        if (ff.string("name").value_or("").empty())
            bad_request(ff.param("name"), fmt::format("'{}' must be a non-empty string", ff.param("name")));
        ff.string("description");
        ff.object("parameters");
        ff.boolean("strict");
    }
    return *tools;
}

// The tool calls a reply must make, or null where the model's are left as they are: with tool_choice "required" or a
// named function the reply is the block (of every tool, or of that one); with parallel_tool_calls false or a strict
// tool the block may follow free content. A strict tool's calls satisfy its parameters schema (the subset of
// structured/json_schema.h: anything outside it is a 400, never ignored); another tool's have any arguments.
bool strict_tool(const ordered_json& function) {
    const auto it = function.find("strict");
    return it != function.end() && it->is_boolean() && it->get<bool>();
}

std::shared_ptr<const ToolCallGrammar> tool_call_grammar(const ordered_json& tools, const std::string& tool_choice,
                                                         bool parallel_calls) {
    if (tools.empty() || tool_choice == "none") return nullptr;
    const bool forced = tool_choice != "auto";
    bool strict = false;
    for (const ordered_json& t : tools) strict = strict || strict_tool(t.at("function"));
    if (!forced && parallel_calls && !strict) return nullptr;
    std::vector<ToolSpec> specs;
    for (size_t i = 0; i < tools.size(); ++i) {
        const ordered_json& fn = tools[i].at("function");
        const std::string name = fn.at("name");
        if (tool_choice != "auto" && tool_choice != "required" && name != tool_choice) continue;
        ToolSpec spec{.name = name, .parameters = CompiledSchema::any_object()};
        if (strict_tool(fn)) {
            const std::string param = fmt::format("tools[{}].function.parameters", i);
            const nlohmann::json schema = fn.contains("parameters") && !fn.at("parameters").is_null()
                                              ? nlohmann::json(fn.at("parameters"))
                                              : nlohmann::json{{"type", "object"}, {"additionalProperties", false}};
            try {
                spec.parameters = compile_schema(schema);
            } catch (const Error& e) {
                bad_request(param, fmt::format("'{}' (a strict tool's, enforced) {}; with \"strict\": false the "
                                               "arguments are left to the model",
                                               param, e.what()));
            }
        }
        specs.push_back(std::move(spec));
    }
    try {
        return std::make_shared<const ToolCallGrammar>(
            std::move(specs), forced ? ToolCallGrammar::Start::kAtOnce : ToolCallGrammar::Start::kAfterContent,
            !parallel_calls);
    } catch (const Error& e) {
        bad_request("tools", fmt::format("'tools': {}", e.what()));
    }
}

// Whether the reply continues the last message, an assistant's partial content: DeepSeek's "prefix": true on it,
// vLLM's "continue_final_message": true, or the encoder's own "wo_eos". That message is then rendered without its
// EOS (spec/dsv4-encoding.md §3.4, "wo_eos"). A conversation that ends with an assistant message otherwise has no
// cue for a reply (the encoder writes "<｜Assistant｜>" only after a user turn): refused, as is a "prefix" anywhere
// but on the last message.
bool continues_final_message(const Fields& body, ordered_json& messages) {
    const size_t last = messages.size() - 1;
    bool prefix = false;
    for (size_t i = 0; i < messages.size(); ++i) {
        const Fields m(messages[i], fmt::format("messages[{}].", i));
        if (!m.boolean("prefix").value_or(false)) continue;
        if (i != last || messages[i].value("role", "") != "assistant")
            bad_request(m.param("prefix"), fmt::format("'{}': only the last message, an assistant's, may be a prefix "
                                                       "to continue",
                                                       m.param("prefix")));
        prefix = true;
    }
    const bool continue_final = body.boolean("continue_final_message").value_or(false);
    ordered_json& final = messages[last];
    const std::string param = fmt::format("messages[{}]", last);
    const bool assistant = final.value("role", "") == "assistant";
    if (continue_final && !assistant)
        bad_request("continue_final_message",
                    "'continue_final_message': the last message must be an assistant's (the text to continue)");
    const auto wo_eos = final.find("wo_eos");
    const bool continues = prefix || continue_final || (assistant && wo_eos != final.end() && *wo_eos == true);
    if (body.boolean("add_generation_prompt") == false && !continues)
        bad_request("add_generation_prompt",
                    "'add_generation_prompt': false is supported only to continue the last (assistant) message");
    if (!continues) {
        if (assistant && !final.contains("task"))
            bad_request(param, fmt::format("'{}': the conversation ends with an assistant message, which leaves no "
                                           "turn to reply in: set \"prefix\": true on it (or "
                                           "'continue_final_message') to continue its content, or end with a user "
                                           "or tool message",
                                           param));
        return false;
    }
    if (final.contains("tool_calls") && !final.at("tool_calls").is_null() && !final.at("tool_calls").empty())
        bad_request(param + ".tool_calls",
                    fmt::format("'{}.tool_calls': an assistant message to continue may hold content only", param));
    final.erase("prefix");
    final["wo_eos"] = true;
    return true;
}

// "none", "auto", "required" or the name of a tool. The prompt is the same for all but "none" (which drops the
// tools); tool_call_grammar enforces what "required" and a named one ask of the reply.
std::string parse_tool_choice(const Fields& body, const ordered_json& tools) {
    const ordered_json* v = body.get("tool_choice");
    if (!v) return "auto";
    if (v->is_string()) {
        const std::string choice = v->get<std::string>();
        if (choice != "none" && choice != "auto" && choice != "required")
            bad_request("tool_choice", fmt::format("'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                                   "{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got "
                                                   "\"{}\"",
                                                   choice));
        if (choice == "required" && tools.empty())
            bad_request("tool_choice", "'tool_choice': \"required\" needs 'tools'");
        return choice;
    }
    if (!v->is_object()) body.wrong("tool_choice", "a string or an object");
    const Fields f(*v, "tool_choice.");
    if (f.string("type") != "function") bad_request("tool_choice.type", "'tool_choice.type' must be \"function\"");
    const ordered_json* fn = f.object("function");
    const auto name = fn ? Fields(*fn, "tool_choice.function.").string("name") : std::nullopt;
    if (!name) bad_request("tool_choice.function.name", "'tool_choice.function.name' is required");
    for (const ordered_json& t : tools)
        if (t.at("function").at("name") == *name) return *name;
    bad_request("tool_choice", fmt::format("'tool_choice' names the function '{}', which is not in 'tools'", *name));
}

// §3.8: request-level tools go to messages[0] when it is a system or developer message, else into a new,
// contentless system message in front.
void attach_tools(ordered_json& messages, const ordered_json& tools) {
    const std::string role = messages[0].value("role", "");
    if (role == "system" || role == "developer") {
        messages[0]["tools"] = tools;
    } else {
        messages.insert(messages.begin(), ordered_json{{"role", "system"}, {"tools", tools}});
    }
}

tok::RenderOptions parse_thinking(const Fields& body) {
    std::optional<bool> thinking;  // set when the request says it; on when any of its switches says on
    auto turn = [&](bool on) { thinking = thinking.value_or(false) || on; };
    if (const ordered_json* kwargs = body.object("chat_template_kwargs")) {
        const Fields k(*kwargs, "chat_template_kwargs.");
        if (const auto on = k.boolean("thinking")) turn(*on);
        if (const auto on = k.boolean("enable_thinking")) turn(*on);
    }
    if (const ordered_json* t = body.get("thinking")) {
        if (t->is_boolean()) {
            turn(t->get<bool>());
        } else if (t->is_object()) {
            const auto type = Fields(*t, "thinking.").string("type");
            if (type != "enabled" && type != "disabled")
                bad_request("thinking.type", "'thinking.type' must be \"enabled\" or \"disabled\"");
            turn(type == "enabled");
        } else {
            body.wrong("thinking", R"(a boolean or {"type": "enabled" | "disabled"})");
        }
    }
    const ordered_json* e = body.get("reasoning_effort");
    if (e && !e->is_string()) body.wrong("reasoning_effort", "a string or null");
    const std::optional<std::string> effort = e ? std::optional(e->get<std::string>()) : std::nullopt;

    tok::RenderOptions render;
    bool on = thinking.value_or(effort && *effort != "none");
    if (on && effort == "none") on = false;
    if (on) {
        render.thinking_mode = tok::ThinkingMode::kThinking;
        if (effort == "max") {
            render.reasoning_effort = "max";
        } else if (effort == "low" || effort == "minimal" || effort == "medium") {
            render.reasoning_effort = "low";
        } else if (effort) {
            render.reasoning_effort = "high";
        }
    }
    return render;
}

// Everything but ApiError becomes one: a JSON access the checks missed is still the client's bad request.
template <typename F>
auto guarded(F&& parse) {
    try {
        return parse();
    } catch (const ApiError&) {
        throw;
    } catch (const ordered_json::exception& e) {
        bad_request("", fmt::format("invalid request: {}", e.what()));
    } catch (const std::exception& e) {
        throw ApiError(500, "internal_error", fmt::format("the request could not be read: {}", e.what()));
    }
}

}  // namespace

std::vector<std::vector<int32_t>> tokenize_bad_words(const std::vector<std::string>& words,
                                                     const tok::Tokenizer& tokenizer) {
    std::vector<std::vector<int32_t>> out;
    for (const std::string& word : words) {
        const std::string bare = word.substr(word.find_first_not_of(' '));
        std::vector<int32_t> first = tokenizer.encode(bare);
        std::vector<int32_t> spaced = tokenizer.encode(" " + bare);
        const bool other = !spaced.empty() && spaced.size() == first.size() && spaced[0] != first[0];
        out.push_back(std::move(first));
        if (other) out.push_back(std::move(spaced));
    }
    return out;
}

ChatRequest parse_chat_request(const ordered_json& body, const RequestLimits& limits, const std::string& served_model) {
    return guarded([&] {
        if (!body.is_object()) bad_request("", "the request body must be a JSON object");
        const Fields f(body);
        check_model(f, served_model);
        ChatRequest r;
        r.model = served_model;
        r.messages = parse_messages(f);
        r.continues_final = continues_final_message(f, r.messages);
        const ordered_json tools = parse_tools(f);
        const std::string tool_choice = parse_tool_choice(f, tools);
        r.has_tools = !tools.empty() && tool_choice != "none";
        if (r.has_tools) attach_tools(r.messages, tools);
        r.render = parse_thinking(f);
        r.options = parse_options(f, limits, /*chat=*/true);
        r.options.tool_calls = tool_call_grammar(tools, tool_choice, f.boolean("parallel_tool_calls").value_or(true));
        if (r.options.tool_calls && !r.options.adjust.allowed_ids.empty())
            bad_request("allowed_token_ids",
                        "'allowed_token_ids' with enforced tool calls: the calls' grammar decides which ids may come");
        if (r.options.tool_calls && r.options.ignore_eos)
            bad_request("ignore_eos",
                        "'ignore_eos' with enforced tool calls (tool_choice \"required\" or a named function, "
                        "'parallel_tool_calls': false, a strict tool): the reply ends after its tool calls");
        if (const ordered_json* m = f.array("modalities"))
            for (const ordered_json& x : *m)
                if (x != "text")
                    bad_request("modalities", fmt::format("'modalities' may only hold \"text\" (this model writes "
                                                          "text), got {}",
                                                          x.dump()));
        if (f.get("audio")) bad_request("audio", "'audio' output is not supported: this model writes text");
        if (r.continues_final && (r.options.tool_calls || r.options.response_format != ResponseFormat::kText))
            bad_request(r.options.tool_calls ? "tool_choice" : "response_format",
                        "continuing an assistant message ('prefix') beside enforced tool calls or a "
                        "'response_format' is not supported: the constraint would begin inside the given text");
        if (r.has_tools && r.options.response_format != ResponseFormat::kText)
            bad_request(
                "response_format",
                "'response_format' json_object with 'tools' is not supported: a reply cannot be both tool calls "
                "and one JSON object (leave one out, or set 'tool_choice' to \"none\")");
        return r;
    });
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
