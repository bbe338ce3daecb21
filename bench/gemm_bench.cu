// Matrix-product micro-benchmark on the device itself: first the limits (device-to-device copy bandwidth, a
// cuBLASLt bf16 GEMM rate), then the decode FP8 GEMV (skinny path) at V4-Flash shapes for M = 1..16, the wo_a
// grouped projection and the routed-expert FP4 GEMM at decode, each as bytes moved / time / fraction of the
// measured copy bandwidth. Weights rotate over copies larger than L2, so every launch reads them from DRAM.
// Correctness: the skinny output at M = 16 is compared with the cuBLASLt path (worst |diff| / max |y| printed).
// Usage: dsv4_bench_gemm   (numbers recorded in docs/perf.md)
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/gemm_bf16/gemm_bf16.h"
#include "kernels/cuda/gemm_fp8/gemm_fp8.h"
#include "kernels/cuda/grouped_linear/grouped_linear.h"
#include "kernels/cuda/moe_gemm/moe_gemm.h"
#include "kernels/cuda/smoke/device_info.h"

using namespace dsv4::cuda;

namespace {

constexpr size_t kRotateBytes = size_t(512) << 20;  // > 10x the 50 MiB L2 of an H100

__global__ void fill_bytes(uint8_t* p, size_t n, uint32_t seed, bool fp8) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        uint8_t b = uint8_t(h);
        if (fp8 && (b & 0x7F) == 0x7F) b ^= 1;
        p[i] = b;
    }
}
__global__ void fill_f32(float* p, size_t n, float v) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] = v;
}
__global__ void fill_bf16(__nv_bfloat16* p, size_t n) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        p[i] = __float2bfloat16(float(int(i % 17) - 8) * 0.0625f);
}
__global__ void fill_e8m0(uint8_t* p, size_t n) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        p[i] = uint8_t(120 + i % 5);
}

