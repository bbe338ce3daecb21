// Metrics (src/server/metrics.h): histogram buckets are cumulative with +Inf equal to the count and a sum of the
// observations; the exposition carries the engine's numbers only once the model is loaded, and every finish reason
// as a labelled counter; the connection pool counts busy threads and connections waiting for one. The end-to-end
// tests parse the same text from a running server (tests/server_e2e).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "server/connection_pool.h"
#include "server/metrics.h"

namespace dsv4::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
    return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

TEST(Metrics, HistogramBucketsAreCumulative) {
    Histogram h({0.1, 1.0});
    h.observe(0.05);
    h.observe(0.1);  // on a bound: in that bucket (le)
    h.observe(0.5);
    h.observe(7.0);
    std::string out;
    h.render("x", out);
    EXPECT_TRUE(has_line(out, "x_bucket{le=\"0.1\"} 2")) << out;
    EXPECT_TRUE(has_line(out, "x_bucket{le=\"1\"} 3")) << out;
    EXPECT_TRUE(has_line(out, "x_bucket{le=\"+Inf\"} 4")) << out;
    EXPECT_TRUE(has_line(out, "x_sum 7.65")) << out;
    EXPECT_TRUE(has_line(out, "x_count 4")) << out;
}

TEST(Metrics, ExpositionHasTheEngineOnlyWhenLoadedAndEveryFinishReason) {
    Metrics m;
    m.finished("length");
    m.finished("length");
    m.finished("cancelled");
    m.rejected();
    m.constrained("json_schema");
    m.time_to_first_token(0.02);
    m.inter_token_latency(0.004);
    const std::string loading = m.render(nullptr);
    EXPECT_EQ(loading.find("dsv4_requests_running"), std::string::npos);
    EXPECT_TRUE(has_line(loading, "dsv4_requests_total{finish_reason=\"length\"} 2")) << loading;
    EXPECT_TRUE(has_line(loading, "dsv4_requests_total{finish_reason=\"cancelled\"} 1"));
    EXPECT_TRUE(has_line(loading, "dsv4_requests_total{finish_reason=\"stop\"} 0"));
    EXPECT_TRUE(has_line(loading, "dsv4_requests_rejected_total 1"));
    EXPECT_TRUE(has_line(loading, "dsv4_requests_constrained_total{kind=\"json_schema\"} 1"));
    EXPECT_TRUE(has_line(loading, "dsv4_requests_constrained_total{kind=\"tool_call\"} 0"));
    EXPECT_TRUE(has_line(loading, "dsv4_requests_constrained_total{kind=\"choice\"} 0"));
    EXPECT_TRUE(has_line(loading, "dsv4_time_to_first_token_seconds_count 1"));
    EXPECT_TRUE(has_line(loading, "dsv4_inter_token_latency_seconds_count 1"));

    Engine::Stats s;
    s.running = 3;
    s.waiting = 2;
    s.generated_tokens = 40;
    s.backend_draws = 31;
    s.cached_tokens = 17;
    s.pool.pages_used = 5;
    s.pool.pages_total = 64;
    const std::string ready = m.render(&s);
    EXPECT_TRUE(has_line(ready, "dsv4_requests_running 3")) << ready;
    EXPECT_TRUE(has_line(ready, "dsv4_requests_waiting 2"));
    EXPECT_TRUE(has_line(ready, "dsv4_generation_tokens_total 40"));
    EXPECT_TRUE(has_line(ready, "dsv4_generation_tokens_drawn_on_device_total 31"));
    EXPECT_TRUE(has_line(ready, "dsv4_prefix_cache_hit_tokens_total 17"));
    EXPECT_TRUE(has_line(ready, "dsv4_state_pool_pages_used 5"));
    EXPECT_TRUE(has_line(ready, "dsv4_state_pool_pages_total 64"));
    EXPECT_TRUE(has_line(ready, "# TYPE dsv4_time_to_first_token_seconds histogram"));
    const std::string with_connections = m.render(&s, {128, 128, 7});
    EXPECT_TRUE(has_line(with_connections, "dsv4_http_connections_limit 128")) << with_connections;
    EXPECT_TRUE(has_line(with_connections, "dsv4_http_connections_busy 128"));
    EXPECT_TRUE(has_line(with_connections, "dsv4_http_connections_waiting 7"));
}

// The connection threads' counts: with every thread held, the connections beyond them count as waiting, and each
// becomes busy when a thread frees (then nothing is left counted when all are done).
TEST(ConnectionPool, CountsBusyThreadsAndTheConnectionsWaitingForOne) {
    ConnectionCounts counts;
    std::mutex mutex;
    std::condition_variable cv;
    bool release = false;
    std::atomic<int> ran{0};
    {
        ConnectionPool pool(2, counts);
        for (int i = 0; i < 5; ++i)
            pool.enqueue([&] {
                std::unique_lock lock(mutex);
                cv.wait(lock, [&] { return release; });
                ++ran;
            });
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (counts.busy.load() < 2 && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        EXPECT_EQ(counts.busy.load(), 2);
        EXPECT_EQ(counts.waiting.load(), 3);
        {
            std::lock_guard lock(mutex);
            release = true;
        }
        cv.notify_all();
        while (ran.load() < 5 && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        pool.shutdown();
    }
    EXPECT_EQ(ran.load(), 5);
    EXPECT_EQ(counts.busy.load(), 0);
    EXPECT_EQ(counts.waiting.load(), 0);
}

}  // namespace
}  // namespace dsv4::server
