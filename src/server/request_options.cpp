// The generation options of a chat or completion request (see request_options.h): each field checked and turned
// into GenerationOptions, every mistake a 400 naming the field. Tested by tests/server/openai_protocol_test.cpp.
#include "server/request_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <random>

#include "core/error.h"

namespace dsv4::server {
namespace {

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

}  // namespace

GenerationOptions parse_options(const Fields& f, const RequestLimits& limits, bool chat, bool echo) {
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
            bad_request("n",
                        fmt::format("'n' must be in [1, {}] (choices per request), got {}", limits.max_choices, *n));
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

}  // namespace dsv4::server
