// The CUDA error check of the standalone probes (bench/*_probe.cu): they link no dsv4 library, so that each builds
// with one nvcc line on the device, and share only this header.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

inline void probe_check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}
#define PROBE_CHECK(x) probe_check((x), #x)
