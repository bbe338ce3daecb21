// The first piece of the CUDA backend: device discovery and a smoke kernel that proves the sm_90a build
// runs on the device. Tested in tests/gpu/smoke_test.cpp (skipped without a GPU).
#pragma once

#include <string>

namespace dsv4::cuda {

// Number of CUDA devices; 0 when there is no driver or no device (never throws).
int device_count();
// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)"; throws dsv4::Error if the device cannot be queried.
std::string describe_device(int device);
// Computes y[i] = a * x[i] + y[i] on the device for n values and copies back; throws on any CUDA error.
void saxpy_smoke(int n, float a, const float* x, float* y);

}  // namespace dsv4::cuda
