// Does Hopper's warpgroup MMA (wgmma, A from registers, B from shared memory) give the same bits as the warp MMA
// (mma.sync m16n8k16) that every tensor-core kernel of dsv4 uses today? The kernels' batch and chunk invariance rests
// on each output's sum being the same instructions on the same operands; a wgmma kernel may join them only if, for
// the same operands and the same starting accumulator, a k16 step of wgmma rounds exactly as a k16 mma.sync does.
//
// Each CTA (one warpgroup) runs one trial: A (64 x 16 s f16), B (16 s x kN f16, K-major), C (64 x kN f32); it computes
// D = A B + C over s k16 steps once with wgmma.m64n16k16 and once with mma.sync.m16n8k16 per warp (the same A
// fragments; B fragments read from the same tile), and writes both. The host compares them bit by bit and checks
// both against a double-precision sum (so a wrong descriptor or layout cannot pass as "equal but wrong"). Operand
// classes: wide-range f16 with subnormals; the moe_mma operands (e2m1 x 2^-14 weights, e4m3 activations, C = 0);
// heavy cancellation. It also runs FP8 wgmma (m64n16k32 e4m3) against mma.sync on the same values as f16, to measure
// how far the native FP8 path is from the exact-product one.
// Usage: dsv4_probe_wgmma_bits   (outcome in docs/perf.md, "wgmma against mma.sync, bit for bit")
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "probe_check.h"

namespace {

constexpr int kM = 64, kN = 16, kThreads = 128;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return uint32_t(__cvta_generic_to_shared(p));
}

// K-major, no swizzle: core matrices of 8 rows x 16 bytes, K-adjacent ones kLbo apart, N-adjacent ones kSbo apart.
__device__ __forceinline__ uint64_t smem_desc(const void* p, uint32_t lbo, uint32_t sbo) {
    return uint64_t((smem_u32(p) >> 4) & 0x3FFF) | uint64_t((lbo >> 4) & 0x3FFF) << 16 |
           uint64_t((sbo >> 4) & 0x3FFF) << 32;
}

__device__ __forceinline__ void wgmma_f16_m64n16k16(float (&d)[8], const uint32_t (&a)[4], uint64_t desc) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, "
        "%12, p, 1, 1, 0;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
#endif
}

__device__ __forceinline__ void wgmma_e4m3_m64n16k32(float (&d)[8], const uint32_t (&a)[4], uint64_t desc) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, "
        "{%8, %9, %10, %11}, %12, p, 1, 1;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
#endif
}

__device__ __forceinline__ void wgmma_sync_all() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;\n wgmma.wait_group.sync.aligned 0;" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack(uint16_t lo, uint16_t hi) {
    return uint32_t(lo) | uint32_t(hi) << 16;
}

