// What the two tensor-core kernels of moe_gemm share (moe_mma.cu: warp MMAs, any pass width; moe_wgmma.cu: warpgroup
// MMAs for the passes of prefill): the launch arguments, the list of active experts, the e2m1 and e4m3 operand
// decoders and the per-block promotion. Both kernels feed the same values to the same MMA slots and promote them with
// these functions, which is what makes their outputs equal bit for bit (moe_mma.cu's header has the arithmetic).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/e4m3_pairs.cuh"
#include "kernels/cuda/gemm_fp8/skinny_operands.cuh"
#include "kernels/cuda/moe_gemm/moe_gemm.h"
#include "kernels/cuda/moe_gemm/scale_fold.h"

namespace dsv4::cuda::moe_mma {

constexpr float kTwoTo14 = 16384.0f;
constexpr unsigned kFull = 0xFFFFFFFFu;

// One matrix of a launch: W_e = w + e * n * k/2, its scales, its outputs.
struct Matrix {
    const uint8_t* w;
    const uint8_t* w_scale;
    const float* w_global;
    __nv_bfloat16* y;
};

struct Args {
    const uint8_t* a;
    const float* a_scale;
    const int32_t* row_index;
    const int32_t* offsets;
    Matrix mats[2];
    int mat_count;
    int64_t experts, n, k;
    MoeGemmSwiglu swiglu;  // gate != nullptr: the activations are computed from W1 x and W3 x (moe_mma.cu only)
    bool fold_scales;      // MoeGemmParams::fold_scales (moe_wgmma_specialized.cu)
};

// Bytes of shared memory the list of active experts takes (16-byte aligned, so what follows stays aligned).
__host__ __device__ constexpr int list_bytes(int64_t experts) {
    return int((experts * 4 + 15) / 16 * 16);
}

// Writes the non-empty experts (offsets[e + 1] > offsets[e]) to `active` in ascending order and returns their count;
// every thread of the CTA calls it. `warp_counts`: kThreads / 32 ints of shared memory.
template <int kThreads>
__device__ int list_active_experts(const int32_t* offsets, int64_t experts, int* active, int* warp_counts) {
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    int count = 0;
    for (int64_t base = 0; base < experts; base += kThreads) {
        const int64_t e = base + tid;
        const bool live = e < experts && offsets[e + 1] > offsets[e];
        const unsigned ballot = __ballot_sync(kFull, live);
        if (lane == 0) warp_counts[warp] = __popc(ballot);
        __syncthreads();
        int before = count;
        for (int w = 0; w < kThreads / 32; ++w) {
            if (w == warp) before = count;
            count += warp_counts[w];
        }
        if (live) active[before + __popc(ballot & ((1u << lane) - 1u))] = int(e);
        __syncthreads();
    }
    return count;
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
    return r;
}

// Nibbles i and i + 4 of `q` as an f16 pair (low half = nibble i), each the e2m1 value times 2^-14, exactly.
__device__ __forceinline__ uint32_t e2m1_pair_scaled(uint32_t q, int i) {
    const uint32_t t = q >> (4 * i);
    return ((t << 9) & 0x0E000E00u) | ((t << 12) & 0x80008000u);
}

// The W fragments of one 32-column block for the two MMAs of its k16 halves (rows g and g + 8 of a 16-row group;
// w0 feeds the first MMA, w1 the second), from the staged nibbles of those rows (moe_mma.cu's header: which physical
// columns meet which k).
template <bool kNv>
__device__ __forceinline__ void w_words(const uint8_t* w_g, const uint8_t* w_g8, int b, int t, uint32_t& qa,
                                        uint32_t& qb) {
    if constexpr (kNv) {
        qa = prmt(*reinterpret_cast<const uint16_t*>(w_g + 16 * b + 2 * t),
                  *reinterpret_cast<const uint16_t*>(w_g + 16 * b + 8 + 2 * t), 0x5140);
        qb = prmt(*reinterpret_cast<const uint16_t*>(w_g8 + 16 * b + 2 * t),
                  *reinterpret_cast<const uint16_t*>(w_g8 + 16 * b + 8 + 2 * t), 0x5140);
    } else {
        qa = *reinterpret_cast<const uint32_t*>(w_g + 16 * b + 4 * t);
        qb = *reinterpret_cast<const uint32_t*>(w_g8 + 16 * b + 4 * t);
    }
}
// The high bytes of e2m1_pair_scaled's f16 values (s << 7 | e1 e0 m << 1; the low bytes are 0) of the even nibbles
// of `q` (byte k: nibble 2k) and of the odd ones (byte k: nibble 2k + 1).
__device__ __forceinline__ uint32_t e2m1_high_bytes_even(uint32_t q) {
    return ((q & 0x07070707u) << 1) | ((q << 4) & 0x80808080u);
}
__device__ __forceinline__ uint32_t e2m1_high_bytes_odd(uint32_t q) {
    return ((q & 0x70707070u) >> 3) | (q & 0x80808080u);
}

// The fragments from the words w_words loaded (split so a kernel can load a block's words ahead of its decode):
// fragment i of a word is e2m1_pair_scaled(word, i), built as a byte permute of its nibbles' high bytes (two words of
// them per word: even and odd nibbles), ~11 instructions a word where the shifts and masks of e2m1_pair_scaled took
// ~12-16 after the compiler's folding (docs/perf.md, "The e2m1 decode from byte permutes"). The same values for every
// 32-bit word (tests/gpu/e2m1_decode_test.cu).
__device__ __forceinline__ void w_decode(uint32_t qa, uint32_t qb, uint32_t (&w0)[4], uint32_t (&w1)[4]) {
    constexpr uint32_t kLowPair = 0x2404u, kHighPair = 0x3414u;  // [0, byte 0, 0, byte 2] / [0, byte 1, 0, byte 3]
    const uint32_t ea = e2m1_high_bytes_even(qa), oa = e2m1_high_bytes_odd(qa);
    const uint32_t eb = e2m1_high_bytes_even(qb), ob = e2m1_high_bytes_odd(qb);
    w0[0] = prmt(ea, 0u, kLowPair), w0[1] = prmt(eb, 0u, kLowPair);    // nibbles 0 and 4
    w0[2] = prmt(oa, 0u, kLowPair), w0[3] = prmt(ob, 0u, kLowPair);    // 1 and 5
    w1[0] = prmt(ea, 0u, kHighPair), w1[1] = prmt(eb, 0u, kHighPair);  // 2 and 6
    w1[2] = prmt(oa, 0u, kHighPair), w1[3] = prmt(ob, 0u, kHighPair);  // 3 and 7
}
template <bool kNv>
__device__ __forceinline__ void w_fragments(const uint8_t* w_g, const uint8_t* w_g8, int b, int t, uint32_t (&w0)[4],
                                            uint32_t (&w1)[4]) {
    uint32_t qa, qb;
    w_words<kNv>(w_g, w_g8, b, t, qa, qb);
    w_decode(qa, qb, w0, w1);
}

// The activation bytes of one token's 32-column block that the two MMAs take, as e4m3 pairs: x0 for the first MMA,
// x1 for the second; the low 16 bits of each feed b0 (k 2t, 2t + 1), the high 16 bits b1 (k 2t + 8, 2t + 9).
// x_pair_words loads the two words they come from, x_pairs_of permutes them: apart, a load can run well ahead of its
// use (the warpgroup kernel loads a unit ahead; a permute right after its load waited for it).
template <bool kNv>
__device__ __forceinline__ uint2 x_pair_words(const uint8_t* x, int t) {
    if constexpr (kNv)
        return make_uint2(*reinterpret_cast<const uint32_t*>(x + 4 * t),
                          *reinterpret_cast<const uint32_t*>(x + 16 + 4 * t));
    else
        return *reinterpret_cast<const uint2*>(x + 8 * t);
}
template <bool kNv>
__device__ __forceinline__ void x_pairs_of(uint2 u, uint32_t& x0, uint32_t& x1) {
    if constexpr (kNv) {
        x0 = prmt(u.x, u.x, 0x3120);
        x1 = prmt(u.y, u.y, 0x3120);
    } else {
        x0 = prmt(u.x, u.y, 0x5140);
        x1 = prmt(u.x, u.y, 0x7362);
    }
}
template <bool kNv>
__device__ __forceinline__ void x_pairs(const uint8_t* x, int t, uint32_t& x0, uint32_t& x1) {
    x_pairs_of<kNv>(x_pair_words<kNv>(x, t), x0, x1);
}

// x_pairs' pairs as the f16 operands: x, y the first MMA's b0, b1; z, w the second's (held rows store them so).
template <bool kNv>
__device__ __forceinline__ uint4 x_f16_pairs(const uint8_t* x, int t) {
    uint32_t x0, x1;
    x_pairs<kNv>(x, t, x0, x1);
    uint4 f;
    f16x2_pairs(x0, f.x, f.y);
    f16x2_pairs(x1, f.z, f.w);
    return f;
}

// sum = fma(acc, a_s * w_s, sum) for the four outputs of a lane (w_s already carries the 2^14); kEvenOnly: the even
// tokens' outputs (0 and 2) only, the odd ones left as they are.
template <bool kEvenOnly = false>
__device__ __forceinline__ void promote(float (&sum)[4], const float (&acc)[4], float ws_g, float ws_g8, float as0,
                                        float as1) {
    sum[0] = __fmaf_rn(acc[0], __fmul_rn(as0, ws_g), sum[0]);
    if constexpr (!kEvenOnly) sum[1] = __fmaf_rn(acc[1], __fmul_rn(as1, ws_g), sum[1]);
    sum[2] = __fmaf_rn(acc[2], __fmul_rn(as0, ws_g8), sum[2]);
    if constexpr (!kEvenOnly) sum[3] = __fmaf_rn(acc[3], __fmul_rn(as1, ws_g8), sum[3]);
}

// promote for weights with their scales folded in (mxfp4_fold_factors): sum = fma(acc, a_s, sum).
__device__ __forceinline__ void promote_folded(float (&sum)[4], const float (&acc)[4], float as0, float as1) {
    sum[0] = __fmaf_rn(acc[0], as0, sum[0]);
    sum[1] = __fmaf_rn(acc[1], as1, sum[1]);
    sum[2] = __fmaf_rn(acc[2], as0, sum[2]);
    sum[3] = __fmaf_rn(acc[3], as1, sum[3]);
}

// E8M0 code e as 2^(e - 127) * 2^14 = 2^(e - 113): the normal f32 with exponent field e + 14 up to e = 240; beyond,
// the product overflows to +inf, and 255 is NaN (what e8m0_to_float(e) * 2^14 gives, in one or two instructions).
__device__ __forceinline__ float e8m0_times_2_14(uint32_t e) {
    return e <= 240u   ? __uint_as_float((e + 14u) << 23)
           : e == 255u ? __uint_as_float(0x7FC00000u)
                       : __int_as_float(0x7F800000);
}

// Whether a word of four E8M0 codes has one above 240 (whose e8m0_times_2_14 is not the plain shift): with the high
// bit set and the low seven bits at least 0x71. The sum stays inside its byte (at most 0x7F + 0x0F).
__device__ __forceinline__ bool e8m0_codes_above_240(uint32_t codes) {
    return (((codes & 0x7F7F7F7Fu) + 0x0F0F0F0Fu) & codes & 0x80808080u) != 0u;
}

// The four codes of a word of E8M0 codes, each times 2^14 (e8m0_times_2_14): where none is above 240 (none of a real
// checkpoint's) each is the code moved into the exponent field, a byte extract and a shifted add, where the general
// form took ~7 instructions a code.
__device__ __forceinline__ float4 e8m0_word_times_2_14(uint32_t codes) {
    auto code = [&](int b) { return (codes >> (8 * b)) & 0xFFu; };
    if (!e8m0_codes_above_240(codes))
        return make_float4(__uint_as_float((code(0) + 14u) << 23), __uint_as_float((code(1) + 14u) << 23),
                           __uint_as_float((code(2) + 14u) << 23), __uint_as_float((code(3) + 14u) << 23));
    return make_float4(e8m0_times_2_14(code(0)), e8m0_times_2_14(code(1)), e8m0_times_2_14(code(2)),
                       e8m0_times_2_14(code(3)));
}

// The MXFP4 scales of four consecutive 32-column blocks (one word of codes a row) for rows g and g + 8, times 2^14
// (w_scales' values): where no code of the two words is above 240 (none of a real checkpoint's) each value is its
// code shifted into the exponent field, two instructions where e8m0_times_2_14 took a byte load and five (a third of
// a batched decode pass's instructions went to the scales). The OR of the rows' words has a code above 240 wherever
// either has one, so the check is never wrong in the plain direction.
__device__ __forceinline__ void mxfp4_block_scales(const uint8_t* sc_g, const uint8_t* sc_g8, float (&ws)[4][2]) {
    auto code = [](uint32_t codes, int b) { return (codes >> (8 * b)) & 0xFFu; };
    const uint32_t codes_g = *reinterpret_cast<const uint32_t*>(sc_g);
    const uint32_t codes_g8 = *reinterpret_cast<const uint32_t*>(sc_g8);
    if (!e8m0_codes_above_240(codes_g | codes_g8)) {
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            ws[b][0] = __uint_as_float((code(codes_g, b) + 14u) << 23);
            ws[b][1] = __uint_as_float((code(codes_g8, b) + 14u) << 23);
        }
    } else {
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            ws[b][0] = e8m0_times_2_14(code(codes_g, b));
            ws[b][1] = e8m0_times_2_14(code(codes_g8, b));
        }
    }
}

