// What the gemm_fp8 tests share (gemm_fp8_test.cpp, gemm_fp8_invariance_test.cpp): a case's shape and path, the
// device's SM count, a weight's scales on the device.
#pragma once

#include <cstdint>
#include <vector>

#include "gemm_test_common.h"
#include "kernels/cuda/gemm_fp8/gemm_fp8.h"

namespace dsv4::gpu_test {

struct Case {
    int64_t m, n, k;
    cuda::Fp8GemmPath path;
    bool pow2_scales = true;
    int block_m = 0, block_n = 0;  // mma: a forced tile (0: fp8_gemm_config's choice)
};

inline int device_sms() {
    int sms = 0;
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    return sms;
}

inline cuda::DeviceBuffer<float> weight_scales_on_device(const HostWeight& w) {
    const float* s = reinterpret_cast<const float*>(w.scale.data());
    return to_device(std::vector<float>(s, s + w.scale.size() / 4));
}

}  // namespace dsv4::gpu_test
