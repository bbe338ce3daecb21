// Helpers of the matrix-product tests (gemm_fp8, gemm_bf16, grouped_linear, moe_gemm): random weights in every
// checkpoint format with their QuantizedMatrix views for cpu::linear, FP8 activation quantization on the device
// (act_quant_fp8) beside its CPU twin (cpu::fp8_round_trip per 128, partial blocks on their own), and the
// tolerance of an f32 reduction: the CPU reference and the device each sum K exact (or once-rounded) products in
// f32, in different orders, so |gpu - ref| <= 2 (K + 2) u sum_k |x_k w_k| with u = 2^-23 (truncating tensor-core
// adders included); the bf16 output may then round to either neighbour (Bf16Bracket).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/number_formats.h"
#include "core/quantized_matrix.h"
#include "core/thread_pool.h"
#include "gpu_test_util.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/quant_sim.h"
#include "kernels/cuda/quant/quant.h"

namespace dsv4::gpu_test {

inline constexpr double kSumUnit = 0x1p-23;

inline ThreadPool& test_pool() {
    static ThreadPool pool;
    return pool;
}

// |gpu - ref| bound of an f32 sum of k products whose magnitudes sum to `absdot`.
inline double f32_sum_tolerance(int64_t k, double absdot) { return 2.0 * double(k + 2) * kSumUnit * absdot; }

// A weight in one of the checkpoint formats, its bytes on the host and a QuantizedMatrix over them.
struct HostWeight {
    std::vector<uint8_t> data, scale;
    float global_scale = 1.0f;
    QuantizedMatrix view;      // the weight as stored
    QuantizedMatrix abs_view;  // |W| (sign bits cleared), for the tolerance
    std::vector<uint8_t> abs_data;
};

// FP8 block weight: e4m3 [n, k] (no NaN codes) + f32 scales [ceil(n/128), ceil(k/128)], powers of two
// 2^-10..2^-4 (E8M0 checkpoints) or, with `pow2_scales` false, arbitrary positive f32 (Base checkpoints).
inline HostWeight random_fp8_weight(Rng& rng, int64_t n, int64_t k, bool pow2_scales = true) {
    HostWeight w;
    w.data.resize(size_t(n * k));
    for (auto& b : w.data) {
        b = uint8_t(rng.engine()() & 0xFF);
        if ((b & 0x7F) == 0x7F) b ^= 1;  // 0x7F / 0xFF are NaN
    }
    const int64_t nb = (n + 127) / 128, kb = (k + 127) / 128;
    std::vector<float> s(size_t(nb * kb));
    for (auto& v : s)
        v = pow2_scales ? std::ldexp(1.0f, -4 - int(rng.engine()() % 7)) : rng.uniform(0.001f, 0.03f);
    w.scale.resize(s.size() * 4);
    std::memcpy(w.scale.data(), s.data(), w.scale.size());
    w.abs_data = w.data;
    for (auto& b : w.abs_data) b &= 0x7F;
    w.view = QuantizedMatrix{"fp8_weight", WeightFormat::kFp8Block, n, k, w.data.data(), w.scale.data(),
                             DType::kF32, kb, 128, 128};
    w.abs_view = w.view;
    w.abs_view.data = w.abs_data.data();
    return w;
}

// FP4 expert weight: packed e2m1 [n, k/2] + E8M0 [n, k/32] (2^-9..2^-3), or NVFP4: e4m3 scales [n, k/16]
// (positive, 0.0156..3.75) and a global f32 scale that is not a power of two.
inline HostWeight random_fp4_weight(Rng& rng, int64_t n, int64_t k, bool nvfp4) {
    HostWeight w;
    w.data.resize(size_t(n * k / 2));
    // Four bytes of nibbles per draw: the MoeGemm comparisons generate 256 V4-Flash experts (1 GiB) a case, which
    // took seconds a case one byte a draw.
    for (size_t i = 0; i < w.data.size(); i += 4) {
        const uint32_t word = uint32_t(rng.engine()());
        for (size_t j = 0; j < 4 && i + j < w.data.size(); ++j) w.data[i + j] = uint8_t(word >> (8 * j));
    }
    const int64_t block = nvfp4 ? 16 : 32, scale_cols = k / block;
    w.scale.resize(size_t(n * scale_cols));
    for (auto& b : w.scale)
        b = nvfp4 ? uint8_t(0x18 + rng.engine()() % 0x30) : uint8_t(127 - 3 - int(rng.engine()() % 7));
    w.global_scale = nvfp4 ? 0.0123f : 1.0f;
    w.abs_data = w.data;
    for (auto& b : w.abs_data) b &= 0x77;
    w.view = QuantizedMatrix{nvfp4 ? "nvfp4_weight" : "mxfp4_weight",
                             nvfp4 ? WeightFormat::kNvfp4 : WeightFormat::kFp4Mx,
                             n,
                             k,
                             w.data.data(),
                             w.scale.data(),
                             nvfp4 ? DType::kF8E4M3 : DType::kF8E8M0,
                             scale_cols,
                             1,
                             block,
                             w.global_scale};
    w.abs_view = w.view;
    w.abs_view.data = w.abs_data.data();
    return w;
}

// Activations [rows, k] bf16 with a per-row magnitude spread (so scales differ between rows and blocks).
inline std::vector<float> random_activations(Rng& rng, int64_t rows, int64_t k) {
    std::vector<float> x(size_t(rows * k));
    for (int64_t r = 0; r < rows; ++r) {
        const float row_scale = std::ldexp(1.0f, int(rng.engine()() % 9) - 4);
        for (int64_t c = 0; c < k; ++c) x[size_t(r * k + c)] = round_bf16(rng.normal(row_scale));
    }
    return x;
}

// The CPU twin of act_quant_fp8: x FP8-round-tripped per 128 along each row (a partial block on its own).
inline std::vector<float> fp8_quantized_reference(const std::vector<float>& x, int64_t rows, int64_t k) {
    std::vector<float> xq = x;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < k; b += 128) {
            const int64_t len = std::min<int64_t>(128, k - b);
            cpu::fp8_round_trip(xq.data() + r * k + b, len, len);
        }
    return xq;
}

