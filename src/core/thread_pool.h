// A fixed pool of worker threads for the CPU reference backend. parallel_for splits [0, n) into contiguous
// chunks, runs them on the workers and the calling thread, and returns when all are done. Results never
// depend on the thread count: each index is computed by exactly one thread with the same arithmetic.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dsv4 {

class ThreadPool {
public:
    // threads == 0 picks std::thread::hardware_concurrency().
    explicit ThreadPool(int threads = 0);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return int(workers_.size()) + 1; }

    // Calls fn(begin, end) over disjoint ranges covering [0, n). Ranges hold at least `min_chunk` indices.
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk = 1);

private:
    void worker_loop();

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    const std::function<void(int64_t, int64_t)>* job_ = nullptr;
    int64_t job_n_ = 0, job_chunk_ = 0, next_chunk_ = 0, chunks_ = 0, finished_ = 0;
    uint64_t generation_ = 0;
    bool stop_ = false;
};

}  // namespace dsv4
