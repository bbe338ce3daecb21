// What GET /metrics reports, in Prometheus' text format (version 0.0.4): the engine's gauges and counters
// (requests running / waiting, prompt, generated and cached-prefix tokens, state-pool use) and the server's own
// latency histograms (time to first token, inter-token latency) and finished requests by finish_reason.
// Thread-safe. Tested by tests/server/metrics_test.cpp and end to end by tests/server_e2e.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace dsv4::server {

// A Prometheus histogram with fixed upper bounds (seconds).
class Histogram {
  public:
    explicit Histogram(std::vector<double> bounds);
    void observe(double value);
    // name_bucket{le="..."} lines (cumulative, +Inf last), name_sum, name_count.
    void render(const std::string& name, std::string& out) const;

  private:
    std::vector<double> bounds_;
    std::vector<int64_t> counts_;  // per bucket, not cumulative; the last one is +Inf
    double sum_ = 0.0;
    int64_t count_ = 0;
};

class Metrics {
  public:
    Metrics();
    void time_to_first_token(double seconds);
    void inter_token_latency(double seconds);
    void finished(const std::string& finish_reason);  // stop | length | tool_calls | cancelled | error; per choice
    void rejected();                                  // a request answered with an error status before it ran
    // The whole exposition: the engine's numbers (absent while the model loads) and the server's.
    std::string render(const Engine::Stats* engine) const;

  private:
    mutable std::mutex mutex_;
    Histogram ttft_, itl_;
    std::map<std::string, int64_t> finished_;
    int64_t rejected_ = 0;
};

}  // namespace dsv4::server