// Block scales folded into the decoded weights (moe_wgmma.cu's wide passes, where the promotions' FMULs were a fifth
// of the instructions): a weight w_dec = e2m1 x 2^-14 times the f16 factor 2^k of its scale gives the tensor cores'
// sum times 2^k, so fma(acc', a_scale, sum) is promote's fma(acc, a_scale x 2^k, sum) bit for bit, for the factors of
// scale_fold.h's rule (why not for all: its header; tests/gpu/moe_gemm_test.cpp compares the two kernels, and
// tests/gpu/tensor_core_sum_test.cu the tensor cores' sums). MXFP4: code e, factor 2^(e - 113); real checkpoints'
// codes are ~110-130.
__device__ __forceinline__ bool e8m0_codes_foldable(uint32_t codes) {
    return (__vcmpgeu4(codes, kFoldLowestE8m0 * 0x01010101u) & __vcmpleu4(codes, kFoldHighestE8m0 * 0x01010101u)) ==
           0xFFFFFFFFu;
}
// Code e's factor 2^(e - 113) as an f16 pair (exponent field e - 98).
__device__ __forceinline__ uint32_t e8m0_fold_factor(uint32_t e) {
    return (e - 98u) * 0x04000400u;
}
// NVFP4 where its scales are powers of two (scale_fold.h): the factor's f16 exponent field is the code's exponent
// field E plus nvfp4_fold_bias(global), or nothing folds where that is -1.
__device__ __forceinline__ int nvfp4_fold_bias(float global) {
    return nvfp4_fold_bias_of_bits(__float_as_uint(global));
}
// Whether four e4m3 codes are powers of two whose factors fold under `bias` (>= 0): sign and mantissa 0, exponent
// field E in [nvfp4_fold_lowest_field(bias), nvfp4_fold_highest_field(bias)] (scale_fold.h's e4m3_code_foldable).
__device__ __forceinline__ bool e4m3_codes_foldable(uint32_t codes, int bias) {
    const int lo = nvfp4_fold_lowest_field(bias), hi = nvfp4_fold_highest_field(bias);
    if (lo > hi) return false;
    const uint32_t e = (codes >> 3) & 0x0F0F0F0Fu;
    return (codes & 0x87878787u) == 0 &&
           (__vcmpgeu4(e, uint32_t(lo) * 0x01010101u) & __vcmpleu4(e, uint32_t(hi) * 0x01010101u)) == 0xFFFFFFFFu;
}
// Code c's factor 2^(E + G + 7) as an f16 pair (exponent field E + bias).
__device__ __forceinline__ uint32_t e4m3_fold_factor(uint32_t c, int bias) {
    return ((c >> 3) + uint32_t(bias)) * 0x04000400u;
}
__device__ __forceinline__ uint32_t mul_f16x2(uint32_t a, uint32_t b) {
    uint32_t r;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
// The fold factors of four consecutive blocks (one word of codes a row) for rows g and g + 8.
__device__ __forceinline__ void mxfp4_fold_factors(const uint8_t* sc_g, const uint8_t* sc_g8, uint32_t (&f)[4][2]) {
    const uint32_t codes_g = *reinterpret_cast<const uint32_t*>(sc_g);
    const uint32_t codes_g8 = *reinterpret_cast<const uint32_t*>(sc_g8);
#pragma unroll
    for (int b = 0; b < 4; ++b) {
        f[b][0] = e8m0_fold_factor((codes_g >> (8 * b)) & 0xFFu);
        f[b][1] = e8m0_fold_factor((codes_g8 >> (8 * b)) & 0xFFu);
    }
}

// The weight scales of a 32-column block b for rows g and g + 8, times 2^14: per MMA (NVFP4: e4m3 scale x global
// per 16 columns) or the block's one E8M0 scale for both MMAs (MXFP4). sc_g, sc_g8: the rows' staged scale bytes.
template <bool kNv>
__device__ __forceinline__ void w_scales(const uint8_t* sc_g, const uint8_t* sc_g8, int b, float global,
                                         float (&ws_g)[2], float (&ws_g8)[2]) {
    if constexpr (kNv) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            ws_g[h] = __fmul_rn(__fmul_rn(skinny::e4m3_to_float(sc_g[2 * b + h]), global), kTwoTo14);
            ws_g8[h] = __fmul_rn(__fmul_rn(skinny::e4m3_to_float(sc_g8[2 * b + h]), global), kTwoTo14);
        }
    } else {
        ws_g[0] = ws_g[1] = e8m0_times_2_14(sc_g[b]);
        ws_g8[0] = ws_g8[1] = e8m0_times_2_14(sc_g8[b]);
    }
}

}  // namespace dsv4::cuda::moe_mma

namespace dsv4::cuda::detail {
// The warpgroup kernel (moe_wgmma.cu; sm_90a, K % 128 == 0, passes of 8, 16, 32 or 64 slots).
cudaError_t launch_moe_wgmma(const moe_mma::Args& args, ExpertFormat format, int tokens, cudaStream_t stream);
// Its wide passes on three warpgroups (moe_wgmma_specialized.cu; tokens 32 or 64, K % 512 == 0), which
// launch_moe_wgmma takes for them.
cudaError_t launch_moe_wgmma_specialized(const moe_mma::Args& args, ExpertFormat format, int tokens,
                                         cudaStream_t stream);
}  // namespace dsv4::cuda::detail