// a: [trial][64][16 s] f16 bits; b: [trial][kN][16 s] (K-major); c: [trial][64][kN]; outputs like c.
// kFp8: a and b hold e4m3 bytes instead ([64][32 s], [kN][32 s]); the mma.sync side converts them to f16.
template <bool kFp8>
__global__ void __launch_bounds__(kThreads)
    probe_kernel(const uint16_t* a16, const uint8_t* a8, const uint16_t* b16, const uint8_t* b8, const float* c,
                 float* d_wgmma, float* d_mma, int steps, uint32_t lbo, uint32_t sbo) {
    __shared__ __align__(128) uint8_t b_tile[kN * 32];  // one step: kN rows x 32 bytes, as core matrices
    const int trial = blockIdx.x, tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int row0 = 16 * warp + g, row1 = row0 + 8;
    float dw[8], dm[2][4];
    const float* ct = c + int64_t(trial) * kM * kN;
    for (int j = 0; j < 2; ++j) {  // n8 tile j: columns 8j + 2t, 8j + 2t + 1
        dw[4 * j + 0] = dm[j][0] = ct[row0 * kN + 8 * j + 2 * t];
        dw[4 * j + 1] = dm[j][1] = ct[row0 * kN + 8 * j + 2 * t + 1];
        dw[4 * j + 2] = dm[j][2] = ct[row1 * kN + 8 * j + 2 * t];
        dw[4 * j + 3] = dm[j][3] = ct[row1 * kN + 8 * j + 2 * t + 1];
    }
    for (int s = 0; s < steps; ++s) {
        // The B tile of this step into shared memory: row n's 16-byte chunk q (k 8q..8q+7 as f16, 16q.. as e4m3)
        // lives in core matrix (n / 8, q): offset (n / 8) * sbo_bytes + q * lbo_bytes + (n % 8) * 16.
        __syncthreads();
        for (int i = tid; i < kN * 2; i += kThreads) {
            const int n = i / 2, q = i % 2;
            const uint8_t* src =
                kFp8 ? b8 + (int64_t(trial) * kN + n) * 32 * steps + 32 * s + 16 * q
                     : reinterpret_cast<const uint8_t*>(b16 + (int64_t(trial) * kN + n) * 16 * steps + 16 * s + 8 * q);
            uint8_t* dst = b_tile + (n / 8) * 256 + q * 128 + (n % 8) * 16;
            memcpy(dst, src, 16);
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        uint32_t a[4], am[2][4];  // am: the f16 fragments of the mma.sync side (two k16 halves for FP8)
        if constexpr (kFp8) {
            const uint8_t* at = a8 + int64_t(trial) * kM * 32 * steps + 32 * s;
            auto word = [&](int row, int k) {
                uint32_t w;
                memcpy(&w, at + int64_t(row) * 32 * steps + k, 4);
                return w;
            };
            a[0] = word(row0, 4 * t), a[1] = word(row1, 4 * t), a[2] = word(row0, 4 * t + 16);
            a[3] = word(row1, 4 * t + 16);
            // m16n8k32 e4m3 A: lane t holds k 4t..4t+3 (a0, a1) and 16+4t.. (a2, a3). For the f16 side split k into
            // two k16 halves: half h takes k 16h..16h+15 with the m16n8k16 pairs (2t, 2t+1), (2t+8, 2t+9).
            for (int h = 0; h < 2; ++h) {
                auto f16pair = [&](int row, int k) {
                    const uint8_t* p = at + int64_t(row) * 32 * steps + k;
                    __half_raw lo, hi;
                    lo = __nv_cvt_fp8_to_halfraw(p[0], __NV_E4M3);
                    hi = __nv_cvt_fp8_to_halfraw(p[1], __NV_E4M3);
                    return pack(lo.x, hi.x);
                };
                am[h][0] = f16pair(row0, 16 * h + 2 * t), am[h][1] = f16pair(row1, 16 * h + 2 * t);
                am[h][2] = f16pair(row0, 16 * h + 2 * t + 8), am[h][3] = f16pair(row1, 16 * h + 2 * t + 8);
            }
        } else {
            const uint16_t* at = a16 + int64_t(trial) * kM * 16 * steps + 16 * s;
            auto pr = [&](int row, int k) {
                return pack(at[int64_t(row) * 16 * steps + k], at[int64_t(row) * 16 * steps + k + 1]);
            };
            a[0] = pr(row0, 2 * t), a[1] = pr(row1, 2 * t), a[2] = pr(row0, 2 * t + 8), a[3] = pr(row1, 2 * t + 8);
            for (int i = 0; i < 4; ++i) am[0][i] = a[i];
        }
        wgmma_fence();
        if constexpr (kFp8)
            wgmma_e4m3_m64n16k32(dw, a, smem_desc(b_tile, lbo, sbo));
        else
            wgmma_f16_m64n16k16(dw, a, smem_desc(b_tile, lbo, sbo));
        wgmma_sync_all();
        for (int h = 0; h < (kFp8 ? 2 : 1); ++h)
            for (int j = 0; j < 2; ++j) {
                const int n = 8 * j + g;
                uint32_t b0, b1;
                if constexpr (kFp8) {
                    const uint8_t* p = b8 + (int64_t(trial) * kN + n) * 32 * steps + 32 * s + 16 * h;
                    auto f16pair = [&](int k) {
                        return pack(__nv_cvt_fp8_to_halfraw(p[k], __NV_E4M3).x,
                                    __nv_cvt_fp8_to_halfraw(p[k + 1], __NV_E4M3).x);
                    };
                    b0 = f16pair(2 * t), b1 = f16pair(2 * t + 8);
                } else {
                    const uint16_t* p = b16 + (int64_t(trial) * kN + n) * 16 * steps + 16 * s;
                    b0 = pack(p[2 * t], p[2 * t + 1]), b1 = pack(p[2 * t + 8], p[2 * t + 9]);
                }
                mma_f16(dm[j], am[h], b0, b1);
            }
    }
    float* w = d_wgmma + int64_t(trial) * kM * kN;
    float* m = d_mma + int64_t(trial) * kM * kN;
    for (int j = 0; j < 2; ++j) {
        w[row0 * kN + 8 * j + 2 * t] = dw[4 * j + 0], w[row0 * kN + 8 * j + 2 * t + 1] = dw[4 * j + 1];
        w[row1 * kN + 8 * j + 2 * t] = dw[4 * j + 2], w[row1 * kN + 8 * j + 2 * t + 1] = dw[4 * j + 3];
        m[row0 * kN + 8 * j + 2 * t] = dm[j][0], m[row0 * kN + 8 * j + 2 * t + 1] = dm[j][1];
        m[row1 * kN + 8 * j + 2 * t] = dm[j][2], m[row1 * kN + 8 * j + 2 * t + 1] = dm[j][3];
    }
}

uint16_t f16_bits(float v) {
    return __half_as_ushort(__float2half_rn(v));
}
float f16_value(uint16_t b) {
    return __half2float(__ushort_as_half(b));
}
float e4m3_value(uint8_t b) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(b, __NV_E4M3)));
}

