// Do the tensor cores sum f16 products as they sum bf16 ones? wo_a's decode tiles (bf16_act_mma.cuh) multiply bf16
// activations by e4m3 weights on bf16 mma.sync, converting every weight pair to bf16 in ~5 instructions; on f16
// mma.sync the weights need one conversion, but the activations must become f16 exactly: a block's bf16 values
// times a power of two 2^-s are exact in f16 when their exponents, after the scale, lie in [-17, 15]. The products are
// then the bf16 path's products times 2^-s, so the block's sum times 2^s has the bf16 path's bits if, and only if,
// the tensor cores align, truncate and round f16 and bf16 products the same way. This probe measures that before any
// kernel relies on it (docs/perf.md, "Levers not yet tried": wo_a's decode tiles on f16 MMAs).
//
// One warp a trial: s k16 steps of mma.sync m16n8k16 from a zero accumulator (a 128-column block is 8 steps),
// once with bf16 operands (x, w) and once with f16 ones (x 2^-s, w); the host compares D_bf16 with D_f16 2^s bit by
// bit and checks both against a double-precision sum (so a wrong fragment layout cannot pass as "equal"). Operand
// classes: activations N(0, 1); spread over the whole 33-binade window; heavy cancellation; the window's bottom
// (f16 subnormals after the scale). Weights: every finite e4m3 value, subnormals included.
// Usage: dsv4_probe_hmma_f16_bf16 [trials per class]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
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

constexpr int kSteps = 8;             // one 128-column block
constexpr int kA = kSteps * 16 * 16;  // A values a trial: [step][row][k]
constexpr int kB = kSteps * 8 * 16;   // B values a trial: [step][n][k]
constexpr int kD = 16 * 8;            // outputs a trial: [row][n]

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two 16-bit values at (row, k) and (row, k + 1) of a row-major [16][16] step as one word.
__device__ __forceinline__ uint32_t pair(const uint16_t* m, int row, int k) {
    return uint32_t(m[row * 16 + k]) | uint32_t(m[row * 16 + k + 1]) << 16;
}

