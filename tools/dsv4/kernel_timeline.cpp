// KernelTimeline (kernel_timeline.h): CUPTI's activity API, kernel records only (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
// which does not serialize kernels). Records arrive in buffers CUPTI asks for and hands back; they are copied out as
// they complete and written once recording stops.
#include "kernel_timeline.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/error.h"

#if defined(DSV4_WITH_CUPTI)
#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>
#endif

namespace dsv4 {

#if defined(DSV4_WITH_CUPTI)
namespace {

struct KernelRecord {
    uint32_t launch = 0, stream = 0;
    uint64_t node = 0, start = 0, end = 0;
    int32_t grid[3] = {}, block[3] = {};
    std::string name;
};

std::mutex g_mutex;
std::vector<KernelRecord> g_records;

constexpr size_t kBufferBytes = size_t(8) << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;  // as many as fit
}

std::string demangled(const char* name) {
    if (!name) return "?";
    int status = 0;
    char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string s = status == 0 && out ? out : name;
    std::free(out);
    return s;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    CUpti_Activity* record = nullptr;
    std::vector<KernelRecord> batch;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        KernelRecord r;
        r.launch = k->correlationId;
        r.stream = k->streamId;
        r.node = k->graphNodeId;
        r.start = k->start;
        r.end = k->end;
        r.grid[0] = k->gridX, r.grid[1] = k->gridY, r.grid[2] = k->gridZ;
        r.block[0] = k->blockX, r.block[1] = k->blockY, r.block[2] = k->blockZ;
        r.name = demangled(k->name);
        batch.push_back(std::move(r));
    }
    std::free(buffer);
    const std::lock_guard<std::mutex> lock(g_mutex);
    for (KernelRecord& r : batch) g_records.push_back(std::move(r));
}

void check(CUptiResult result, const char* what) {
    if (result == CUPTI_SUCCESS) return;
    const char* text = nullptr;
    cuptiGetResultString(result, &text);
    DSV4_CHECK(false, "CUPTI: {} failed: {}", what, text ? text : "?");
}

}  // namespace

bool KernelTimeline::available() {
    return true;
}

void KernelTimeline::start() {
    {
        const std::lock_guard<std::mutex> lock(g_mutex);
        g_records.clear();
    }
    check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable");
}

int64_t KernelTimeline::stop_and_write(const std::string& path) {
    DSV4_CHECK(cudaDeviceSynchronize() == cudaSuccess, "KernelTimeline: the device failed before the flush");
    check(cuptiActivityFlushAll(1), "cuptiActivityFlushAll");
    check(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityDisable");
    std::vector<KernelRecord> records;
    {
        const std::lock_guard<std::mutex> lock(g_mutex);
        records.swap(g_records);
    }
    FILE* f = std::fopen(path.c_str(), "w");
    DSV4_CHECK(f != nullptr, "cannot write the timeline to {}", path);
    std::fprintf(f, "launch\tnode\tstream\tstart_ns\tend_ns\tgrid\tblock\tname\n");
    for (const KernelRecord& r : records)
        std::fprintf(f, "%u\t%llu\t%u\t%llu\t%llu\t%d,%d,%d\t%d,%d,%d\t%s\n", r.launch, (unsigned long long)r.node,
                     r.stream, (unsigned long long)r.start, (unsigned long long)r.end, r.grid[0], r.grid[1], r.grid[2],
                     r.block[0], r.block[1], r.block[2], r.name.c_str());
    DSV4_CHECK(std::fclose(f) == 0, "cannot write the timeline to {}", path);
    return int64_t(records.size());
}

#else

bool KernelTimeline::available() {
    return false;
}

void KernelTimeline::start() {
    DSV4_CHECK(false, "this build has no CUPTI (CMake did not find CUDA::cupti): --timeline is not available");
}

int64_t KernelTimeline::stop_and_write(const std::string&) {
    return 0;
}

#endif

}  // namespace dsv4
