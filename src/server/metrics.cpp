// Metrics: see metrics.h. Buckets as vLLM's serving histograms use, in seconds.
#include "server/metrics.h"

#include <fmt/format.h>

namespace dsv4::server {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
    size_t i = 0;
    while (i < bounds_.size() && value > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += value;
    ++count_;
}

void Histogram::render(const std::string& name, std::string& out) const {
    int64_t cumulative = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
        cumulative += counts_[i];
        out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
    }
    out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
}

Metrics::Metrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
             80.0}),
      itl_({0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
            2.5}) {}

void Metrics::time_to_first_token(double seconds) {
    std::lock_guard lock(mutex_);
    ttft_.observe(seconds);
}

void Metrics::inter_token_latency(double seconds) {
    std::lock_guard lock(mutex_);
    itl_.observe(seconds);
}

void Metrics::finished(const std::string& finish_reason) {
    std::lock_guard lock(mutex_);
    ++finished_[finish_reason];
}

void Metrics::constrained(const std::string& kind) {
    std::lock_guard lock(mutex_);
    ++constrained_[kind];
}

void Metrics::rejected() {
    std::lock_guard lock(mutex_);
    ++rejected_;
}

std::string Metrics::render(const Engine::Stats* engine, const ConnectionGauges& connections) const {
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, int64_t value) {
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
    };
    if (engine) {
        const Engine::Stats& s = *engine;
        metric("dsv4_requests_running", "gauge", "Requests being computed.", s.running);
        metric("dsv4_requests_waiting", "gauge", "Requests queued for a place.", s.waiting);
        metric("dsv4_prompt_tokens_total", "counter", "Prompt tokens of admitted requests (cached ones included).",
               s.prompt_tokens);
        metric("dsv4_generation_tokens_total", "counter", "Generated tokens.", s.generated_tokens);
        metric("dsv4_generation_tokens_drawn_on_device_total", "counter",
               "Generated tokens drawn where the logits are (the GPU); the others were drawn on the host.",
               s.backend_draws);
        metric("dsv4_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.",
               s.cached_tokens);
        metric("dsv4_prefix_cache_queries_total", "counter", "Prefix cache look-ups.", s.prefix_queries);
        metric("dsv4_prefix_cache_hits_total", "counter", "Prefix cache look-ups that found a prefix.", s.prefix_hits);
        metric("dsv4_prefix_cache_entries", "gauge", "Prefixes held by the cache.", s.prefix_entries);
        metric("dsv4_sequences_in_use", "gauge", "Backend sequences held (running requests and cached prefixes).",
               s.sequences_held);
        metric("dsv4_state_pool_pages_used", "gauge", "Cache pages of the GPU state pool in use (0 on the CPU).",
               s.pool.pages_used);
        metric("dsv4_state_pool_pages_total", "gauge", "Cache pages of the GPU state pool (0 on the CPU).",
               s.pool.pages_total);
        metric("dsv4_engine_steps_total", "counter", "Engine steps (batched forwards).", s.steps);
    }
    std::lock_guard lock(mutex_);
    out += "# HELP dsv4_requests_total Finished requests by finish reason (each choice of a request with n > 1).\n# TYPE dsv4_requests_total counter\n";
    for (const char* reason : {"stop", "length", "tool_calls", "cancelled", "error"}) {
        const auto it = finished_.find(reason);
        out += fmt::format("dsv4_requests_total{{finish_reason=\"{}\"}} {}\n", reason,
                           it == finished_.end() ? 0 : it->second);
    }
    metric("dsv4_requests_rejected_total", "counter", "Requests answered with an error before they ran.", rejected_);
    out +=
        "# HELP dsv4_requests_constrained_total Requests whose reply was constrained token by token, by kind "
        "(response_format json_object / json_schema, guided_choice: choice; tool_call: tool_choice, strict tools, "
        "parallel_tool_calls).\n"
        "# TYPE dsv4_requests_constrained_total counter\n";
    for (const char* kind : {"json_object", "json_schema", "choice", "tool_call"}) {
        const auto it = constrained_.find(kind);
        out += fmt::format("dsv4_requests_constrained_total{{kind=\"{}\"}} {}\n", kind,
                           it == constrained_.end() ? 0 : it->second);
    }
    metric("dsv4_http_connections_limit", "gauge", "Connections served at once (--max-connections).",
           connections.limit);
    metric("dsv4_http_connections_busy", "gauge", "Connections on a server thread (this scrape's among them).",
           connections.busy);
    metric("dsv4_http_connections_waiting", "gauge",
           "Accepted connections waiting for a server thread (above 0: every thread is busy; raise --max-connections).",
           connections.waiting);
    out += "# HELP dsv4_time_to_first_token_seconds Time from a request reaching a server thread to its first token "
           "(a wait for a thread is not in it: dsv4_http_connections_waiting).\n"
           "# TYPE dsv4_time_to_first_token_seconds histogram\n";
    ttft_.render("dsv4_time_to_first_token_seconds", out);
    out += "# HELP dsv4_inter_token_latency_seconds Time between consecutive tokens of a request.\n"
           "# TYPE dsv4_inter_token_latency_seconds histogram\n";
    itl_.render("dsv4_inter_token_latency_seconds", out);
    return out;
}

}  // namespace dsv4::server