// grid: one warp a trial. kF16: the f16 operands, else the bf16 ones (the same layout: 16-bit patterns).
template <bool kF16>
__global__ void probe_kernel(const uint16_t* a, const uint16_t* b, float* d) {
    const int trial = blockIdx.x, lane = threadIdx.x, g = lane / 4, t = lane % 4;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int step = 0; step < kSteps; ++step) {
        const uint16_t* as = a + (size_t(trial) * kSteps + step) * 256;
        const uint16_t* bs = b + (size_t(trial) * kSteps + step) * 128;
        const uint32_t af[4] = {pair(as, g, 2 * t), pair(as, g + 8, 2 * t), pair(as, g, 2 * t + 8),
                                pair(as, g + 8, 2 * t + 8)};
        const uint32_t b0 = pair(bs, g, 2 * t), b1 = pair(bs, g, 2 * t + 8);  // B stored [n][k]
        if constexpr (kF16)
            mma_f16(acc, af, b0, b1);
        else
            mma_bf16(acc, af, b0, b1);
    }
    float* out = d + size_t(trial) * kD;
    out[g * 8 + 2 * t] = acc[0];
    out[g * 8 + 2 * t + 1] = acc[1];
    out[(g + 8) * 8 + 2 * t] = acc[2];
    out[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

float e4m3_value(uint8_t code) {
    const int sign = code >> 7, exponent = (code >> 3) & 15, mantissa = code & 7;
    const float v = exponent ? std::ldexp(1.0f + mantissa / 8.0f, exponent - 7) : std::ldexp(mantissa / 8.0f, -6);
    return sign ? -v : v;
}

uint16_t bf16_bits(float v) {
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    uint16_t u;
    std::memcpy(&u, &h, 2);
    return u;
}
uint16_t f16_bits(float v) {
    const __half h = __float2half_rn(v);
    uint16_t u;
    std::memcpy(&u, &h, 2);
    return u;
}
float bf16_value(uint16_t u) {
    const uint32_t w = uint32_t(u) << 16;
    float v;
    std::memcpy(&v, &w, 4);
    return v;
}
uint32_t bits(float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
}

struct ClassResult {
    long outputs = 0, differing = 0, off_exact = 0;
    double worst_rel = 0.0;
};

// One class: `draw` gives an activation (a float that is a bf16 value); the scale puts each trial's largest
// |activation| at exponent 15, and every value must land in the exact window (else it is redrawn as 0).
template <class Draw>
ClassResult run_class(int trials, std::mt19937& rng, Draw draw) {
    std::vector<uint16_t> a_bf16(size_t(trials) * kA), a_f16(a_bf16.size()), b_bf16(size_t(trials) * kB),
        b_f16(b_bf16.size());
    std::vector<float> x(size_t(trials) * kA), w(size_t(trials) * kB);
    std::vector<int> scale_exponent(static_cast<size_t>(trials));
    std::uniform_int_distribution<int> code(0, 255);
    for (int tr = 0; tr < trials; ++tr) {
        float amax = 0.0f;
        for (int i = 0; i < kA; ++i) {
            float v = bf16_value(bf16_bits(draw(rng)));
            x[size_t(tr) * kA + i] = v;
            amax = std::fmax(amax, std::fabs(v));
        }
        int e = 0;
        std::frexp(amax, &e);  // amax in [2^(e-1), 2^e)
        const int s = amax > 0.0f ? (e - 1) - 15 : 0;
        scale_exponent[size_t(tr)] = s;
        for (int i = 0; i < kA; ++i) {
            float& v = x[size_t(tr) * kA + i];
            const float scaled = std::ldexp(v, -s);
            int ve = 0;
            std::frexp(scaled, &ve);
            if (scaled != 0.0f && (ve - 1 < -17 || ve - 1 > 15)) v = 0.0f;  // outside the exact window
            a_bf16[size_t(tr) * kA + i] = bf16_bits(v);
            a_f16[size_t(tr) * kA + i] = f16_bits(std::ldexp(v, -s));
            if (std::ldexp(__half2float(__ushort_as_half(a_f16[size_t(tr) * kA + i])), s) != v) {
                std::fprintf(stderr, "not exact in f16: %g 2^%d\n", v, -s);
                std::exit(1);
            }
        }
        for (int i = 0; i < kB; ++i) {
            uint8_t c;
            do c = uint8_t(code(rng));
            while ((c & 0x7F) == 0x7F);  // NaN
            const float v = e4m3_value(c);
            w[size_t(tr) * kB + i] = v;
            b_bf16[size_t(tr) * kB + i] = bf16_bits(v);
            b_f16[size_t(tr) * kB + i] = f16_bits(v);
        }
    }
    auto upload = [](const std::vector<uint16_t>& h) {
        uint16_t* p = nullptr;
        PROBE_CHECK(cudaMalloc(&p, h.size() * 2));
        PROBE_CHECK(cudaMemcpy(p, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
        return p;
    };
    uint16_t *dab = upload(a_bf16), *daf = upload(a_f16), *dbb = upload(b_bf16), *dbf = upload(b_f16);
    float *db = nullptr, *df = nullptr;
    PROBE_CHECK(cudaMalloc(&db, size_t(trials) * kD * 4));
    PROBE_CHECK(cudaMalloc(&df, size_t(trials) * kD * 4));
    probe_kernel<false><<<trials, 32>>>(dab, dbb, db);
    probe_kernel<true><<<trials, 32>>>(daf, dbf, df);
    PROBE_CHECK(cudaGetLastError());
    std::vector<float> hb(size_t(trials) * kD), hf(hb.size());
    PROBE_CHECK(cudaMemcpy(hb.data(), db, hb.size() * 4, cudaMemcpyDeviceToHost));
    PROBE_CHECK(cudaMemcpy(hf.data(), df, hf.size() * 4, cudaMemcpyDeviceToHost));
    for (void* p : {static_cast<void*>(dab), static_cast<void*>(daf), static_cast<void*>(dbb), static_cast<void*>(dbf),
                    static_cast<void*>(db), static_cast<void*>(df)})
        cudaFree(p);

    ClassResult r;
    for (int tr = 0; tr < trials; ++tr)
        for (int row = 0; row < 16; ++row)
            for (int n = 0; n < 8; ++n) {
                double exact = 0.0, magnitude = 0.0;
                for (int step = 0; step < kSteps; ++step)
                    for (int k = 0; k < 16; ++k) {
                        const double p = double(x[size_t(tr) * kA + (step * 16 + row) * 16 + k]) *
                                         double(w[size_t(tr) * kB + (step * 8 + n) * 16 + k]);
                        exact += p;
                        magnitude += std::fabs(p);
                    }
                const float from_bf16 = hb[size_t(tr) * kD + row * 8 + n];
                const float from_f16 = std::ldexp(hf[size_t(tr) * kD + row * 8 + n], scale_exponent[size_t(tr)]);
                ++r.outputs;
                r.differing += bits(from_bf16) != bits(from_f16);
                // Both within the tensor cores' f32 accumulation of 128 exact products (a loose 2^-18 of the
                // magnitude): a layout error would be far outside it.
                for (float got : {from_bf16, from_f16}) {
                    const double rel = magnitude > 0 ? std::fabs(double(got) - exact) / magnitude : 0.0;
                    r.worst_rel = std::fmax(r.worst_rel, rel);
                    r.off_exact += rel > std::ldexp(1.0, -18);
                }
            }
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    const int trials = argc > 1 ? std::atoi(argv[1]) : 4096;
    cudaDeviceProp prop{};
    PROBE_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s (sm_%d%d): %d trials a class, %d k16 steps a trial from a zero accumulator\n", prop.name,
                prop.major, prop.minor, trials, kSteps);
    std::mt19937 rng(20261207);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> unit(1.0f, 2.0f), binade(-17.0f, 16.0f);
    std::bernoulli_distribution coin(0.5);
    std::uniform_int_distribution<int> bottom(-17, -15);
    auto sign = [&](std::mt19937& g, float v) { return coin(g) ? -v : v; };
    struct Named {
        const char* name;
        ClassResult r;
    };
    const Named results[] = {
        {"normal(0, 1)", run_class(trials, rng, [&](std::mt19937& g) { return normal(g); })},
        {"spread over 33 binades",
         run_class(trials, rng,
                   [&](std::mt19937& g) { return sign(g, std::ldexp(unit(g), int(std::floor(binade(g))))); })},
        {"cancellation (+-1 + tiny)",
         run_class(trials, rng,
                   [&](std::mt19937& g) { return sign(g, 1.0f + std::ldexp(unit(g), -8 - int(unit(g) * 6))); })},
        {"window bottom (f16 subnormals)", run_class(trials, rng,
                                                     [&](std::mt19937& g) {
                                                         return coin(g) ? sign(g, 65280.0f)
                                                                        : sign(g, std::ldexp(unit(g), bottom(g)));
                                                     })},
    };
    bool ok = true;
    std::printf("%-32s %10s %10s %12s %10s\n", "activations", "outputs", "differ", "worst |d|/sum", "off exact");
    for (const Named& n : results) {
        std::printf("%-32s %10ld %10ld %12.3g %10ld\n", n.name, n.r.outputs, n.r.differing, n.r.worst_rel,
                    n.r.off_exact);
        ok = ok && n.r.off_exact == 0;
    }
    std::printf(ok ? "layout check passed (every output near its exact sum)\n"
                   : "LAYOUT CHECK FAILED: some output is far from its exact sum\n");
    return ok ? 0 : 1;
}
