// The HTTP server's threads (cpp-httplib's ThreadPool) with the counts GET /metrics reports: connections on a
// thread and accepted connections waiting for one. A request holds its connection's thread until its last token,
// so a server whose threads are all busy queues new requests before the engine sees them, and their wait shows in
// no engine metric (docs/perf.md measured 256 concurrent clients behind 128 threads); `waiting` above zero says so.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <functional>

#include "server/metrics.h"

namespace dsv4::server {

class ConnectionPool final : public httplib::TaskQueue {
  public:
    // `counts` (metrics.h) must outlive the pool.
    ConnectionPool(size_t threads, ConnectionCounts& counts) : pool_(threads), counts_(counts) {}

    // What httplib's TaskQueue::enqueue returns (void in 0.11, bool in later releases).
    using EnqueueResult = decltype(std::declval<httplib::TaskQueue&>().enqueue(std::function<void()>{}));
    EnqueueResult enqueue(std::function<void()> fn) override {
        counts_.waiting.fetch_add(1);
        return pool_.enqueue([this, fn = std::move(fn)] {
            counts_.waiting.fetch_sub(1);
            counts_.busy.fetch_add(1);
            fn();
            counts_.busy.fetch_sub(1);
        });
    }
    void shutdown() override { pool_.shutdown(); }

  private:
    httplib::ThreadPool pool_;
    ConnectionCounts& counts_;
};

}  // namespace dsv4::server
