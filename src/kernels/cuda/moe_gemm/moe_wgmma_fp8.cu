// moe_gemm's FP8 tensor-core path (MoeGemmPath::kMmaFp8; CudaOptions::fp8_expert_mma, `--expert-mma fp8`): MXFP4
// experts times e4m3 activations on Hopper's FP8 warpgroup MMA, every pass width (8, 16, 32 and 64 slots), so a
// slot's bits never depend on the launch. Per 32-column block (one E8M0 weight scale, the FP8 MMA's K) one wgmma
// m64nNk32 e4m3 from a zero accumulator, then the promotion sum = fma(acc, a_scale * w_scale, sum) in ascending K,
// the structure of the official FP4 linear (spec §3); the block's own sum is the FP8 MMA's (its narrower accumulation:
// not kMma's bits, docs/numerics.md "FP8 MMAs for the routed experts"). Output bf16(sum).
//
// Operands, with no conversion of either: W's e2m1 nibbles are placed in e4m3's bits (s e1 e0 m -> s 0 0 e1 e0 m 0 0,
// exactly the value times 2^-6; the weight scale carries the 2^6), decoded in registers into the wgmma's A fragments;
// the activations' e4m3 bytes are the B operand as cp.async lands them, each 16-byte chunk of a token's row placed
// straight into its core matrix. Physical column c of a block is k slot c: lane t's A words are its rows' nibbles of
// columns 4t..4t+3 and 16+4t..16+4t+3.
//
// Grid: persistent over items (matrix, active expert, 128-row tile), as moe_wgmma.cu; CTA: two warpgroups of 64 rows,
// the pass's tokens as N, K streaming through stages of 128 columns. kWhole (K % 128 == 0, every V4 shape): no
// bounds; otherwise the last stage's blocks past K are neither loaded nor multiplied (the same blocks, so the same
// bits). Two accumulators: block b's wgmma runs while block b - 1 is promoted. Tests: tests/gpu/moe_gemm_test.cpp
// (against cpu::linear within the FP8 accumulation's allowance, rows independent of the batch, whole against bounded
// stages bitwise, a pair launch against two).
#include "kernels/cuda/common/cp_async.cuh"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/common/wgmma_e4m3.cuh"
#include "kernels/cuda/moe_gemm/moe_gemm_kernels.h"
#include "kernels/cuda/moe_gemm/moe_mma_common.cuh"

