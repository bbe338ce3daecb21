// What GET /metrics reports, in Prometheus' text format (version 0.0.4): the engine's gauges and counters
// (requests running / waiting, prompt, generated and cached-prefix tokens, state-pool use) and the server's own
// latency histograms (time to first token, inter-token latency), finished requests by finish_reason and the HTTP
// connection threads in use and waited for.
// Thread-safe. Tested by tests/server/metrics_test.cpp and end to end by tests/server_e2e.
#pragma once

#include <atomic>
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

// The HTTP server's connection threads as they change (ConnectionPool, connection_pool.h, keeps them).
struct ConnectionCounts {
    std::atomic<int64_t> busy{0};     // connections a thread is serving
    std::atomic<int64_t> waiting{0};  // accepted, waiting for a thread
};

// The HTTP server's connection threads at the moment of a scrape (the scrape's own connection among the busy).
struct ConnectionGauges {
    int64_t limit = 0;    // --max-connections
    int64_t busy = 0;     // connections a thread is serving
    int64_t waiting = 0;  // accepted connections waiting for a thread (above 0: the threads are all busy)
};

class Metrics {
  public:
    Metrics();
    void time_to_first_token(double seconds);
    void inter_token_latency(double seconds);
    void finished(const std::string& finish_reason);  // stop | length | tool_calls | cancelled | error; per choice
    void rejected();                                  // a request answered with an error status before it ran
    // A request whose reply is constrained: json_object | json_schema | choice | tool_call (structured_output.h).
    void constrained(const std::string& kind);
    // The whole exposition: the engine's numbers (absent while the model loads) and the server's.
    std::string render(const Engine::Stats* engine, const ConnectionGauges& connections = {}) const;

  private:
    mutable std::mutex mutex_;
    Histogram ttft_, itl_;
    std::map<std::string, int64_t> finished_, constrained_;
    int64_t rejected_ = 0;
};

}  // namespace dsv4::server
