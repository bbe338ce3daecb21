#include "kernels/cuda/common/resident_ctas.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "kernels/cuda/common/cuda_check.h"

namespace dsv4::cuda {

namespace {

// Raises `kernel`'s dynamic shared-memory limit on `device` to at least `smem`. It only ever goes up: a launch found in
// a cache below skips the raise, so lowering the limit for a smaller launch would break a larger one cached before.
void raise_smem_limit(const void* kernel, int device, int smem) {
    if (smem <= 48 * 1024) return;
    struct Limit {
        const void* kernel;
        int device, smem;
    };
    static std::mutex mutex;
    static std::vector<Limit> limits;
    std::lock_guard<std::mutex> lock(mutex);
    auto limit = std::find_if(limits.begin(), limits.end(),
                              [&](const Limit& l) { return l.kernel == kernel && l.device == device; });
    if (limit == limits.end()) limit = limits.insert(limits.end(), {kernel, device, 48 * 1024});
    if (smem > limit->smem) {
        DSV4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        limit->smem = smem;
    }
}

// The occupancy answer for (kernel, current device, threads, smem, cluster), computed by `query` (under the lock,
// after the shared-memory limit is raised) the first time and cached: a query on every launch would cost more than
// a decode launch's kernel time. cluster 0 keys resident_ctas's answers.
template <class Query>
int64_t cached(const void* kernel, int threads, int smem, int cluster, Query&& query) {
    struct Entry {
        const void* kernel;
        int device, threads, smem, cluster;
        int64_t answer;
    };
    static std::mutex mutex;
    static std::vector<Entry> cache;
    int device = 0;
    DSV4_CUDA_CHECK(cudaGetDevice(&device));
    std::lock_guard<std::mutex> lock(mutex);
    for (const Entry& e : cache)
        if (e.kernel == kernel && e.device == device && e.threads == threads && e.smem == smem && e.cluster == cluster)
            return e.answer;
    raise_smem_limit(kernel, device, smem);
    cache.push_back({kernel, device, threads, smem, cluster, query(device)});
    return cache.back().answer;
}

}  // namespace

int64_t resident_ctas(const void* kernel, int threads, int smem) {
    return cached(kernel, threads, smem, 0, [&](int device) {
        int sms = 0, per_sm = 0;
        DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        DSV4_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, size_t(smem)));
        return int64_t(sms) * (per_sm > 0 ? per_sm : 1);
    });
}

int64_t resident_clusters(const void* kernel, int threads, int cluster, int smem) {
    return cached(kernel, threads, smem, cluster, [&](int) {
        int clusters = 0;
        bool allowed = true;
        if (cluster > 8)
            allowed = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
        if (allowed) {
            cudaLaunchConfig_t config = {};
            config.gridDim = dim3(unsigned(cluster));
            config.blockDim = dim3(unsigned(threads));
            config.dynamicSmemBytes = size_t(smem);
            cudaLaunchAttribute attribute;
            attribute.id = cudaLaunchAttributeClusterDimension;
            attribute.val.clusterDim.x = unsigned(cluster);
            attribute.val.clusterDim.y = attribute.val.clusterDim.z = 1;
            config.attrs = &attribute;
            config.numAttrs = 1;
            if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) clusters = 0;
        }
        (void)cudaGetLastError();  // a refusal above is the answer (0), not an error for a later check
        return int64_t(clusters);
    });
}

int multiprocessor_count() {
    // Asked by every fp8_gemm, bf16_linear, grouped_linear and sparse-attention launch (eager prefill calls them per
    // piece and layer): one attribute query per device, then a load. Devices beyond the table are asked each time.
    constexpr int kDevices = 64;
    static std::atomic<int> known[kDevices] = {};
    int device = 0;
    DSV4_CUDA_CHECK(cudaGetDevice(&device));
    if (device < kDevices)
        if (const int sms = known[device].load(std::memory_order_relaxed)) return sms;
    int sms = 0;
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    if (device < kDevices) known[device].store(sms, std::memory_order_relaxed);
    return sms;
}

int device_compute_capability() {
    constexpr int kDevices = 64;
    static std::atomic<int> known[kDevices] = {};  // 0 unknown
    int device = 0;
    DSV4_CUDA_CHECK(cudaGetDevice(&device));
    if (device < kDevices)
        if (const int v = known[device].load(std::memory_order_relaxed)) return v;
    int major = 0, minor = 0;
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    const int capability = 10 * major + minor;
    if (device < kDevices) known[device].store(capability, std::memory_order_relaxed);
    return capability;
}

bool device_has_wgmma() {
#ifndef DSV4_BUILT_SM90A
    return false;  // no sm_90a code in this build: the wgmma kernels would trap
#endif
    return device_compute_capability() == 90;
}

}  // namespace dsv4::cuda
