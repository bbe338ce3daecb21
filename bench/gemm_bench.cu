// Matrix-product micro-benchmark on the device itself: first the limits (device-to-device copy bandwidth, a
// cuBLASLt bf16 GEMM rate, the rate of the f16 mma.sync and of the e4m3 -> f16 unpack the FP8 mma path issues), then
// the FP8 GEMM at V4-Flash shapes for M = 1 .. 4096 on the skinny (CUDA-core) and mma (tensor-core) paths, every
// mma tile shape at M = 16 .. 256, cuBLASLt at prefill size, the wo_a grouped projection, the head (CUDA cores
// against tensor cores) and the routed-expert FP4 GEMM at decode, each as time, bytes moved / time, FLOP/s and fraction of the measured limits. Weights rotate over
// copies larger than L2, so every launch reads them from DRAM.
// Correctness: mma vs skinny at M = 16 (worst |diff| / max |y|), and mma rows of a 256-row call equal to the same
// rows computed alone (bitwise).
// Usage: dsv4_bench_gemm   (numbers recorded in docs/perf.md)
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/cuda/bf16_linear/bf16_linear.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/dense_linear/dense_linear.h"
#include "kernels/cuda/gemm_bf16/gemm_bf16.h"
#include "kernels/cuda/gemm_fp8/gemm_fp8.h"
#include "kernels/cuda/gemm_fp8/gemm_fp8_kernels.h"
#include "kernels/cuda/grouped_linear/grouped_linear.h"
#include "kernels/cuda/grouped_linear/grouped_linear_kernels.h"
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

