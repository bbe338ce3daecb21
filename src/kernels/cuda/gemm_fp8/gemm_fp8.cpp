// gemm_fp8 launcher: tile heuristics, contract checks and the cuBLASLt block-scaled FP8 call (see gemm_fp8.h).
// cuBLASLt is column-major: row-major y[M,N] = A W^T is D[N,M] = op_T(W stored [K,N]) * (A stored [K,M]), the TN
// form FP8 requires; cuBLASLt's "A" is our weight (128x128 scales) and its "B" our activations (1x128 scales).
#include "kernels/cuda/gemm_fp8/gemm_fp8.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/int_math.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/gemm_fp8/gemm_fp8_kernels.h"
#include "kernels/cuda/mhc/mhc.h"

namespace dsv4::cuda {
namespace {

constexpr int64_t kSkinnySuper = 512;         // K columns one warp covers per pass (32 lanes x 16)
constexpr int64_t kSkinnySmemFloats = 16384;  // 64 KiB of staged f32 activations per block
constexpr int64_t kSkinnyRowsPerBlock = 32;
constexpr int kSkinnyMaxTile = 16;
// kMma decode tiles (16 rows, K blocks shared out over the CTA's warps) stage at most this much shared memory (two
// CTAs per SM).
constexpr size_t kMmaMaxSmem = size_t(96) << 10;

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// cuBLASLt 13.1 on H200 offers no block-scaled FP8 algorithm for M % 4 != 0 (measured: M = 3, 17, 18 refused;
// 16, 20, 24, 200 accepted), matching its 1x128 scale tensor being padded to 4 rows.
bool cublaslt_shape_ok(int64_t m, int64_t n, int64_t k) { return m % 4 == 0 && k % 128 == 0 && n % 16 == 0; }

}  // namespace

const char* fp8_gemm_path_name(Fp8GemmPath path) {
    switch (path) {
        case Fp8GemmPath::kAuto: return "auto";
        case Fp8GemmPath::kSkinny: return "skinny";
        case Fp8GemmPath::kCublasLt: return "cublaslt";
        case Fp8GemmPath::kMma: return "mma";
        case Fp8GemmPath::kGeneric:
            return "generic";
    }
    return "?";
}

// Skinny tiling: the token tile is the smallest power of two covering min(M, 16). The K ranges are chosen without
// looking at M, because they fix the f32 summation order of every output (per-lane chains within a range, then the
// ranges in order): a row gets the same bits whether it runs alone in a decode step, in a batch or in a prefill
// chunk. A range holds at most 64 KiB of staged activations for the largest tile (1024 columns); K is split
// further until the grid has about four blocks per SM (blocks of 32 rows) or each range is one 512-column
// super-chunk. At V4-Flash decode shapes on 132 SMs: wq_b (32768 x 1024) one range, wo_b (4096 x 8192) eight, the
// shared expert w1/w3 (2048 x 4096) eight.
//
// kMma tiles: they fix nothing about the numerics (every tile runs the same per-output chain), only speed. Decode
// tiles: 16 rows, 8, 16 or 32 columns, the widest that still gives >= 1.5 CTAs per SM, the CTA's warps sharing out
// the K blocks; 32 columns (two column groups of 4 warps) only where K <= 1024, so that each warp still gets two K
// blocks in flight (H200: wq_b at M = 1 14.4 us against 18.2 with 16 columns; with more K blocks 16 columns won by
// 5-15 %). 64 x 128 tiles (warp tiles 32 x 32, sums in registers) instead where a rough cost model says they are
// faster: measured on an H200 (docs/perf.md, kMma section), decode tiles stream W at ~3 TB/s once per 16-row tile,
// and a 64 x 128 CTA (one per SM) takes ~1.1 us per 128-column K block.
Fp8GemmConfig fp8_gemm_config(int64_t m, int64_t n, int64_t k, int num_sms, Fp8GemmPath requested, bool wgmma) {
    Fp8GemmConfig c;
    c.path = requested == Fp8GemmPath::kAuto ? Fp8GemmPath::kMma : requested;
    if (c.path == Fp8GemmPath::kCublasLt || c.path == Fp8GemmPath::kGeneric) return c;
    if (c.path == Fp8GemmPath::kMma) {
        const int64_t sms = std::max(num_sms, 1), m_tiles = ceil_div(std::max<int64_t>(m, 1), 16);
        int decode_n = 0;
        for (int bn : {32, 16, 8}) {
            if (fp8_mma_smem_bytes(16, bn, m, k) > kMmaMaxSmem || (bn == 32 && ceil_div(k, 128) > 8)) continue;
            decode_n = bn;
            if (2 * ceil_div(n, bn) * m_tiles >= 3 * sms) break;
        }
        const double decode_us = double(m_tiles) * double(n) * double(k) / 3e6;
        const double tiles_us = 1.1 * double(ceil_div(ceil_div(m, 64) * ceil_div(n, 128), sms) * ceil_div(k, 128));
        if (decode_n && decode_us <= tiles_us) {
            c.block_m = 16;
            c.block_n = decode_n;
        } else {
            // The warpgroup tile computes twice the outputs of a 64 x 128 CTA in ~1.4x its time per K block
            // (measured on an H100: wo_b at M = 4096, 1.29 against 0.94 us per block and wave): it wins where it
            // needs fewer waves by more than that, not where half as many CTAs leave SMs idle (M = 256, N = 4096).
            const int64_t waves64 = ceil_div(ceil_div(m, 64) * ceil_div(n, 128), sms),
                          waves128 = ceil_div(ceil_div(m, 128) * ceil_div(n, 128), sms);
            c.block_m = wgmma && k % 128 == 0 && 1.4 * double(waves128) < double(waves64) ? 128 : 64;
            c.block_n = 128;
        }
        return c;
    }
    const int64_t rows = std::clamp<int64_t>(m, 1, kSkinnyMaxTile);
    while (c.m_tile < rows) c.m_tile *= 2;
    const int64_t max_span = kSkinnySmemFloats / kSkinnyMaxTile / kSkinnySuper * kSkinnySuper;
    const int64_t row_blocks = ceil_div(n, kSkinnyRowsPerBlock);
    const int64_t max_splits = std::max<int64_t>(1, ceil_div(k, kSkinnySuper));
    const int64_t wanted = std::min(max_splits, ceil_div(4 * int64_t(std::max(num_sms, 1)), row_blocks));
    const int64_t splits = std::max(ceil_div(k, max_span), wanted);
    c.k_per_split = round_up(ceil_div(k, splits), kSkinnySuper);
    c.splits = int(ceil_div(k, c.k_per_split));
    return c;
}

size_t fp8_gemm_workspace_bytes(const Fp8GemmConfig& c, int64_t m, int64_t n, int64_t k) {
    if (c.path == Fp8GemmPath::kSkinny) return c.splits > 1 ? size_t(c.splits) * m * n * sizeof(float) : 0;
    if (c.path == Fp8GemmPath::kMma || c.path == Fp8GemmPath::kGeneric) return 0;
    const int64_t kb = ceil_div(k, 128), nb = ceil_div(n, 128);
    return align256(size_t(kb * round_up(m, 4)) * sizeof(float)) +
           align256(size_t(nb * round_up(kb, 4)) * sizeof(float)) + kCublasLtWorkspaceBytes;
}

std::string fp8_gemm_can_implement(const Fp8GemmParams& p, const Fp8GemmConfig& c) {
    if (!p.a || !p.a_scale || !p.w || !p.w_scale || !p.y) return "null operand pointer";
    if (p.m <= 0 || p.n <= 0 || p.k <= 0) return fmt::format("empty shape m={} n={} k={}", p.m, p.n, p.k);
    if (p.workspace_bytes < fp8_gemm_workspace_bytes(c, p.m, p.n, p.k))
        return fmt::format("workspace of {} bytes, {} path needs {}", p.workspace_bytes, fp8_gemm_path_name(c.path),
                           fp8_gemm_workspace_bytes(c, p.m, p.n, p.k));
    if (reinterpret_cast<uintptr_t>(p.workspace) % 256) return "workspace must be 256-byte aligned";
    if (p.rows_live && !(c.path == Fp8GemmPath::kMma && (c.block_m == 16 || c.block_m == 64)))
        return fmt::format("rows_live needs the mma path's 16- or 64-row tiles ({} path, {}-row tiles)",
                           fp8_gemm_path_name(c.path), c.block_m);
    if (p.post_mix.out && (p.post_mix.n_hc < 1 || !p.post_mix.mix || !p.post_mix.streams))
        return fmt::format("post_mix needs mix, streams and n_hc >= 1 (n_hc {})", p.post_mix.n_hc);
    if (c.path == Fp8GemmPath::kGeneric) return p.m <= 65535 ? "" : fmt::format("generic path: M={} above 65535", p.m);
    for (const void* ptr : {static_cast<const void*>(p.a), static_cast<const void*>(p.w)})
        if (reinterpret_cast<uintptr_t>(ptr) % 16) return "A and W must be 16-byte aligned";
    if (c.path == Fp8GemmPath::kSkinny) {
        if (p.k % 16) return fmt::format("skinny path needs K % 16 == 0, got K={}", p.k);
        return {};
    }
    if (c.path == Fp8GemmPath::kMma) {
        if (p.k % 16) return fmt::format("mma path needs K % 16 == 0, got K={}", p.k);
        if (!((c.block_m == 16 && (c.block_n == 8 || c.block_n == 16 || c.block_n == 32)) ||
              ((c.block_m == 64 || c.block_m == 128) && c.block_n == 128)))
            return fmt::format("mma path has no {}x{} tile", c.block_m, c.block_n);
        if (c.block_m == 128 && (p.k % 128 || !device_has_wgmma()))
            return fmt::format("mma path: the 128x128 (wgmma) tile needs K % 128 == 0 (K={}) and an sm_90 device", p.k);
        if (ceil_div(p.n, c.block_n) > 65535 || ceil_div(p.m, c.block_m) > int64_t{0x7FFFFFFF})
            return fmt::format("mma path: grid too large for M={} N={}", p.m, p.n);
        if (fp8_mma_smem_bytes(c.block_m, c.block_n, p.m, p.k) > kMmaMaxSmem)
            return fmt::format("mma path: K={} needs more staged shared memory than {} bytes with {}-row tiles", p.k,
                               kMmaMaxSmem, c.block_m);
        return {};
    }
    if (c.path != Fp8GemmPath::kCublasLt) return "no path chosen";
    if (!cublaslt_shape_ok(p.m, p.n, p.k))
        return fmt::format("cuBLASLt path needs M % 4 == 0, K % 128 == 0 and N % 16 == 0, got M={} N={} K={}", p.m,
                           p.n, p.k);
    if (reinterpret_cast<uintptr_t>(p.y) % 16) return "Y must be 16-byte aligned";
    return {};
}

namespace {

void run_cublaslt(const CublasLt& lt, const Fp8GemmParams& p, cudaStream_t stream) {
    const int64_t kb = p.k / 128, nb = ceil_div(p.n, 128);
    auto* base = static_cast<char*>(p.workspace);
    float* a_scale = reinterpret_cast<float*>(base);
    const size_t a_bytes = align256(size_t(kb * round_up(p.m, 4)) * sizeof(float));
    float* w_scale = reinterpret_cast<float*>(base + a_bytes);
    const size_t w_bytes = align256(size_t(nb * round_up(kb, 4)) * sizeof(float));
    void* lt_workspace = base + a_bytes + w_bytes;
    DSV4_CUDA_CHECK(launch_repack_scales(p.a_scale, p.m, kb, p.w_scale, nb, a_scale, w_scale, stream));

    MatmulDesc desc(CUBLAS_COMPUTE_32F, CUDA_R_32F);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F));
    desc.set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F));
    desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(w_scale));
    desc.set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(a_scale));
    desc.set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t(0));  // promote to f32 every block (the official semantics)
    MatrixLayout wl(CUDA_R_8F_E4M3, uint64_t(p.k), uint64_t(p.n), p.k);
    MatrixLayout al(CUDA_R_8F_E4M3, uint64_t(p.k), uint64_t(p.m), p.k);
    MatrixLayout yl(CUDA_R_16BF, uint64_t(p.n), uint64_t(p.m), p.n);
    MatmulPreference pref(kCublasLtWorkspaceBytes);

    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt.get(), desc.get(), wl.get(), al.get(), yl.get(),
                                                                 yl.get(), pref.get(), 1, &result, &found);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0)
        fail("gemm_fp8: cuBLASLt offers no block-scaled FP8 algorithm for M={} N={} K={} ({}); use the skinny path "
             "explicitly if this shape must run",
             p.m, p.n, p.k, cublasLtGetStatusString(status));
    const float alpha = 1.0f, beta = 0.0f;
    DSV4_CUBLAS_CHECK(cublasLtMatmul(lt.get(), desc.get(), &alpha, p.w, wl.get(), p.a, al.get(), &beta, p.y,
                                     yl.get(), p.y, yl.get(), &result.algo, lt_workspace, kCublasLtWorkspaceBytes,
                                     stream));
}

}  // namespace

