// How many CTAs (or clusters of CTAs) of a kernel fit on the current device at once (SMs x CTAs per SM for `threads`
// and `smem`), for persistent grids and cluster-size choices. Cached per (kernel, device, threads, smem): an
// occupancy query on every launch would cost more than a decode launch's kernel time. Raises the kernel's dynamic
// shared-memory limit to at least `smem` first (never lowers it: a launch found in the cache must still fit).
#pragma once

#include <cstdint>

namespace dsv4::cuda {

int64_t resident_ctas(const void* kernel, int threads, int smem);

// How many clusters of `cluster` CTAs of `threads` and `smem` bytes of dynamic shared memory the current device can
// hold at once; 0 where it cannot co-schedule one. A size above 8 is non-portable: the kernel is allowed it first (0
// if refused); the shared-memory limit is raised as resident_ctas does. Cached per (kernel, device, threads, cluster,
// smem), like resident_ctas.
int64_t resident_clusters(const void* kernel, int threads, int cluster, int smem = 0);

// The current device's SM count (the tile heuristics' num_sms).
int multiprocessor_count();

// The current device's compute capability as 10 x major + minor (90: H100, H200); cached per device.
int device_compute_capability();

// Whether the current device runs this build's wgmma kernels: compute capability 9.0 (H100, H200) and sm_90a in
// DSV4_CUDA_ARCHS; cached per device.
bool device_has_wgmma();

}  // namespace dsv4::cuda
