#include "kernels/cuda/common/resident_ctas.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "kernels/cuda/common/cuda_check.h"

namespace dsv4::cuda {

int64_t resident_ctas(const void* kernel, int threads, int smem) {
    struct Entry {
        const void* kernel;
        int device, threads, smem;
        int64_t ctas;
    };
    // The dynamic shared-memory limit each kernel was raised to, per device. It only ever goes up: a launch found in
    // the cache skips the raise, so lowering the limit for a smaller launch would break a larger one cached before.
    struct Limit {
        const void* kernel;
        int device, smem;
    };
    static std::mutex mutex;
    static std::vector<Entry> cache;
    static std::vector<Limit> limits;
    int device = 0;
    DSV4_CUDA_CHECK(cudaGetDevice(&device));
    std::lock_guard<std::mutex> lock(mutex);
    for (const Entry& e : cache)
        if (e.kernel == kernel && e.device == device && e.threads == threads && e.smem == smem) return e.ctas;
    int sms = 0, per_sm = 0;
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    if (smem > 48 * 1024) {
        auto limit = std::find_if(limits.begin(), limits.end(),
                                  [&](const Limit& l) { return l.kernel == kernel && l.device == device; });
        if (limit == limits.end()) limit = limits.insert(limits.end(), {kernel, device, 48 * 1024});
        if (smem > limit->smem) {
            DSV4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
            limit->smem = smem;
        }
    }
    DSV4_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, size_t(smem)));
    cache.push_back({kernel, device, threads, smem, int64_t(sms) * (per_sm > 0 ? per_sm : 1)});
    return cache.back().ctas;
}

int64_t resident_clusters(const void* kernel, int threads, int cluster) {
    struct Entry {
        const void* kernel;
        int device, threads, cluster;
        int64_t clusters;
    };
    static std::mutex mutex;
    static std::vector<Entry> cache;
    int device = 0;
    DSV4_CUDA_CHECK(cudaGetDevice(&device));
    std::lock_guard<std::mutex> lock(mutex);
    for (const Entry& e : cache)
        if (e.kernel == kernel && e.device == device && e.threads == threads && e.cluster == cluster) return e.clusters;
    int clusters = 0;
    bool allowed = true;
    if (cluster > 8)
        allowed = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
    if (allowed) {
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(unsigned(cluster));
        config.blockDim = dim3(unsigned(threads));
        cudaLaunchAttribute attribute;
        attribute.id = cudaLaunchAttributeClusterDimension;
        attribute.val.clusterDim.x = unsigned(cluster);
        attribute.val.clusterDim.y = attribute.val.clusterDim.z = 1;
        config.attrs = &attribute;
        config.numAttrs = 1;
        if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) clusters = 0;
    }
    (void)cudaGetLastError();  // a refusal above is the answer (0), not an error for a later check
    cache.push_back({kernel, device, threads, cluster, clusters});
    return cache.back().clusters;
}

int multiprocessor_count() {
    int device = 0, sms = 0;
    DSV4_CUDA_CHECK(cudaGetDevice(&device));
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
}

}  // namespace dsv4::cuda