enum class Operands { kWide, kMoe, kCancel };
const char* name(Operands o) {
    return o == Operands::kWide  ? "wide f16, subnormals, random C"
           : o == Operands::kMoe ? "e2m1*2^-14 x e4m3, C = 0"
                                 : "cancellation, random C";
}

struct Outcome {
    int64_t elements = 0, differing = 0;
    double worst_wgmma = 0, worst_mma = 0;  // |x - exact| / (sum |terms| * 2^-20)
};

Outcome run(Operands kind, bool fp8, int steps, int trials, uint32_t lbo, uint32_t sbo, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0, 1);
    const int k = (fp8 ? 32 : 16) * steps;
    std::vector<uint16_t> a16(size_t(trials) * kM * k), b16(size_t(trials) * kN * k);
    std::vector<uint8_t> a8(fp8 ? a16.size() : 1), b8(fp8 ? b16.size() : 1);
    std::vector<float> c(size_t(trials) * kM * kN);
    auto wide = [&](int lo, int hi) {  // sign, exponent in [lo, hi], random mantissa; 1 in 8 subnormal
        const float mant = float(1 + u(rng));
        const int e = u(rng) < 0.125 ? -15 - int(u(rng) * 9) : lo + int(u(rng) * (hi - lo + 1));
        return (u(rng) < 0.5 ? -1.0f : 1.0f) * std::ldexp(mant, e);
    };
    auto e4m3_byte = [&]() {
        uint8_t b;
        do b = uint8_t(rng());
        while ((b & 0x7F) == 0x7F);
        return b;
    };
    for (size_t i = 0; i < a16.size(); ++i) {
        if (fp8) {
            a8[i] = e4m3_byte();
        } else if (kind == Operands::kMoe) {
            const uint32_t t = uint32_t(rng()) & 0xF;
            a16[i] = uint16_t(((t << 9) & 0x0E00u) | ((t << 12) & 0x8000u));
        } else if (kind == Operands::kCancel) {
            a16[i] = f16_bits(i % 16 < 2 ? 1024.0f : wide(-14, 0));
        } else {
            a16[i] = f16_bits(wide(-14, 8));
        }
    }
    for (size_t i = 0; i < b16.size(); ++i) {
        if (fp8 || kind == Operands::kMoe) {
            const uint8_t b = e4m3_byte();
            if (fp8)
                b8[i] = b;
            else
                b16[i] = f16_bits(e4m3_value(b));
        } else if (kind == Operands::kCancel) {
            // per row: k 0 and 1 carry +big and -big products (A 1024 there), the rest small
            const int kk = int(i % size_t(k));
            b16[i] = f16_bits(kk % 16 == 0 ? 60.0f : kk % 16 == 1 ? -60.0f : wide(-14, 0));
        } else {
            b16[i] = f16_bits(wide(-14, 8));
        }
    }
    for (auto& v : c) v = kind == Operands::kMoe ? 0.0f : float(wide(-12, 12)) * (u(rng) < 0.1 ? 0.0f : 1.0f);

    uint16_t *da16, *db16;
    uint8_t *da8, *db8;
    float *dc, *dw, *dm;
    PROBE_CHECK(cudaMalloc(&da16, a16.size() * 2));
    PROBE_CHECK(cudaMalloc(&db16, b16.size() * 2));
    PROBE_CHECK(cudaMalloc(&da8, a8.size()));
    PROBE_CHECK(cudaMalloc(&db8, b8.size()));
    PROBE_CHECK(cudaMalloc(&dc, c.size() * 4));
    PROBE_CHECK(cudaMalloc(&dw, c.size() * 4));
    PROBE_CHECK(cudaMalloc(&dm, c.size() * 4));
    PROBE_CHECK(cudaMemcpy(da16, a16.data(), a16.size() * 2, cudaMemcpyHostToDevice));
    PROBE_CHECK(cudaMemcpy(db16, b16.data(), b16.size() * 2, cudaMemcpyHostToDevice));
    PROBE_CHECK(cudaMemcpy(da8, a8.data(), a8.size(), cudaMemcpyHostToDevice));
    PROBE_CHECK(cudaMemcpy(db8, b8.data(), b8.size(), cudaMemcpyHostToDevice));
    PROBE_CHECK(cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice));
    if (fp8)
        probe_kernel<true><<<trials, kThreads>>>(da16, da8, db16, db8, dc, dw, dm, steps, lbo, sbo);
    else
        probe_kernel<false><<<trials, kThreads>>>(da16, da8, db16, db8, dc, dw, dm, steps, lbo, sbo);
    PROBE_CHECK(cudaGetLastError());
    std::vector<float> w(c.size()), m(c.size());
    PROBE_CHECK(cudaMemcpy(w.data(), dw, w.size() * 4, cudaMemcpyDeviceToHost));
    PROBE_CHECK(cudaMemcpy(m.data(), dm, m.size() * 4, cudaMemcpyDeviceToHost));
    for (void* p : {(void*)da16, (void*)db16, (void*)da8, (void*)db8, (void*)dc, (void*)dw, (void*)dm})
        PROBE_CHECK(cudaFree(p));

    Outcome o;
    for (int tr = 0; tr < trials; ++tr)
        for (int r = 0; r < kM; ++r)
            for (int n = 0; n < kN; ++n) {
                const size_t i = (size_t(tr) * kM + r) * kN + n;
                double exact = c[i], mag = std::fabs(c[i]);
                for (int kk = 0; kk < k; ++kk) {
                    const size_t ai = (size_t(tr) * kM + r) * k + kk, bi = (size_t(tr) * kN + n) * k + kk;
                    const double x = fp8 ? e4m3_value(a8[ai]) : f16_value(a16[ai]);
                    const double y = fp8 ? e4m3_value(b8[bi]) : f16_value(b16[bi]);
                    exact += x * y, mag += std::fabs(x * y);
                }
                const double unit = mag * std::ldexp(1.0, -20) + 1e-300;
                o.worst_wgmma = std::max(o.worst_wgmma, std::fabs(w[i] - exact) / unit);
                o.worst_mma = std::max(o.worst_mma, std::fabs(m[i] - exact) / unit);
                uint32_t wb, mb;
                std::memcpy(&wb, &w[i], 4), std::memcpy(&mb, &m[i], 4);
                ++o.elements;
                o.differing += wb != mb;
            }
    return o;
}

}  // namespace

