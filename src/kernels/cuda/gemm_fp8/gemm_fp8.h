// y[M, N] bf16 = (A e4m3 [M, K] x pow2 f32 scale per 128 along K) (W e4m3 [N, K] x f32 scale per 128x128)^T with
// f32 accumulation: the official fp8_gemm of DeepSeek-V4 (spec §3, docs/numerics.md `model` linear). Three paths,
// chosen by the pure function fp8_gemm_config():
//   kMma      - tensor-core kernel for every row count (mma_gemm.cu): each 128-column K block is multiplied on the
//               tensor cores into a fresh f32 accumulator (exact e4m3 products), scaled by a_scale * w_scale and
//               added to the output's f32 sum, K blocks in ascending order. The K order and blocking are fixed, so
//               a row's bits do not depend on M, on the other rows of the launch or on the tile it lands in (batch
//               and chunk invariance). Contract: K % 16 == 0 (a partial last K block is zero-padded); any M, N.
//               No workspace.
//   kSkinny   - CUDA-core kernel for decode (M <= 16 rows per pass): each weight byte read once per pass with
//               16-byte loads, split-K for small N. Exact products, f32 sums: matches cpu::linear up to order.
//               Contract: K % 16 == 0; any N; any M (M > 16 re-reads W once per 16 rows).
//   kCublasLt - cuBLASLt FP8 tensor cores with VEC128_32F (A) and BLK128x128_32F (W) block scaling (promotion to
//               f32 every 128 K). Contract: M % 4 == 0, K % 128 == 0, N % 16 == 0, 16-byte aligned operands. Scales are
//               repacked into the workspace in cuBLASLt's order (A scales [K/128, round_up(M,4)] M-major, W scales
//               [ceil(N/128), round_up(K/128,4)]). Its summation depends on M (algorithm choice): not batch-invariant.
//               Its block sums are not exact: measured on an H200, each addend (the running sum included) is cut
//               towards zero to 13 fraction bits of the largest one, so products below 2^-13 of it vanish
//               (bound and probes in tests/gpu/gemm_fp8_test.cpp). Unused by the executor; kept for prefill
//               speed comparisons (bench/gemm_bench.cu).
//   kGeneric  - CUDA cores, one thread per output, the dequantized products summed in K order (cpu::linear's
//               operations and order on the quantized input). For shapes the others do not take (K % 16 != 0: small
//               models with odd widths); slow. Any M, N, K; no alignment; no workspace.
// Auto picks kMma; an explicit path that cannot run throws (fp8_gemm_path_for picks kMma or kGeneric by K).
// Tested in tests/gpu/gemm_fp8_test.cpp; timed in bench/gemm_bench.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cuda/gemm_bf16/cublaslt.h"

namespace dsv4::cuda {

enum class Fp8GemmPath { kAuto, kSkinny, kCublasLt, kMma, kGeneric };
const char* fp8_gemm_path_name(Fp8GemmPath path);
// The batch-invariant path for K: kMma where it runs (K % 16 == 0: V4 and the fixtures), else kGeneric.
constexpr Fp8GemmPath fp8_gemm_path_for(int64_t k) {
    return k % 16 == 0 ? Fp8GemmPath::kMma : Fp8GemmPath::kGeneric;
}

struct Fp8GemmParams {
    const uint8_t* a = nullptr;      // [m, k] e4m3, row stride k
    const float* a_scale = nullptr;  // [m, ceil(k/128)] f32, powers of two
    const uint8_t* w = nullptr;      // [n, k] e4m3, row stride k
    const float* w_scale = nullptr;  // [ceil(n/128), ceil(k/128)] f32
    __nv_bfloat16* y = nullptr;      // [m, n] bf16, row stride n
    int64_t m = 0, n = 0, k = 0;
    void* workspace = nullptr;  // >= fp8_gemm_workspace_bytes(config), 256-byte aligned
    size_t workspace_bytes = 0;
    Fp8GemmPath path = Fp8GemmPath::kAuto;
    // Optional device scalar: rows from *rows_live on (clamped to [0, m]) are written as +0, and a tile holding no
    // live row reads neither A nor W. A count decided on the device by an earlier kernel of the same stream (the
    // shared expert on one rank of an expert-parallel run: every other rank writes zeros that the exchange adds),
    // so no host synchronization. kMma's 16- and 64-row tiles only (fp8_gemm_can_implement says otherwise).
    const int32_t* rows_live = nullptr;
    // Optional (out != nullptr): the mHC post-mix of the product as its epilogue, with y as the sub-layer's output f:
    // out[t][k][d] = bf16(post_k y[t][d] + sum_j comb[j][k] streams[t][j][d]) (cuda::hc_post's arithmetic,
    // mhc/hc_post_math.cuh), so gemm_fp8 then hc_post in one launch where kMma's decode tiles store y (each element's
    // post-mix where it is stored: fp8_gemm_fuses_post_mix); elsewhere hc_post runs after the product. y is written.
    // mix [m, (2 + n_hc) n_hc] (comb normalized), streams and out [m, n_hc, n]; out must not alias streams.
    struct PostMix {
        const float* mix = nullptr;
        const __nv_bfloat16* streams = nullptr;
        __nv_bfloat16* out = nullptr;
        int n_hc = 0;
    } post_mix;
};

struct Fp8GemmConfig {
    Fp8GemmPath path = Fp8GemmPath::kSkinny;
    int m_tile = 1;           // kSkinny: tokens per pass (1, 2, 4, 8, 16)
    int splits = 1;           // kSkinny: K ranges, partial sums reduced in f32 in split order
    int64_t k_per_split = 0;  // kSkinny: multiple of 512
    int block_m = 0;  // kMma: rows per CTA: 16 (decode tiles, the warps share out the K blocks), 64, or 128 (wgmma)
    int block_n = 0;  // kMma: columns per CTA: 8, 16 or 32 (decode tiles) or 128 (with block_m 64 or 128)
};

// The tile heuristic (pure): `num_sms` of the device, `requested` path (kAuto lets the shape decide), `wgmma`: the
// device runs the warpgroup tile (sm_90; wgmma_gemm.cu), which then replaces the 64 x 128 tile where K % 128 == 0
// and it needs fewer waves (same bits).
Fp8GemmConfig fp8_gemm_config(int64_t m, int64_t n, int64_t k, int num_sms, Fp8GemmPath requested, bool wgmma = false);
// Workspace the run needs: skinny split partials, cuBLASLt scale repacks plus kCublasLtWorkspaceBytes, none for kMma.
size_t fp8_gemm_workspace_bytes(const Fp8GemmConfig& config, int64_t m, int64_t n, int64_t k);
inline constexpr size_t kCublasLtWorkspaceBytes = size_t(32) << 20;

// Empty when `config` can run `p`, else the reason.
std::string fp8_gemm_can_implement(const Fp8GemmParams& p, const Fp8GemmConfig& config);

// Whether fp8_gemm has `config`'s kernel apply Fp8GemmParams::post_mix where it stores y (kMma's 16-row decode tiles,
// n_hc 2 or 4: V4's 4); otherwise it runs hc_post after the product.
bool fp8_gemm_fuses_post_mix(const Fp8GemmConfig& config, int n_hc);

// Chooses the config for the current device, checks the contract and runs; throws dsv4::Error on a contract
// violation or when cuBLASLt offers no algorithm.
void fp8_gemm(const CublasLt& lt, const Fp8GemmParams& p, cudaStream_t stream);

}  // namespace dsv4::cuda
