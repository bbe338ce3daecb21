// The CUDA build runs on the device: saxpy against the host result. Skipped (visibly) without a GPU.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cuda/smoke/device_info.h"

TEST(GpuSmoke, SaxpyMatchesHost) {
    if (dsv4::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    std::printf("device: %s\n", dsv4::cuda::describe_device(0).c_str());
    const int n = 1000 + 37;
    std::vector<float> x(n), y(n), expected(n);
    for (int i = 0; i < n; ++i) {
        x[i] = 0.5f * float(i % 97) - 7.0f;
        y[i] = float(i % 13) - 3.25f;
        expected[i] = 1.5f * x[i] + y[i];
    }
    dsv4::cuda::saxpy_smoke(n, 1.5f, x.data(), y.data());
    for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], expected[i]) << "at " << i;
}
