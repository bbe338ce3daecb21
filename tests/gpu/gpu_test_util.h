// Helpers shared by the GPU op tests: skip without a device, fresh seeded inputs (the seed is printed;
// DSV4_TEST_SEED replays), device upload/download, NaN poisoning of outputs before a launch (so an element the
// kernel never writes fails), and comparisons that report the worst element and never pass a NaN.
// Used by every tests/gpu/<op>_test.cpp.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/number_formats.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/kernel_test_util.h"  // dsv4::test::Rng (seeded, DSV4_TEST_SEED) and dsv4::test::Worst

namespace dsv4::gpu_test {

using test::kBf16Unit;
using test::kF32Unit;
using test::Rng;
using test::Worst;

inline bool have_gpu() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// ---- host <-> device
template <typename T>
cuda::DeviceBuffer<T> to_device(const std::vector<T>& host) {
    cuda::DeviceBuffer<T> d(host.size());
    d.upload(host.data(), host.size());
    return d;
}

// Waits for the device and copies the whole buffer back.
template <typename T>
std::vector<T> to_host(const cuda::DeviceBuffer<T>& d) {
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(d.size());
    d.download(host.data(), host.size());
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    return host;
}

// An output buffer filled with `byte` in every byte. 0xFF is NaN for f32, bf16, e4m3 and E8M0 alike. The fill is
// waited for: cudaMemset runs on the legacy stream, which a launch on a non-blocking stream (a test's graph replay)
// does not wait for, so an unfinished fill could land on the outputs after the kernels wrote them (it did once, in
// MoeRoutingGpu's graph replay under 14 concurrent test processes).
template <typename T>
cuda::DeviceBuffer<T> poisoned(size_t count, uint8_t byte = 0xFF) {
    cuda::DeviceBuffer<T> d(count);
    if (count) DSV4_CUDA_CHECK(cudaMemset(d.get(), byte, d.bytes()));
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    return d;
}
template <typename T>
void poison(cuda::DeviceBuffer<T>& d, uint8_t byte = 0xFF) {
    if (d.size()) DSV4_CUDA_CHECK(cudaMemset(d.get(), byte, d.bytes()));
}

// ---- bf16 on the host (the device stores bf16 as uint16_t bit patterns)
inline std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
    std::vector<uint16_t> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = f32_to_bf16(x[i]);
    return out;
}
inline std::vector<float> from_bf16(const std::vector<uint16_t>& x) {
    std::vector<float> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = bf16_to_f32(x[i]);
    return out;
}

// Normal values already rounded to bf16 (as activations arrive), as bit patterns.
inline std::vector<uint16_t> random_bf16(Rng& rng, int64_t n, float stddev = 1.0f) {
    return to_bf16(rng.normal_bf16(n, stddev));
}

// ---- comparisons

// Bitwise equality of two arrays of bit patterns (bf16, e4m3, packed bytes, f32 bits). Reports the number of
// mismatches and the first one; `show` turns a pattern into a readable value for the message.
template <typename T, typename Show>
void expect_bitwise(const std::string& what, const std::vector<T>& got, const std::vector<T>& want, Show show) {
    ASSERT_EQ(got.size(), want.size()) << what;
    int64_t mismatches = 0, first = -1;
    for (size_t i = 0; i < got.size(); ++i)
        if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
            if (first < 0) first = int64_t(i);
            ++mismatches;
        }
    if (first < 0) {
        std::printf("[ bitwise  ] %s: %zu elements identical\n", what.c_str(), got.size());
        return;
    }
    ADD_FAILURE() << what << ": " << mismatches << " of " << got.size() << " elements differ; first at " << first
                  << " got " << show(got[size_t(first)]) << " want " << show(want[size_t(first)]);
}
inline void expect_bitwise_bf16(const std::string& what, const std::vector<uint16_t>& got,
                                const std::vector<uint16_t>& want) {
    expect_bitwise(what, got, want, [](uint16_t b) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.9g (0x%04x)", double(bf16_to_f32(b)), unsigned(b));
        return std::string(buf);
    });
}
inline void expect_bitwise_bytes(const std::string& what, const std::vector<uint8_t>& got,
                                 const std::vector<uint8_t>& want) {
    expect_bitwise(what, got, want, [](uint8_t b) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "0x%02x", unsigned(b));
        return std::string(buf);
    });
}
inline void expect_bitwise_f32(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
    expect_bitwise(what, got, want, [](float v) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.9g (0x%08x)", double(v), unsigned(float_bits(v)));
        return std::string(buf);
    });
}

// A bf16 result of a computation whose exact f32 reference value is `want` and whose f32 arithmetic may differ
// from the reference's by at most `tol` (absolute; from the reduction order or a libm ulp): `got` must be a
// round-to-nearest bf16 of some value in [want - tol, want + tol], i.e. lie in
// [round_bf16(want - tol), round_bf16(want + tol)]. NaN never passes. Reports the worst element (distance from
// `want` over tol + half a bf16 ulp, about 1 at most inside the bracket) and how many elements are not exactly
// round_bf16(want).
class Bf16Bracket {
  public:
    explicit Bf16Bracket(std::string what) : what_(std::move(what)) {}
    void add(int64_t index, float got, float want, double tol) {
        ++count_;
        const float lo = round_bf16(float(double(want) - tol)), hi = round_bf16(float(double(want) + tol));
        const bool inside = got >= lo && got <= hi;  // false for NaN
        if (got != round_bf16(want)) ++inexact_;
        if (!inside) ++outside_;
        int exponent = 0;  // half a bf16 ulp at want: 2^(e - 9) for |want| in [2^(e-1), 2^e)
        std::frexp(double(want), &exponent);
        const double half_ulp = std::ldexp(1.0, std::max(exponent, -125) - 9);
        const double ratio =
            inside ? std::fabs(double(got) - double(want)) / (tol + half_ulp) : std::numeric_limits<double>::infinity();
        if (index_ < 0 || !(ratio <= ratio_)) {  // the first element outside the bracket stays the worst
            ratio_ = ratio;
            index_ = index;
            got_ = got;
            want_ = want;
            tol_ = tol;
        }
    }
    void expect_ok() const {
        char buf[384];
        std::snprintf(buf, sizeof buf,
                      "%s: %lld elements, %lld outside the bracket, %lld not exactly round_bf16(ref); worst element "
                      "%lld got %.9g ref %.9g tol %.3g (%.3f of tol + half ulp)",
                      what_.c_str(), (long long)count_, (long long)outside_, (long long)inexact_, (long long)index_,
                      double(got_), double(want_), tol_, ratio_);
        std::printf("[ worst    ] %s\n", buf);
        EXPECT_EQ(outside_, 0) << buf;
        EXPECT_GT(count_, 0) << what_ << ": nothing compared";
    }

  private:
    std::string what_;
    int64_t count_ = 0, outside_ = 0, inexact_ = 0, index_ = -1;
    double ratio_ = 0.0, tol_ = 0.0;
    float got_ = 0.0f, want_ = 0.0f;
};

}  // namespace dsv4::gpu_test

// Skips the test (visibly) when there is no CUDA device, e.g. on CI.
#define DSV4_REQUIRE_GPU()                                                   \
    do {                                                                     \
        if (!::dsv4::gpu_test::have_gpu()) GTEST_SKIP() << "no CUDA device"; \
    } while (0)
