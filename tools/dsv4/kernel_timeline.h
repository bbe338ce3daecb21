// The kernels of a few replayed decode steps on the GPU's own clock (`dsv4 bench --timeline FILE`), from CUPTI's
// activity records: each kernel node's start and end, its stream (the one the replay ran it on: a graph runs each branch
// on a stream of its own, not on the lane it was captured from), its graph node and launch (one per step) and its
// name. Neither the stage profiler (events between stages, +20 % on the step) nor Nsight Compute's kernel table (each
// kernel alone, caches flushed) shows where a replayed step's time goes, kernel by kernel with their overlaps; these
// records do, at the price of CUPTI's tracing overhead (~16 % on the step), which the bench reports beside them.
// tools/timeline_report.py turns the file into per-layer tables.
#pragma once

#include <cstdint>
#include <string>

namespace dsv4 {

class KernelTimeline {
  public:
    // Whether this build links CUPTI (CMake found CUDA::cupti).
    static bool available();
    // Starts recording every kernel the device runs (throws where CUPTI fails or is not built in).
    void start();
    // Waits for the device, stops recording and writes the records as tab-separated rows with a header line:
    // launch (the graph launch's correlation id), node (the kernel's graph node id), stream, start_ns, end_ns (GPU
    // clock), grid, block, name (demangled). Returns the number of kernels written.
    int64_t stop_and_write(const std::string& path);
};

}  // namespace dsv4