int main() {
    int dev = 0;
    cudaDeviceProp prop;
    PROBE_CHECK(cudaGetDeviceProperties(&prop, dev));
    std::printf("device %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    if (prop.major != 9) {
        std::printf("wgmma is sm_90a only; nothing to probe\n");
        return 0;
    }
    // Which descriptor offset is which: try both assignments on the wide operands; the right one matches the exact
    // sums (within f32 rounding of a few steps), the wrong one scrambles B.
    const uint32_t k_adj = 128, n_adj = 256;
    std::printf("%-34s %-5s %-5s %-10s %10s %10s %14s %14s\n", "operands", "mma", "steps", "lbo/sbo", "elements",
                "differing", "worst wgmma", "worst mma.sync");
    bool ok = true;
    for (int fp8 = 0; fp8 < 2; ++fp8)
        for (Operands kind : {Operands::kWide, Operands::kMoe, Operands::kCancel})
            for (int steps : {1, 2, 8}) {
                if (fp8 && kind != Operands::kMoe) continue;
                for (int swap = 0; swap < 2; ++swap) {
                    const uint32_t lbo = swap ? n_adj : k_adj, sbo = swap ? k_adj : n_adj;
                    const Outcome o = run(kind, fp8, steps, 2048, lbo, sbo, 1234 + steps * 7 + int(kind));
                    std::printf("%-34s %-5s %-5d %4u/%-5u %10lld %10lld %14.3g %14.3g\n", name(kind),
                                fp8 ? "e4m3" : "f16", steps, lbo, sbo, (long long)o.elements, (long long)o.differing,
                                o.worst_wgmma, o.worst_mma);
                    if (!fp8 && !swap && o.differing) ok = false;
                }
            }
    std::printf("f16 wgmma %s mma.sync bit for bit (K-adjacent core matrices at lbo)\n",
                ok ? "equals" : "DIFFERS FROM");
    return ok ? 0 : 1;
}