void fp8_gemm(const CublasLt& lt, const Fp8GemmParams& p, cudaStream_t stream) {
    const Fp8GemmConfig config = fp8_gemm_config(p.m, p.n, p.k, multiprocessor_count(), p.path, device_has_wgmma());
    if (std::string why = fp8_gemm_can_implement(p, config); !why.empty())
        fail("gemm_fp8 (M={} N={} K={}, {} path): {}", p.m, p.n, p.k, fp8_gemm_path_name(config.path), why);
    // The post-mix in the tiles' epilogue where they have one, else hc_post after the product.
    const bool fused = p.post_mix.out && fp8_gemm_fuses_post_mix(config, p.post_mix.n_hc);
    Fp8GemmParams launched = p;
    if (!fused) launched.post_mix = {};
    if (config.path == Fp8GemmPath::kCublasLt) {
        run_cublaslt(lt, p, stream);
    } else if (config.path == Fp8GemmPath::kMma) {
        DSV4_CUDA_CHECK(launch_fp8_mma(launched, config, stream));
    } else if (config.path == Fp8GemmPath::kGeneric) {
        DSV4_CUDA_CHECK(launch_fp8_generic(p, stream));
    } else {
        DSV4_CUDA_CHECK(launch_fp8_skinny(p, config, static_cast<float*>(p.workspace), stream));
    }
    if (p.post_mix.out && !fused)
        hc_post({p.y, p.post_mix.streams, p.post_mix.mix, p.post_mix.out, p.m, p.post_mix.n_hc, p.n}, stream);
}

bool fp8_gemm_fuses_post_mix(const Fp8GemmConfig& c, int n_hc) {
    // The decode tiles only: their epilogue spreads a tile's outputs over the CTA's threads. The 64-row tiles run it
    // too (the tests hold them to hc_post's bits) but each thread there stores 32 outputs, and 24 loads of streams
    // and mix apiece made wo_b at batch 256 ~35 us a layer slower than hc_post's 14 us launch (docs/perf.md).
    return c.path == Fp8GemmPath::kMma && c.block_m == 16 && (n_hc == 2 || n_hc == 4);
}

}  // namespace dsv4::cuda
