// ThreadPool: see thread_pool.h.
#include "core/thread_pool.h"

#include <algorithm>

namespace dsv4 {

ThreadPool::ThreadPool(int threads) {
    if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
    if (n <= 0) return;
    int64_t chunk = std::max<int64_t>(min_chunk, (n + size() * 4 - 1) / (size() * 4));
    if (workers_.empty() || chunk >= n) {
        fn(0, n);
        return;
    }
    std::unique_lock lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = chunk;
    chunks_ = (n + chunk - 1) / chunk;
    next_chunk_ = 0;
    finished_ = 0;
    ++generation_;
    wake_.notify_all();
    while (next_chunk_ < chunks_) {  // the caller works too
        int64_t c = next_chunk_++;
        lock.unlock();
        fn(c * chunk, std::min(n, (c + 1) * chunk));
        lock.lock();
        ++finished_;
    }
    done_.wait(lock, [&] { return finished_ == chunks_; });
    job_ = nullptr;
}

void ThreadPool::worker_loop() {
    uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
        wake_.wait(lock, [&] { return stop_ || (generation_ != seen && job_ && next_chunk_ < chunks_); });
        if (stop_) return;
        seen = generation_;
        while (job_ && next_chunk_ < chunks_) {
            int64_t c = next_chunk_++;
            const auto* fn = job_;
            int64_t begin = c * job_chunk_, end = std::min(job_n_, (c + 1) * job_chunk_);
            lock.unlock();
            (*fn)(begin, end);
            lock.lock();
            if (++finished_ == chunks_) done_.notify_all();
        }
    }
}

}  // namespace dsv4