// Peak of the instruction the FP8 mma path issues: 8 independent m16n8k16 f16 MMA chains per warp.
__global__ void hmma_peak(float* out, int iters) {
    uint32_t a[4] = {threadIdx.x, threadIdx.x * 3u, threadIdx.x * 5u, threadIdx.x * 7u};
    const uint32_t b0 = blockIdx.x * 0x00010001u, b1 = b0 ^ 0x3C003C00u;
    float d[8][4] = {};
    for (int i = 0; i < iters; ++i)
#pragma unroll
        for (int c = 0; c < 8; ++c)
            asm volatile(
                "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                "{%0, %1, %2, %3};"
                : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    float sum = 0;
    for (int c = 0; c < 8; ++c) sum += d[c][0] + d[c][1] + d[c][2] + d[c][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

// Rate of the e4m3-pair -> f16-pair unpack (F2FP): 8 independent chains of two unpacks and one xor per thread.
__global__ void unpack_peak(uint32_t* out, int iters) {
    uint32_t v[8];
    for (int c = 0; c < 8; ++c) v[c] = threadIdx.x * (2u * c + 1u);
    for (int i = 0; i < iters; ++i)
#pragma unroll
        for (int c = 0; c < 8; ++c) {
            uint32_t lo, hi;
            asm volatile(
                "{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}"
                : "=r"(lo), "=r"(hi)
                : "r"(v[c]));
            v[c] = lo ^ (hi >> 3);
        }
    uint32_t x = 0;
    for (int c = 0; c < 8; ++c) x ^= v[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = x;
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

    int sms = 0;
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    double hmma_tflops = 0;
    {
        const int blocks = sms * 8, threads = 128, iters = 4096;
        DeviceBuffer<float> out(size_t(blocks * threads));
        const float ms = time_ms(5, [&](int) { hmma_peak<<<blocks, threads>>>(out.get(), iters); });
        DSV4_CUDA_CHECK(cudaGetLastError());
        hmma_tflops = double(blocks) * (threads / 32) * iters * 8 * 4096.0 / (ms * 1e-3) / 1e12;
        std::printf("limit: mma.sync m16n8k16 f16 -> f32 %.0f TFLOP/s (%.3f ms)\n", hmma_tflops, ms);
        DeviceBuffer<uint32_t> uout(size_t(blocks * threads));
        const float ums = time_ms(5, [&](int) { unpack_peak<<<blocks, threads>>>(uout.get(), iters); });
        DSV4_CUDA_CHECK(cudaGetLastError());
        const double unpacks = double(blocks) * (threads / 32) * iters * 8 * 2;
        std::printf("limit: e4m3x2 -> f16x2 unpack %.2f warp instructions per SM per ns (with one xor each per two; "
                    "%.3f ms)\n",
                    unpacks / sms / (ums * 1e6), ums);
    }

    // 2. FP8 GEMM at V4-Flash shapes: skinny (CUDA cores) and mma (tensor cores).
    struct Shape {
        const char* name;
        int64_t n, k;
    };
    const Shape shapes[] = {{"attn.wq_b", 32768, 1024}, {"attn.wo_b", 4096, 8192}, {"attn.wq_a", 1024, 4096},
                            {"shared.w1", 2048, 4096},  {"shared.w2", 4096, 2048}};
    const int64_t max_m = 4096;
    std::printf("\n%-10s %6s %6s %5s %-14s %9s %10s %7s %6s %8s %6s\n", "fp8 gemm", "N", "K", "M", "path", "us",
                "bytes", "GB/s", "of bw", "TFLOP/s", "of mma");
    for (const Shape& s : shapes) {
        const size_t w_bytes = size_t(s.n * s.k);
        const int copies = int(std::max<size_t>(1, kRotateBytes / w_bytes));
        DeviceBuffer<uint8_t> w(w_bytes * copies);
        bytes(w, 7, true);
        const int64_t kb = (s.k + 127) / 128, nb = (s.n + 127) / 128;
        DeviceBuffer<float> w_scale(size_t(nb * kb)), a_scale(size_t(max_m * kb));
        fill_f32<<<64, 256>>>(w_scale.get(), w_scale.size(), 1.0f / 256);
        fill_f32<<<64, 256>>>(a_scale.get(), a_scale.size(), 1.0f / 64);
        DeviceBuffer<uint8_t> a(size_t(max_m * s.k));
        bytes(a, 11, true);
        DeviceBuffer<__nv_bfloat16> y(size_t(max_m * s.n)), y_ref(size_t(max_m * s.n));
        DeviceBuffer<uint8_t> ws(std::max(
            fp8_gemm_workspace_bytes(fp8_gemm_config(max_m, s.n, s.k, sms, Fp8GemmPath::kCublasLt), max_m, s.n, s.k),
            fp8_gemm_workspace_bytes(fp8_gemm_config(256, s.n, s.k, sms, Fp8GemmPath::kSkinny), 256, s.n, s.k)));
        Fp8GemmParams p;
        p.a = a.get();
        p.a_scale = a_scale.get();
        p.w = w.get();
        p.w_scale = w_scale.get();
        p.y = y.get();
        p.n = s.n;
        p.k = s.k;
        p.workspace = ws.get();
        p.workspace_bytes = ws.bytes();
        auto host = [](const DeviceBuffer<__nv_bfloat16>& b, size_t count) {
            std::vector<uint16_t> h(count);
            DSV4_CUDA_CHECK(cudaMemcpy(h.data(), b.get(), count * 2, cudaMemcpyDeviceToHost));
            return h;
        };
        // One timed variant: `path`, and for mma a forced tile (block_m > 0) or the heuristic's.
        auto run = [&](int64_t m, Fp8GemmPath path, int block_m, int block_n) {
            p.m = m;
            p.path = path;
            Fp8GemmConfig cfg = fp8_gemm_config(m, s.n, s.k, sms, path, device_has_wgmma());
            if (block_m) cfg.block_m = block_m, cfg.block_n = block_n;
            const int iters = m >= 1024 ? 20 : 100;
            const float ms = time_ms(iters, [&](int i) {
                p.w = w.get() + size_t(i % copies) * w_bytes;
                if (block_m) {
                    DSV4_CUDA_CHECK(launch_fp8_mma(p, cfg, nullptr));
                } else {
                    fp8_gemm(lt, p, nullptr);
                }
            });
            p.w = w.get();
            const double moved = double(w_bytes) + 4.0 * nb * kb + double(m) * s.k + 4.0 * m * kb + 2.0 * m * s.n;
            const double gbs = moved / (ms * 1e-3) / 1e9, tflops = 2.0 * m * s.n * s.k / (ms * 1e-3) / 1e12;
            char name[32];
            if (path == Fp8GemmPath::kMma)
                std::snprintf(name, sizeof name, "mma %dx%d%s", cfg.block_m, cfg.block_n, block_m ? "*" : "");
            else if (path == Fp8GemmPath::kSkinny)
                std::snprintf(name, sizeof name, "skinny s%d", cfg.splits);
            else
                std::snprintf(name, sizeof name, "cublaslt");
            std::printf("%-10s %6lld %6lld %5lld %-14s %9.2f %10.0f %7.0f %5.0f%% %8.1f %5.0f%%\n", s.name,
                        (long long)s.n, (long long)s.k, (long long)m, name, ms * 1e3, moved, gbs,
                        100.0 * gbs / copy_gbs, tflops, 100.0 * tflops / hmma_tflops);
            return ms;
        };
        for (int64_t m : {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096}) {
            if (m <= 256) run(m, Fp8GemmPath::kSkinny, 0, 0);
            run(m, Fp8GemmPath::kMma, 0, 0);
            if (m == 1 || (m >= 16 && m <= 256))
                for (const auto& [bm, bn] :
                     {std::pair{16, 8}, std::pair{16, 16}, std::pair{16, 32}, std::pair{64, 128}})
                    if (fp8_mma_smem_bytes(bm, bn, m, s.k) <= (size_t(96) << 10)) run(m, Fp8GemmPath::kMma, bm, bn);
            if (m >= 1024) run(m, Fp8GemmPath::kMma, 64, 128);  // the warp-MMA tile the warpgroup tile replaces
            if (m >= 128 && device_has_wgmma() && s.k % 128 == 0) run(m, Fp8GemmPath::kMma, 128, 128);
            if (m == 4096) run(m, Fp8GemmPath::kCublasLt, 0, 0);
        }
        // Checks: mma vs skinny at M = 16; mma rows 0, 100, 255 of a 256-row call equal the rows alone.
        p.w = w.get();
        p.m = 16;
        p.path = Fp8GemmPath::kSkinny;
        p.y = y_ref.get();
        fp8_gemm(lt, p, nullptr);
        p.path = Fp8GemmPath::kMma;
        p.y = y.get();
        fp8_gemm(lt, p, nullptr);
        const std::vector<uint16_t> h = host(y, size_t(16 * s.n)), r = host(y_ref, size_t(16 * s.n));
        double worst = 0, scale = 0;
        for (size_t i = 0; i < h.size(); ++i) {
            worst = std::max(worst, double(std::fabs(bf16_to_float_host(h[i]) - bf16_to_float_host(r[i]))));
            scale = std::max(scale, double(std::fabs(bf16_to_float_host(r[i]))));
        }
        std::printf("%-10s check: mma vs skinny at M=16, worst |diff| / max |y| = %.2e%s\n", s.name, worst / scale,
                    std::isfinite(worst) && worst / scale < 1e-2 ? "" : "  <-- MISMATCH");
        p.m = 256;
        fp8_gemm(lt, p, nullptr);
        const std::vector<uint16_t> batch = host(y, size_t(256 * s.n));
        int64_t differing = 0;
        for (int64_t row : {0, 100, 255}) {
            p.a = a.get() + row * s.k;
            p.a_scale = a_scale.get() + row * kb;
            p.m = 1;
            fp8_gemm(lt, p, nullptr);
            const std::vector<uint16_t> alone = host(y, size_t(s.n));
            for (int64_t j = 0; j < s.n; ++j) differing += alone[size_t(j)] != batch[size_t(row * s.n + j)];
        }
        p.a = a.get();
        p.a_scale = a_scale.get();
        std::printf("%-10s check: mma rows 0, 100, 255 alone vs in a 256-row call: %lld of %lld elements differ%s\n",
                    s.name, (long long)differing, (long long)(3 * s.n), differing ? "  <-- NOT INVARIANT" : "");
    }

    // 3. wo_a grouped projection (8 groups x [1024, 4096] FP8, bf16 activations), decode to batch sizes.
    {
        const int64_t groups = 8, in = 4096, out = 1024, max_m = 4096;
        const size_t w_bytes = size_t(groups * out * in);
        const int copies = int(std::max<size_t>(1, kRotateBytes / w_bytes));
        DeviceBuffer<uint8_t> w(w_bytes * copies);
        bytes(w, 5, true);
        DeviceBuffer<float> w_scale(size_t(groups * out / 128 * in / 128));
        fill_f32<<<64, 256>>>(w_scale.get(), w_scale.size(), 1.0f / 256);
        DeviceBuffer<__nv_bfloat16> x(size_t(max_m * groups * in)), y(size_t(max_m * groups * out));
        fill_bf16<<<256, 256>>>(x.get(), x.size());
        // (m, forced tile): {0, 0} = grouped_linear's choice; at 1 and 16 rows also each 16-row decode tile, at 4096
        // rows the 64 x 128 warp-MMA tile against it.
        using T = bf16_act_mma::Tiles;
        for (const auto& [m, forced] : {std::pair<int, T>{1, {0, 0}}, {1, {16, 8}}, {1, {16, 16}}, {1, {16, 32}},
                                        {4, {0, 0}}, {16, {0, 0}}, {16, {16, 8}}, {16, {16, 32}}, {64, {0, 0}},
                                        {256, {0, 0}}, {4096, {0, 0}}, {4096, {64, 128}}}) {
            GroupedLinearParams p;
            p.x = x.get();
            p.w_scale = w_scale.get();
            p.y = y.get();
            p.m = m;
            p.groups = groups;
            p.in = in;
            p.out = out;
            const bool is_forced = forced.block_m != 0;
            const bf16_act_mma::Tiles tiles =
                is_forced ? forced : grouped_linear_tiles(m, groups, in, out, multiprocessor_count());
            const float ms = time_ms(m >= 1024 ? 20 : 100, [&](int i) {
                p.w = w.get() + size_t(i % copies) * w_bytes;
                if (is_forced)
                    DSV4_CUDA_CHECK(launch_grouped_linear_mma(p, tiles, nullptr));
                else
                    grouped_linear(p, nullptr);
            });
            const double moved = double(w_bytes) + 2.0 * m * groups * (in + out);
            const double gbs = moved / (ms * 1e-3) / 1e9, tflops = 2.0 * m * groups * out * in / (ms * 1e-3) / 1e12;
            char tile[24];
            std::snprintf(tile, sizeof tile, "%dx%d%s", tiles.block_m, tiles.block_n, is_forced ? "*" : "");
            std::printf("%-10s %6lld %6lld %4d %-8s %9.0f %9.2f %8.0f %5.0f%% %8.1f TFLOP/s\n", "wo_a",
                        (long long)(groups * out), (long long)in, m, tile, moved, ms * 1e3, gbs, 100.0 * gbs / copy_gbs,
                        tflops);
        }
    }

    // 3b. The head (V4-Flash lm_head [129280, 4096] bf16, f32 logits): dense_linear (CUDA-core f32 chains) against
    // bf16_linear (tensor cores), 1 .. 256 rows. The weight (1.06 GB) is far beyond L2.
    {
        const int64_t n = 129280, k = 4096, max_m = 256;
        DeviceBuffer<__nv_bfloat16> w(size_t(n * k)), x(size_t(max_m * k));
        fill_bf16<<<1024, 256>>>(w.get(), w.size());
        fill_bf16<<<256, 256>>>(x.get(), x.size());
        DeviceBuffer<float> y(size_t(max_m * n));
        for (int m : {1, 16, 64, 256}) {
            const double moved = 2.0 * double(n * k) + 4.0 * double(m * n);
            for (bool tensor_cores : {false, true}) {
                if (!tensor_cores && m > 64) continue;  // seconds per call at 256 rows
                const float ms = time_ms(tensor_cores ? 20 : 5, [&](int) {
                    if (tensor_cores) {
                        Bf16LinearParams p;
                        p.x = x.get();
                        p.w = w.get();
                        p.y = y.get();
                        p.m = m;
                        p.n = n;
                        p.k = k;
                        p.ldx = k;
                        p.ldy = n;
                        bf16_linear(p, nullptr);
                    } else {
                        DenseLinearParams p;
                        p.type = DenseType::kBF16;
                        p.x = x.get();
                        p.w = w.get();
                        p.y = y.get();
                        p.m = m;
                        p.n = n;
                        p.k = k;
                        p.ldx = p.ldw = k;
                        p.ldy = n;
                        dense_linear(p, nullptr);
                    }
                });
                const double gbs = moved / (ms * 1e-3) / 1e9;
                std::printf("%-10s %6lld %6lld %3d %6s %9.0f %9.2f %8.0f %5.0f%%  %.1f TFLOP/s\n",
                            tensor_cores ? "head mma" : "head dense", (long long)n, (long long)k, m, "-", moved,
                            ms * 1e3, gbs, 100.0 * gbs / copy_gbs, 2.0 * m * n * k / (ms * 1e-3) / 1e12);
            }
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
