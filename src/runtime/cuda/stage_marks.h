// The GPU executor's stage profiler (runtime/stage_profile.h names the stages): while on, mark(stage) records a CUDA
// event on the model's stream where `stage` begins, and the intervals between consecutive events are the stages'
// GPU times. Inside a stream capture the record is external (cudaEventRecordExternal), so it becomes an
// event-record node of the decode graph and a replayed step is timed as it runs, without launch gaps. Off, mark()
// is one untaken branch at enqueue time, and a replayed graph enqueues nothing at all.
// Tested in tests/gpu/cuda_stage_profile_test.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cuda/common/device_buffer.h"
#include "runtime/stage_profile.h"

namespace dsv4 {

// A stage boundary of a piece: `stage` (a string literal) begins here; nullptr closes the last stage.
struct StageMark {
    const char* stage = nullptr;
    int64_t layer = -1;  // the block, or -1 for a stage of the step
};

class StageMarks {
  public:
    bool on() const { return on_; }
    // On: events on `stream` from now on (`capacity` of them, the most marks one piece records, made the first
    // time); off: nothing recorded.
    void enable(bool on, cudaStream_t stream, size_t capacity);

    // A new piece: the next mark takes the first event again.
    void restart() { marks_.clear(); }
    // Stage `stage` of block `layer` (-1: of the step) begins here.
    void mark(const char* stage, int64_t layer = -1) {
        if (on_) record(stage, layer);
    }
    // The last stage ends here.
    void finish() {
        if (on_) record(nullptr, -1);
    }

    // Capture: the marks recorded since mark `first` belong to the graph (its event-record nodes record their events
    // at each replay); they are taken out of this piece's list.
    std::vector<StageMark> take_graph_marks(size_t first);
    size_t count() const { return marks_.size(); }
    // Replay of a graph captured with `graph` marks from mark `first` on: those events are being recorded again.
    void replayed(size_t first, std::span<const StageMark> graph);

    // The last piece's intervals, each named by the mark that opens it (waits for the piece's last event); empty
    // when it ran with the profiler off.
    std::vector<StageTime> times() const;

  private:
    void record(const char* stage, int64_t layer);

    bool on_ = false;
    cudaStream_t stream_ = nullptr;
    std::vector<std::unique_ptr<cuda::Event>> events_;  // events_[i] is recorded by marks_[i]
    std::vector<StageMark> marks_;                      // this piece's, in stream order
};

}  // namespace dsv4