void bytes(DeviceBuffer<uint8_t>& b, uint32_t seed, bool fp8) {
    fill_bytes<<<1024, 256>>>(b.get(), b.size(), seed, fp8);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

template <typename F>
float time_ms(int iters, F&& f) {
    f(0);
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    Event start, stop;
    start.record(nullptr);
    for (int i = 0; i < iters; ++i) f(i);
    stop.record(nullptr);
    return stop.elapsed_since(start) / float(iters);
}

float bf16_to_float_host(uint16_t b) {
    uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

}  // namespace

int main() {
    std::printf("device: %s\n", describe_device(0).c_str());
    CublasLt lt;

    // 1. Limits: copy bandwidth (read + write) and the bf16 GEMM rate.
    const size_t copy_bytes = size_t(1) << 30;
    DeviceBuffer<uint8_t> src(copy_bytes), dst(copy_bytes);
    const float copy_ms = time_ms(20, [&](int) {
        DSV4_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), copy_bytes, cudaMemcpyDeviceToDevice, nullptr));
    });
    const double copy_gbs = 2.0 * double(copy_bytes) / (copy_ms * 1e-3) / 1e9;
    std::printf("limit: device-to-device copy %.0f GB/s (read + write of 1 GiB, %.3f ms)\n", copy_gbs, copy_ms);
    {
        const int64_t s = 8192;
        DeviceBuffer<__nv_bfloat16> a(size_t(s * s)), b(size_t(s * s)), c(size_t(s * s));
        fill_bf16<<<1024, 256>>>(a.get(), a.size());
        fill_bf16<<<1024, 256>>>(b.get(), b.size());
        DeviceBuffer<uint8_t> ws(kGemmBf16WorkspaceBytes);
        GemmBf16Params p;
        p.x = a.get();
        p.w = b.get();
        p.y = c.get();
        p.m = p.n = p.k = s;
        p.workspace = ws.get();
        p.workspace_bytes = ws.bytes();
        const float ms = time_ms(10, [&](int) { gemm_bf16(lt, p, nullptr); });
        std::printf("limit: cuBLASLt bf16 GEMM %lldx%lldx%lld %.0f TFLOP/s (%.3f ms)\n", (long long)s, (long long)s,
                    (long long)s, 2.0 * double(s) * s * s / (ms * 1e-3) / 1e12, ms);
    }

    // 2. Decode FP8 GEMV (skinny path) at V4-Flash shapes.
    struct Shape {
        const char* name;
        int64_t n, k;
    };
    const Shape shapes[] = {{"attn.wq_b", 32768, 1024}, {"attn.wo_b", 4096, 8192}, {"attn.wq_a", 1024, 4096},
                            {"shared.w1", 2048, 4096},  {"shared.w2", 4096, 2048}};
    int sms = 0;
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    std::printf("\n%-10s %6s %6s %3s %6s %9s %9s %8s %6s\n", "fp8 gemv", "N", "K", "M", "splits", "bytes", "us",
                "GB/s", "of bw");
    for (const Shape& s : shapes) {
        const size_t w_bytes = size_t(s.n * s.k);
        const int copies = int(std::max<size_t>(1, kRotateBytes / w_bytes));
        DeviceBuffer<uint8_t> w(w_bytes * copies);
        bytes(w, 7, true);
        const int64_t kb = (s.k + 127) / 128, nb = (s.n + 127) / 128;
        DeviceBuffer<float> w_scale(size_t(nb * kb)), a_scale(size_t(16 * kb));
        fill_f32<<<64, 256>>>(w_scale.get(), w_scale.size(), 1.0f / 256);
        fill_f32<<<64, 256>>>(a_scale.get(), a_scale.size(), 1.0f / 64);
        DeviceBuffer<uint8_t> a(size_t(16 * s.k));
        bytes(a, 11, true);
        DeviceBuffer<__nv_bfloat16> y(size_t(16 * s.n)), y_ref(size_t(16 * s.n));
        DeviceBuffer<uint8_t> ws(fp8_gemm_workspace_bytes(fp8_gemm_config(200, s.n, s.k, sms, Fp8GemmPath::kCublasLt),
                                                          16, s.n, s.k) +
                                 size_t(64) * 16 * s.n * 4);
        for (int m : {1, 2, 4, 8, 16}) {
            Fp8GemmParams p;
            p.a = a.get();
            p.a_scale = a_scale.get();
            p.w_scale = w_scale.get();
            p.y = y.get();
            p.m = m;
            p.n = s.n;
            p.k = s.k;
            p.workspace = ws.get();
            p.workspace_bytes = ws.bytes();
            p.path = Fp8GemmPath::kSkinny;
            const Fp8GemmConfig cfg = fp8_gemm_config(m, s.n, s.k, sms, p.path);
            const float ms = time_ms(100, [&](int i) {
                p.w = w.get() + size_t(i % copies) * w_bytes;
                fp8_gemm(lt, p, nullptr);
            });
            const double moved = double(w_bytes) + 4.0 * nb * kb + double(m) * s.k + 4.0 * m * kb + 2.0 * m * s.n;
            const double gbs = moved / (ms * 1e-3) / 1e9;
            std::printf("%-10s %6lld %6lld %3d %6d %9.0f %9.2f %8.0f %5.0f%%\n", s.name, (long long)s.n,
                        (long long)s.k, m, cfg.splits, moved, ms * 1e3, gbs, 100.0 * gbs / copy_gbs);
            if (m == 16) {  // correctness: skinny vs cuBLASLt on the same inputs
                p.w = w.get();
                fp8_gemm(lt, p, nullptr);
                Fp8GemmParams q = p;
                q.path = Fp8GemmPath::kCublasLt;
                q.y = y_ref.get();
                fp8_gemm(lt, q, nullptr);
                std::vector<uint16_t> h(size_t(16 * s.n)), r(h.size());
                DSV4_CUDA_CHECK(cudaMemcpy(h.data(), y.get(), h.size() * 2, cudaMemcpyDeviceToHost));
                DSV4_CUDA_CHECK(cudaMemcpy(r.data(), y_ref.get(), r.size() * 2, cudaMemcpyDeviceToHost));
                double worst = 0, scale = 0;
                for (size_t i = 0; i < h.size(); ++i) {
                    worst = std::max(worst, double(std::fabs(bf16_to_float_host(h[i]) - bf16_to_float_host(r[i]))));
                    scale = std::max(scale, double(std::fabs(bf16_to_float_host(r[i]))));
                }
                std::printf("%-10s check: skinny vs cuBLASLt at M=16, worst |diff| / max |y| = %.2e%s\n", s.name,
                            worst / scale, std::isfinite(worst) && worst / scale < 1e-2 ? "" : "  <-- MISMATCH");
            }
        }
    }

    // 3. wo_a grouped projection at decode (8 groups x [1024, 4096] FP8, bf16 activations).
    {
        const int64_t groups = 8, in = 4096, out = 1024;
        const size_t w_bytes = size_t(groups * out * in);
        const int copies = int(std::max<size_t>(1, kRotateBytes / w_bytes));
        DeviceBuffer<uint8_t> w(w_bytes * copies);
        bytes(w, 5, true);
        DeviceBuffer<float> w_scale(size_t(groups * out / 128 * in / 128));
        fill_f32<<<64, 256>>>(w_scale.get(), w_scale.size(), 1.0f / 256);
        DeviceBuffer<__nv_bfloat16> x(size_t(16 * groups * in)), y(size_t(16 * groups * out));
        fill_bf16<<<256, 256>>>(x.get(), x.size());
        DeviceBuffer<uint8_t> ws(size_t(64) * 16 * groups * out * 4);
        for (int m : {1, 4, 16}) {
            GroupedLinearParams p;
            p.x = x.get();
            p.w_scale = w_scale.get();
            p.y = y.get();
            p.m = m;
            p.groups = groups;
            p.in = in;
            p.out = out;
            p.workspace = ws.get();
            p.workspace_bytes = ws.bytes();
            const float ms = time_ms(100, [&](int i) {
                p.w = w.get() + size_t(i % copies) * w_bytes;
                grouped_linear(p, nullptr);
            });
            const double moved = double(w_bytes) + 2.0 * m * groups * (in + out);
            const double gbs = moved / (ms * 1e-3) / 1e9;
            std::printf("%-10s %6lld %6lld %3d %6s %9.0f %9.2f %8.0f %5.0f%%\n", "wo_a", (long long)(groups * out),
                        (long long)in, m, "-", moved, ms * 1e3, gbs, 100.0 * gbs / copy_gbs);
        }
    }

    // 4. Routed experts at decode: one token, 6 of 256 experts, MXFP4 w1 [2048, 4096] (V4-Flash: K = hidden 4096).
    {
        const int64_t experts = 256, n = 2048, k = 4096, active = 6;
        const size_t w_bytes = size_t(experts * n * k / 2);
        DeviceBuffer<uint8_t> w(w_bytes), scale(size_t(experts * n * k / 32));
        bytes(w, 3, false);
        fill_e8m0<<<1024, 256>>>(scale.get(), scale.size());
        DeviceBuffer<uint8_t> a{size_t(k)};
        bytes(a, 9, true);
        DeviceBuffer<float> a_scale(size_t(k / 128));
        fill_f32<<<1, 64>>>(a_scale.get(), a_scale.size(), 1.0f / 64);
        // 8 routings of 6 experts each (48 distinct experts, 200 MB of weights), rotated so reads come from DRAM.
        constexpr int kRoutings = 8;
        std::vector<DeviceBuffer<int32_t>> od;
        for (int v = 0; v < kRoutings; ++v) {
            std::vector<int32_t> offsets(size_t(experts + 1), 0);
            for (int64_t e = 0; e < experts; ++e)
                offsets[size_t(e + 1)] = offsets[size_t(e)] + (e % 32 == v && e / 32 < active ? 1 : 0);
            od.emplace_back(offsets.size());
            od.back().upload(offsets.data(), offsets.size());
        }
        const int32_t slots = int32_t(active);
        std::vector<int32_t> rows(size_t(slots), 0);
        DeviceBuffer<int32_t> rd{size_t(slots)};
        rd.upload(rows.data(), size_t(slots));
        DeviceBuffer<__nv_bfloat16> y(size_t(slots * n));
        MoeGemmParams p;
        p.a = a.get();
        p.a_scale = a_scale.get();
        p.row_index = rd.get();
        p.expert_offsets = od[0].get();
        p.w = w.get();
        p.w_scale = scale.get();
        p.y = y.get();
        p.experts = experts;
        p.n = n;
        p.k = k;
        p.max_slots_per_expert = 1;
        const float ms = time_ms(100, [&](int i) {
            p.expert_offsets = od[size_t(i % kRoutings)].get();
            moe_gemm(p, nullptr);
        });
        const double moved = double(slots) * (n * k / 2 + n * k / 32) + k + 2.0 * slots * n;
        const double gbs = moved / (ms * 1e-3) / 1e9;
        std::printf("%-10s %6lld %6lld %3d %6s %9.0f %9.2f %8.0f %5.0f%%  (%d experts of %lld, MXFP4)\n",
                    "moe w1", (long long)n, (long long)k, 1, "-", moved, ms * 1e3, gbs, 100.0 * gbs / copy_gbs, slots,
                    (long long)experts);
    }
    return 0;
}