namespace dsv4::cuda {
namespace {

using namespace moe_mma;

constexpr int kStageCols = 128;
[[maybe_unused]] constexpr int kBlocks = kStageCols / 32;  // 32-column blocks a stage (unused where compiled out)
constexpr int kRows = 128, kThreads = 256;                 // two warpgroups of 64 weight rows
constexpr int kWRowBytes = kStageCols / 2 + 16;  // 64 bytes of nibbles + pad: the rows g of a warp on distinct banks
constexpr int kScaleRowBytes = 8;                // the two aligned words that hold a row's 4 scale bytes of a stage
constexpr int kChunkBytes = 16;                  // a core matrix row: 16 e4m3 of one token

// Stages in flight: 4 for the wide passes (their accumulators take one CTA per SM), 6 for the decode passes.
template <int kTokens>
constexpr int kStages = kTokens >= 32 ? 4 : 6;
template <int kTokens>
constexpr int kMinBlocks = kTokens >= 32 ? 1 : 2;

// One stage: W rows, the activations as core matrices (chunk c of token r at a + c * kTokens * 16 + r * 16: the eight
// 16-column chunks of the stage, each the kTokens rows of one K-major column of core matrices), the scales.
template <int kTokens>
struct Stage {
    static constexpr int w = 0;
    static constexpr int a = w + kRows * kWRowBytes;
    static constexpr int a_chunk = kTokens * kChunkBytes;  // bytes between a token's adjacent chunks
    static constexpr int w_scale = a + kStageCols / kChunkBytes * a_chunk;
    static constexpr int a_scale = w_scale + kRows * kScaleRowBytes;
    static constexpr int bytes = (a_scale + kTokens * 4 + 15) / 16 * 16;
    static_assert(a % 16 == 0, "core matrices are 16-byte aligned");
};

template <int kTokens>
__host__ __device__ constexpr int smem_bytes(int64_t experts) {
    return list_bytes(experts) + kStages<kTokens> * Stage<kTokens>::bytes;
}

// The four e2m1 of `q`'s low nibbles (byte k: its even column) and of its high nibbles (its odd column) as e4m3
// bytes, each the value times 2^-6: s e1 e0 m -> s 0 0 e1 e0 m 0 0 (e2m1's subnormal 0.5 becomes e4m3's 2^-7).
__device__ __forceinline__ uint32_t e2m1_low_nibbles_as_e4m3(uint32_t q) {
    return ((q & 0x07070707u) << 2) | ((q & 0x08080808u) << 4);
}
__device__ __forceinline__ uint32_t e2m1_high_nibbles_as_e4m3(uint32_t q) {
    return ((q & 0x70707070u) >> 2) | (q & 0x80808080u);
}

// Lane t's A words of one row and block: columns 4t..4t+3 (lo) and 16+4t..16+4t+3 (hi) as e4m3, from the row's 16
// staged bytes of the block (two nibbles a byte, the even column low).
[[maybe_unused]] __device__ __forceinline__ void row_fragments(const uint8_t* block, int t, uint32_t& lo,
                                                               uint32_t& hi) {
    const uint32_t q = prmt(*reinterpret_cast<const uint16_t*>(block + 2 * t),
                            *reinterpret_cast<const uint16_t*>(block + 8 + 2 * t), 0x5410);
    const uint32_t even = e2m1_low_nibbles_as_e4m3(q), odd = e2m1_high_nibbles_as_e4m3(q);
    lo = prmt(even, odd, 0x5140);  // columns 4t, 4t + 1, 4t + 2, 4t + 3
    hi = prmt(even, odd, 0x7362);  // 16 + the same
}

// E8M0 code e as 2^(e - 127) * 2^6 = 2^(e - 121), the weight scale of the e4m3-placed nibbles: the normal f32 with
// exponent field e + 6 up to e = 248; beyond, +inf (what the product overflows to), and 255 is NaN.
[[maybe_unused]] __device__ __forceinline__ float e8m0_times_2_6(uint32_t e) {
    return e <= 248u   ? __uint_as_float((e + 6u) << 23)
           : e == 255u ? __uint_as_float(0x7FC00000u)
                       : __int_as_float(0x7F800000);
}

template <int kTokens, bool kWhole>
__global__ void __launch_bounds__(kThreads, kMinBlocks<kTokens>) moe_wgmma_fp8_kernel(Args p) {
#if DSV4_WGMMA
    constexpr int kTn = kTokens / 8;  // n8 tiles of the pass
    constexpr int kStageCount = kStages<kTokens>;
    using L = Stage<kTokens>;
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ int warp_counts[kThreads / 32];
    int* active = reinterpret_cast<int*>(smem);
    uint8_t* stages = smem + list_bytes(p.experts);
    const unsigned stages_addr = smem_addr(stages);

    const int64_t total = p.offsets[p.experts];
    const int64_t n_tiles = (p.n + kRows - 1) / kRows;
    if (int64_t(blockIdx.x) >= (total < p.experts ? total : p.experts) * n_tiles * p.mat_count) return;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
    const int count = list_active_experts<kThreads>(p.offsets, p.experts, active, warp_counts);

    const int64_t k_half = p.k / 2, scale_cols = p.k / 32, kb = (p.k + kStageCols - 1) / kStageCols;
    const int kt_count = int(kb);
    const int64_t items = int64_t(count) * n_tiles * p.mat_count;
    const int row_g = 16 * warp + g;  // warp w of warpgroup w / 4 holds A rows 16w..16w+15 of the CTA's 128
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const int64_t e = active[item / (n_tiles * p.mat_count)];
        const int mat_i = int(item / n_tiles % p.mat_count);
        const Matrix m = mat_i ? p.mats[1] : p.mats[0];
        const int64_t n0 = item % n_tiles * kRows;
        const int64_t begin = p.offsets[e], end = p.offsets[e + 1];
        auto row_of = [&](int r) {  // weight row of tile row r (rows past N repeat the last; never stored)
            const int64_t n = n0 + r;
            return e * p.n + (n < p.n ? n : p.n - 1);
        };
        // Loader roles: thread tid copies 16 bytes of W rows tid / 4 and kRows / 2 + tid / 4, and for tid < kRows
        // the two aligned words that hold row tid's 4 scale bytes of the stage (one word where they are whole).
        const int w_part = tid % 4;
        const uint8_t* w_src0 = m.w + row_of(tid / 4) * k_half + w_part * 16;
        const uint8_t* w_src1 = m.w + row_of(kRows / 2 + tid / 4) * k_half + w_part * 16;
        const unsigned w_dst0 = L::w + tid / 4 * kWRowBytes + w_part * 16, w_dst1 = w_dst0 + kRows / 2 * kWRowBytes;
        const int64_t scale_total = p.experts * p.n * scale_cols;
        const int64_t scale_first = tid < kRows ? row_of(tid) * scale_cols : 0;
        // Byte offset of rows g and g + 8 within their staged scale words (the same every stage: it advances by 4).
        auto lead = [&](int r) { return kWhole ? 0 : int((row_of(r) * scale_cols) & 3); };
        const int lead_g = lead(row_g), lead_g8 = lead(row_g + 8);

        for (int64_t s0 = begin; s0 < end; s0 += kTokens) {
            const int tokens = end - s0 < kTokens ? int(end - s0) : kTokens;
            auto act_row = [&](int r) -> int64_t {
                const int64_t slot = s0 + (r < tokens ? r : tokens - 1);
                return p.row_index ? p.row_index[slot] : slot;
            };
            // The pass's own rows are staged; the rest of the width (never stored) reads whatever its chunks hold.
            constexpr int kAChunks = kTokens * 8, kAPerThread = (kAChunks + kThreads - 1) / kThreads;
            const uint8_t* a_src[kAPerThread];
            unsigned a_dst[kAPerThread];
            int a_part[kAPerThread];
#pragma unroll
            for (int i = 0; i < kAPerThread; ++i) {
                const int c = tid + kThreads * i, r = c / 8;
                a_part[i] = c % 8;
                a_src[i] = c < tokens * 8 ? p.a + act_row(r) * p.k + a_part[i] * kChunkBytes : nullptr;
                a_dst[i] = L::a + a_part[i] * L::a_chunk + r * kChunkBytes;
            }
            const float* as_src = tid < kTokens ? p.a_scale + act_row(tid) * kb : nullptr;

            auto load = [&](int slot, int kt) {
                const unsigned base = stages_addr + slot * L::bytes;
                const int64_t w_at = int64_t(kt) * (kStageCols / 2);
                if (kWhole || w_at + w_part * 16 < k_half) {
                    cp_async16(base + w_dst0, w_src0 + w_at);
                    cp_async16(base + w_dst1, w_src1 + w_at);
                }
#pragma unroll
                for (int i = 0; i < kAPerThread; ++i)
                    if (a_src[i] && (kWhole || int64_t(kt) * kStageCols + a_part[i] * kChunkBytes < p.k))
                        cp_async16(base + a_dst[i], a_src[i] + int64_t(kt) * kStageCols);
                if (tid < kRows) {
                    const int64_t first = scale_first + int64_t(kt) * 4;
                    if constexpr (kWhole) {
                        cp_async4(base + L::w_scale + tid * kScaleRowBytes, m.w_scale + first, 4);
                    } else {
                        const int64_t word0 = first & ~int64_t(3);
#pragma unroll
                        for (int j = 0; j < 2; ++j) {
                            const int64_t at = word0 + 4 * j, left = scale_total - at;
                            const int bytes = left >= 4 ? 4 : left > 0 ? int(left) : 0;
                            cp_async4(base + L::w_scale + tid * kScaleRowBytes + 4 * j,
                                      bytes ? m.w_scale + at : m.w_scale, bytes);
                        }
                    }
                }
                if (as_src) cp_async4(base + L::a_scale + tid * 4, as_src + kt, 4);
            };

            float sum[kTn][4];
#pragma unroll
            for (int j = 0; j < kTn; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i) sum[j][i] = 0.0f;

#pragma unroll
            for (int s = 0; s < kStageCount - 1; ++s) {
                if (s < kt_count) load(s, s);
                cp_async_commit();
            }
            for (int kt = 0; kt < kt_count; ++kt) {
                // Stage kt landed for this thread (made visible to the wgmma's async proxy), then for every thread;
                // every warpgroup is past stage kt - 1's wgmmas, so its slot takes stage kt + kStages - 1.
                cp_async_wait<kStageCount - 2>();
                fence_proxy_async_shared();
                __syncthreads();
                if (kt + kStageCount - 1 < kt_count) load((kt + kStageCount - 1) % kStageCount, kt + kStageCount - 1);
                cp_async_commit();

                const int slot = kt % kStageCount;
                const uint8_t* st = stages + slot * L::bytes;
                const int64_t left = (p.k - int64_t(kt) * kStageCols) / 32;  // blocks of K from this stage on
                const int blocks = kWhole || left >= kBlocks ? kBlocks : int(left);
                const uint8_t* w_g = st + L::w + row_g * kWRowBytes;
                const uint8_t* w_g8 = w_g + 8 * kWRowBytes;
                const uint8_t* sc_g = st + L::w_scale + row_g * kScaleRowBytes + lead_g;
                const uint8_t* sc_g8 = st + L::w_scale + (row_g + 8) * kScaleRowBytes + lead_g8;
                const uint64_t a_desc = wgmma_desc(stages_addr + slot * L::bytes + L::a, L::a_chunk, 128);
                float as[kTn][2];
#pragma unroll
                for (int j = 0; j < kTn; ++j) {
                    const float* a_s = reinterpret_cast<const float*>(st + L::a_scale) + j * 8 + 2 * t;
                    as[j][0] = a_s[0];
                    as[j][1] = a_s[1];
                }
                float acc[2][kTokens / 2];
                float ws[2][2];  // [block parity][row g, g + 8]
                auto promote_block = [&](int b) {
                    wgmma_fence_operand(acc[b % 2]);
#pragma unroll
                    for (int j = 0; j < kTn; ++j) {
                        float(&a4)[4] = *reinterpret_cast<float(*)[4]>(acc[b % 2] + 4 * j);
                        promote(sum[j], a4, ws[b % 2][0], ws[b % 2][1], as[j][0], as[j][1]);
                    }
                };
#pragma unroll
                for (int b = 0; b < kBlocks; ++b) {
                    if (!kWhole && b >= blocks) break;
                    uint32_t a[4];
                    row_fragments(w_g + 16 * b, t, a[0], a[2]);
                    row_fragments(w_g8 + 16 * b, t, a[1], a[3]);
                    ws[b % 2][0] = e8m0_times_2_6(sc_g[b]);
                    ws[b % 2][1] = e8m0_times_2_6(sc_g8[b]);
                    // Block b's two chunks: K-major core matrices, the chunks L::a_chunk apart, 8-token groups 128.
                    const uint64_t b_desc = a_desc + ((2 * b * L::a_chunk) >> 4);
                    wgmma_fence_operand(acc[b % 2]);
                    wgmma_fence();
                    wgmma_m64k32_e4m3<kTokens>(acc[b % 2], a, b_desc, false);
                    wgmma_commit();
                    if (b > 0) {
                        wgmma_wait<1>();
                        promote_block(b - 1);
                    }
                }
                wgmma_wait<0>();
                promote_block((kWhole ? kBlocks : blocks) - 1);
            }
            cp_async_wait<0>();
            __syncthreads();  // the next pass's prologue refills the stages

#pragma unroll
            for (int j = 0; j < kTn; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int token = 8 * j + 2 * t + (i & 1);
                    const int64_t n = n0 + row_g + (i >= 2 ? 8 : 0);
                    if (token < tokens && n < p.n) m.y[(s0 + token) * p.n + n] = __float2bfloat16_rn(sum[j][i]);
                }
        }
    }
#else
    __trap();
#endif
}

template <int kTokens, bool kWhole>
cudaError_t launch(const Args& args, cudaStream_t stream) {
    const auto kernel = moe_wgmma_fp8_kernel<kTokens, kWhole>;
    const int smem = smem_bytes<kTokens>(args.experts);
    const int64_t n_tiles = (args.n + kRows - 1) / kRows;
    const int64_t items = args.experts * n_tiles * args.mat_count,
                  resident = resident_ctas(reinterpret_cast<const void*>(kernel), kThreads, smem);
    const int64_t grid = items < resident ? items : resident;
    kernel<<<unsigned(grid), kThreads, smem, stream>>>(args);
    return cudaGetLastError();
}

template <bool kWhole>
cudaError_t launch(const Args& args, int tokens, cudaStream_t stream) {
    switch (tokens) {
        case 8:
            return launch<8, kWhole>(args, stream);
        case 16:
            return launch<16, kWhole>(args, stream);
        case 32:
            return launch<32, kWhole>(args, stream);
        case 64:
            return launch<64, kWhole>(args, stream);
        default:
            return cudaErrorInvalidValue;
    }
}

}  // namespace

namespace detail {
cudaError_t launch_moe_wgmma_fp8(const moe_mma::Args& args, int tokens, bool whole_stages, cudaStream_t stream) {
    if (whole_stages && args.k % kStageCols != 0) return cudaErrorInvalidValue;
    return whole_stages ? launch<true>(args, tokens, stream) : launch<false>(args, tokens, stream);
}
}  // namespace detail

}  // namespace dsv4::cuda