// Device FP8 activations of bf16 x [rows, k].
struct DeviceFp8Act {
    cuda::DeviceBuffer<uint8_t> q;
    cuda::DeviceBuffer<float> scale;
};
inline DeviceFp8Act quantize_on_device(const std::vector<float>& x, int64_t rows, int64_t k) {
    auto xd = to_device(to_bf16(x));
    DeviceFp8Act a{poisoned<uint8_t>(size_t(rows * k)), poisoned<float>(size_t(rows * ((k + 127) / 128)))};
    cuda::ActQuantParams p;
    p.x = reinterpret_cast<const __nv_bfloat16*>(xd.get());
    p.q = a.q.get();
    p.scales = a.scale.get();
    p.rows = rows;
    p.cols = k;
    p.x_stride = k;
    cuda::act_quant_fp8(p, nullptr);
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    return a;
}

inline std::vector<float> abs_values(std::vector<float> x) {
    for (auto& v : x) v = std::fabs(v);
    return x;
}

// Compares bf16 outputs [rows, n] with the f32 reference; tol per element = f32_sum_tolerance(k, absdot) +
// extra_rel * absdot (a documented hardware allowance, 0 for CUDA-core paths).
inline void expect_bf16_close(const std::string& what, const std::vector<uint16_t>& got, const std::vector<float>& ref,
                              const std::vector<float>& absdot, int64_t k, double extra_rel = 0.0) {
    ASSERT_EQ(got.size(), ref.size()) << what;
    Bf16Bracket bracket(what);
    for (size_t i = 0; i < got.size(); ++i)
        bracket.add(int64_t(i), bf16_to_f32(got[i]), ref[i],
                    f32_sum_tolerance(k, absdot[i]) + extra_rel * double(absdot[i]));
    bracket.expect_ok();
}

}  // namespace dsv4::gpu_test
