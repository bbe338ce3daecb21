// RAII ownership of device memory, pinned host memory, streams and events. Allocation failures throw
// dsv4::Error naming the size. Kernels never allocate: buffers are made by the caller (plans, pools, tests).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "kernels/cuda/common/cuda_check.h"

namespace dsv4::cuda {

template <typename T>
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t count) : count_(count) {
        if (count) DSV4_CUDA_CHECK(cudaMalloc(&data_, count * sizeof(T)));
    }
    ~DeviceBuffer() { reset(); }
    DeviceBuffer(DeviceBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        if (this != &o) {
            reset();
            data_ = std::exchange(o.data_, nullptr);
            count_ = std::exchange(o.count_, 0);
        }
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    T* get() const { return data_; }
    size_t size() const { return count_; }
    size_t bytes() const { return count_ * sizeof(T); }

    void upload(const T* host, size_t count, cudaStream_t stream = nullptr) {
        DSV4_CUDA_CHECK(cudaMemcpyAsync(data_, host, count * sizeof(T), cudaMemcpyHostToDevice, stream));
    }
    void download(T* host, size_t count, cudaStream_t stream = nullptr) const {
        DSV4_CUDA_CHECK(cudaMemcpyAsync(host, data_, count * sizeof(T), cudaMemcpyDeviceToHost, stream));
    }

private:
    void reset() {
        if (data_) cudaFree(data_);  // no throw from a destructor; a failing free means the context is gone
        data_ = nullptr;
        count_ = 0;
    }
    T* data_ = nullptr;
    size_t count_ = 0;
};

// Page-locked host memory (cudaHostAlloc): copies to and from it run at the link's full rate, and its pages are
// resident, so a buffer reused from step to step costs no page faults.
template <typename T>
class PinnedBuffer {
public:
    PinnedBuffer() = default;
    explicit PinnedBuffer(size_t count) : count_(count) {
        if (count)
            DSV4_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&data_), count * sizeof(T), cudaHostAllocDefault));
    }
    ~PinnedBuffer() { reset(); }
    PinnedBuffer(PinnedBuffer&& o) noexcept
        : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}
    PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
        if (this != &o) {
            reset();
            data_ = std::exchange(o.data_, nullptr);
            count_ = std::exchange(o.count_, 0);
        }
        return *this;
    }
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;

    T* get() const { return data_; }
    size_t size() const { return count_; }

private:
    void reset() {
        if (data_) cudaFreeHost(data_);
        data_ = nullptr;
        count_ = 0;
    }
    T* data_ = nullptr;
    size_t count_ = 0;
};

class Stream {
public:
    Stream() { DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
    // With a scheduling priority (cudaDeviceGetStreamPriorityRange: lower numbers run first).
    explicit Stream(int priority) {
        DSV4_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority));
    }
    ~Stream() {
        if (stream_) cudaStreamDestroy(stream_);
    }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    cudaStream_t get() const { return stream_; }
    void synchronize() const { DSV4_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

private:
    cudaStream_t stream_ = nullptr;
};

class Event {
public:
    Event() { DSV4_CUDA_CHECK(cudaEventCreate(&event_)); }
    ~Event() {
        if (event_) cudaEventDestroy(event_);
    }
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    cudaEvent_t get() const { return event_; }
    void record(cudaStream_t s) { DSV4_CUDA_CHECK(cudaEventRecord(event_, s)); }
    // Milliseconds from `start` to this event (both recorded, this one completed).
    float elapsed_since(const Event& start) const {
        DSV4_CUDA_CHECK(cudaEventSynchronize(event_));
        float ms = 0;
        DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
        return ms;
    }

private:
    cudaEvent_t event_ = nullptr;
};

}  // namespace dsv4::cuda
