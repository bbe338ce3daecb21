// StageMarks (stage_marks.h): the events, their records in and out of stream capture, the intervals.
#include "runtime/cuda/stage_marks.h"

#include "core/error.h"

namespace dsv4 {

void StageMarks::enable(bool on, cudaStream_t stream, size_t capacity) {
    on_ = on;
    stream_ = stream;
    // Events are only ever added: a profiled decode graph's nodes hold the first ones for the graph's lifetime.
    while (on && events_.size() < capacity) events_.push_back(std::make_unique<cuda::Event>());
}

void StageMarks::record(const char* stage, int64_t layer) {
    DSV4_CHECK(marks_.size() < events_.size(), "stage profiler: more than {} stage marks in one piece", events_.size());
    // Captured, a plain record would only order the capture's streams and leave no timestamp; an external one is an
    // event-record node that records the event whenever the graph runs. Outside a capture the flag is invalid.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    DSV4_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
    const unsigned flags = capture == cudaStreamCaptureStatusActive ? cudaEventRecordExternal : cudaEventRecordDefault;
    DSV4_CUDA_CHECK(cudaEventRecordWithFlags(events_[marks_.size()]->get(), stream_, flags));
    marks_.push_back({stage, layer});
}

std::vector<StageMark> StageMarks::take_graph_marks(size_t first) {
    DSV4_CHECK(first <= marks_.size(), "stage profiler: graph marks from {} of {}", first, marks_.size());
    std::vector<StageMark> graph(marks_.begin() + std::ptrdiff_t(first), marks_.end());
    marks_.resize(first);
    return graph;
}

void StageMarks::replayed(size_t first, std::span<const StageMark> graph) {
    if (graph.empty()) return;
    DSV4_CHECK(first == marks_.size(), "stage profiler: a graph captured after {} marks of its piece replayed after {}",
               first, marks_.size());
    marks_.insert(marks_.end(), graph.begin(), graph.end());
}

std::vector<StageTime> StageMarks::times() const {
    std::vector<StageTime> out;
    if (marks_.empty()) return out;
    DSV4_CHECK(marks_.back().stage == nullptr, "stage profiler: the last piece's stages were not closed");
    for (size_t i = 0; i + 1 < marks_.size(); ++i)
        out.push_back({marks_[i].stage, marks_[i].layer, double(events_[i + 1]->elapsed_since(*events_[i]))});
    return out;
}

}  // namespace dsv4
