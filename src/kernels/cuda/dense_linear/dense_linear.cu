// dense_linear kernels (see dense_linear.h). Every output element is owned by one thread, which adds its products
// in column order with __fmul_rn / __fadd_rn (nvcc cannot contract them into FMAs), starting from +0: the
// arithmetic of cpu::linear. The kernels below differ only in how the operands reach that thread, never in the
// order of its sum, so they agree bitwise with each other and with the CPU.
//
// Staged path (W rows 16-byte aligned, the case of every engine weight): each warp owns 32 consecutive outputs n
// (one per lane) and TM tokens (TM chains per lane, sharing each W value). The block first copies its TM rows of x
// into shared memory as f32 (exact upcast, any stride or alignment). Then each warp streams its 32 W rows through
// a private ring of S shared-memory stages of 128 bytes per row (64 bf16 or 32 f32 columns): 16-byte cp.async, 8
// lanes per row so a warp instruction fetches four whole 128-byte lines (a lane's 8 pieces sit at fixed offsets from
// two per-lane bases: ~5 instructions per cp.async for whole stages), rows padded to 144 bytes so the lanes'
// 16-byte reads of their own rows hit distinct banks. Warps synchronize only with __syncwarp (a stage is read only
// by the warp that filled it), so they run independently. Small grids get one warp per block and 16 stages (more
// bytes in flight per warp: a 4096-column chain is ~8 us of dependent adds, the load must keep up), large grids
// four warps per block and 4 stages (two blocks per SM for K = 4096, ~96 KB in flight per SM).
//
// Tiled path (any alignment): the former kernel, a block of 8 tokens x 32 outputs with 32-column tiles of x and W
// staged through shared memory by scalar loads.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/common/cp_async.cuh"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/dense_linear/dense_linear.h"

namespace dsv4::cuda {
namespace {

// ---------------------------------------------------------------------------------------------- tiled (generic)
constexpr int kTileN = 32, kTileM = 8, kTileK = 32;
static_assert(kTileN == 32, "threadIdx.x is the output within a warp-wide tile");
static_assert(kTileN * kTileM % kTileK == 0, "the staging loops cover a tile evenly");

template <typename W>
__device__ float load_weight(const W* w, int64_t i);
template <>
__device__ float load_weight<float>(const float* w, int64_t i) {
    return w[i];
}
template <>
__device__ float load_weight<__nv_bfloat16>(const __nv_bfloat16* w, int64_t i) {
    return __bfloat162float(w[i]);
}

template <typename W>
__global__ void __launch_bounds__(kTileN* kTileM) dense_linear_tiled_kernel(const DenseLinearParams p) {
    __shared__ float w_tile[kTileN][kTileK + 1];  // [outputs, columns] f32, padded against bank conflicts
    __shared__ float x_tile[kTileM][kTileK];      // [tokens, columns] f32
    const W* w = static_cast<const W*>(p.w);
    const int tid = threadIdx.y * kTileN + threadIdx.x;
    const int64_t n0 = int64_t(blockIdx.x) * kTileN, m0 = int64_t(blockIdx.y) * kTileM;
    const int64_t n = n0 + threadIdx.x, m = m0 + threadIdx.y;
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < p.k; k0 += kTileK) {
        const int width = int(p.k - k0 < kTileK ? p.k - k0 : kTileK);
        for (int i = tid; i < kTileN * kTileK; i += kTileN * kTileM) {
            const int r = i / kTileK, c = i % kTileK;
            w_tile[r][c] = (n0 + r < p.n && c < width) ? load_weight(w, (n0 + r) * p.ldw + k0 + c) : 0.0f;
        }
        for (int i = tid; i < kTileM * kTileK; i += kTileN * kTileM) {
            const int r = i / kTileK, c = i % kTileK;
            x_tile[r][c] = (m0 + r < p.m && c < width) ? __bfloat162float(p.x[(m0 + r) * p.ldx + k0 + c]) : 0.0f;
        }
        __syncthreads();
        for (int c = 0; c < width; ++c) acc = __fadd_rn(acc, __fmul_rn(x_tile[threadIdx.y][c], w_tile[threadIdx.x][c]));
        __syncthreads();
    }
    if (n < p.n && m < p.m) p.y[m * p.ldy + n] = acc;
}

// ---------------------------------------------------------------------------------------------- staged
constexpr int kChunkBytes = 128;              // bytes of one W row per stage
constexpr int kRowStride = kChunkBytes + 16;  // padded: 9 x 16 bytes, odd, so 8 lanes' rows hit 8 bank groups
constexpr int kStageBytes = 32 * kRowStride;  // one warp's 32 rows
constexpr int kSmallStages = 16, kLargeStages = 4, kLargeWarps = 4;


// The 16 bytes `v` as f32 values (exact: a bf16 is the high half of its f32).
template <typename W>
struct Unpack;
template <>
struct Unpack<__nv_bfloat16> {
    static constexpr int kPer = 8;
    __device__ static void run(const uint4& v, float (&out)[8]) {
        const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            out[2 * i] = __uint_as_float(u[i] << 16);
            out[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
        }
    }
};
template <>
struct Unpack<float> {
    static constexpr int kPer = 4;
    __device__ static void run(const uint4& v, float (&out)[4]) {
        out[0] = __uint_as_float(v.x);
        out[1] = __uint_as_float(v.y);
        out[2] = __uint_as_float(v.z);
        out[3] = __uint_as_float(v.w);
    }
};

int64_t x_stride(int64_t k) {
    return (k + 3) / 4 * 4;
}  // f32 row stride of the x copy: float4-aligned rows
size_t x_bytes(int tm, int64_t k) {
    return size_t(tm) * size_t(x_stride(k)) * sizeof(float);
}

template <typename W, int TM, int S>
__global__ void __launch_bounds__(32 * kLargeWarps)
    dense_linear_staged_kernel(const DenseLinearParams p, int64_t m_tiles) {
    constexpr int kPer = Unpack<W>::kPer;                // columns per 16 bytes
    constexpr int kCols = kChunkBytes / int(sizeof(W));  // columns per stage
    extern __shared__ __align__(16) unsigned char smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int64_t k = p.k, xs_stride = (k + 3) / 4 * 4;
    float* xs = reinterpret_cast<float*>(smem);
    unsigned char* ring = smem + size_t(TM) * size_t(xs_stride) * sizeof(float) + size_t(warp) * S * kStageBytes;
    const int64_t mt = blockIdx.x % m_tiles, nb = blockIdx.x / m_tiles;
    const int64_t m0 = mt * TM, n0 = (nb * warps + warp) * 32;
    const int64_t chunks = (k + kCols - 1) / kCols;
    const int64_t row_bytes = k * int64_t(sizeof(W)), ldw_bytes = p.ldw * int64_t(sizeof(W));
    const unsigned char* wbase = static_cast<const unsigned char*>(p.w);

    // Stage `c` of this warp's 32 rows into ring slot `slot`: 256 16-byte pieces, 8 per lane, 8 lanes per row. Lane
    // l moves bytes 16 (l % 8) .. + 15 of the stage's 128 of rows l / 8 + 4 i, i = 0..7: its source and destination
    // addresses are fixed offsets from two per-lane bases, so a stage whose 32 rows are all whole (every stage of a
    // full 32-row tile but a K tail) costs 8 unpredicated cp.async and their address adds.
    const int r0 = lane >> 3, j16 = (lane & 7) * 16;
    const unsigned char* src0 = wbase + (n0 + r0) * ldw_bytes + j16;
    const int64_t src_step = 4 * ldw_bytes;
    const unsigned dst0 = static_cast<unsigned>(__cvta_generic_to_shared(ring)) + unsigned(r0 * kRowStride + j16);
    const int64_t whole_chunks = n0 + 32 <= p.n ? row_bytes / kChunkBytes : 0;
    auto load = [&](int64_t c, int slot) {
        const unsigned dst = dst0 + unsigned(slot * kStageBytes);
        const unsigned char* src = src0 + c * kChunkBytes;
        if (c < whole_chunks) {
#pragma unroll
            for (int i = 0; i < 8; ++i) cp_async16(dst + unsigned(i * 4 * kRowStride), src + i * src_step);
        } else {
            const int64_t left = row_bytes - c * kChunkBytes - j16;
#pragma unroll
            for (int i = 0; i < 8; ++i)
                if (n0 + r0 + 4 * i < p.n && left > 0)
                    cp_async16(dst + unsigned(i * 4 * kRowStride), src + i * src_step, int(left < 16 ? left : 16));
        }
    };
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
        if (s < chunks) load(s, s);
        cp_async_commit();
    }
    // x rows m0 .. m0 + TM - 1 as f32 (rows past m are zeros, their outputs never stored).
    // Eight independent loads per lane in flight (a one-warp block copies 8 KB per token).
    const bool wide = reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && p.ldx % 8 == 0 && k % 8 == 0;
    for (int t = 0; t < TM; ++t) {
        const bool live = m0 + t < p.m;
        const __nv_bfloat16* xr = p.x + (live ? (m0 + t) * p.ldx : 0);
        float* xd = xs + t * xs_stride;
        if (wide) {  // 16-byte loads, 8 columns each
            const int64_t pieces = k / 8;
            for (int64_t base = threadIdx.x; base < pieces; base += 8 * blockDim.x) {
                uint4 v[8];
#pragma unroll
                for (int u = 0; u < 8; ++u) {
                    const int64_t i = base + u * blockDim.x;
                    v[u] = live && i < pieces ? __ldg(reinterpret_cast<const uint4*>(xr) + i) : make_uint4(0, 0, 0, 0);
                }
#pragma unroll
                for (int u = 0; u < 8; ++u) {
                    const int64_t i = base + u * blockDim.x;
                    if (i >= pieces) break;
                    float f[8];
                    Unpack<__nv_bfloat16>::run(v[u], f);
                    reinterpret_cast<float4*>(xd + i * 8)[0] = make_float4(f[0], f[1], f[2], f[3]);
                    reinterpret_cast<float4*>(xd + i * 8)[1] = make_float4(f[4], f[5], f[6], f[7]);
                }
            }
        } else {
            for (int64_t base = threadIdx.x; base < k; base += 8 * blockDim.x) {
                float v[8];
#pragma unroll
                for (int u = 0; u < 8; ++u) {
                    const int64_t i = base + u * blockDim.x;
                    v[u] = live && i < k ? __bfloat162float(xr[i]) : 0.0f;
                }
#pragma unroll
                for (int u = 0; u < 8; ++u) {
                    const int64_t i = base + u * blockDim.x;
                    if (i < k) xd[i] = v[u];
                }
            }
        }
    }
    __syncthreads();
    if (n0 >= p.n) return;  // after the block's only barrier

    float acc[TM];
#pragma unroll
    for (int t = 0; t < TM; ++t) acc[t] = 0.0f;
    const unsigned char* my_row = ring + lane * kRowStride;
    for (int64_t c = 0; c < chunks; ++c) {
        cp_async_wait<S - 2>();  // this lane's pieces of stage c have landed
        __syncwarp();            // ... and every lane's; and every lane is done with stage c - 1
        if (c + S - 1 < chunks) load(c + S - 1, int((c + S - 1) % S));
        cp_async_commit();
        const unsigned char* wrow = my_row + int(c % S) * kStageBytes;
        const int64_t col0 = c * kCols;
        if (col0 + kCols <= k) {
            // The stage's W row (and, for one token, its x columns) into registers first: independent shared
            // loads in flight together, rather than each just before its 8-column group (latency exposed).
            constexpr int kX4 = TM == 1 ? kCols / 4 : 1;
            uint4 wraw[kChunkBytes / 16];
            float4 xpre[kX4];
#pragma unroll
            for (int j = 0; j < kChunkBytes / 16; ++j) wraw[j] = *reinterpret_cast<const uint4*>(wrow + j * 16);
            if constexpr (TM == 1)
#pragma unroll
                for (int i = 0; i < kX4; ++i) xpre[i] = *reinterpret_cast<const float4*>(xs + col0 + i * 4);
#pragma unroll
            for (int j = 0; j < kChunkBytes / 16; ++j) {
                float wv[kPer];
                Unpack<W>::run(wraw[j], wv);
#pragma unroll
                for (int t = 0; t < TM; ++t) {
                    float xv[kPer];
#pragma unroll
                    for (int q = 0; q < kPer / 4; ++q) {
                        const float4 v =
                            TM == 1 ? xpre[(j * kPer + q * 4) / 4 % kX4]
                                    : *reinterpret_cast<const float4*>(xs + t * xs_stride + col0 + j * kPer + q * 4);
                        xv[4 * q] = v.x;
                        xv[4 * q + 1] = v.y;
                        xv[4 * q + 2] = v.z;
                        xv[4 * q + 3] = v.w;
                    }
#pragma unroll
                    for (int e = 0; e < kPer; ++e) acc[t] = __fadd_rn(acc[t], __fmul_rn(xv[e], wv[e]));
                }
            }
        } else {  // the last, partial stage: column by column
            const W* wr = reinterpret_cast<const W*>(wrow);
            for (int e = 0; col0 + e < k; ++e) {
                const float wv = load_weight(wr, e);
#pragma unroll
                for (int t = 0; t < TM; ++t) acc[t] = __fadd_rn(acc[t], __fmul_rn(xs[t * xs_stride + col0 + e], wv));
            }
        }
    }
    cp_async_wait<0>();
    const int64_t n = n0 + lane;
    if (n < p.n)
#pragma unroll
        for (int t = 0; t < TM; ++t)
            if (m0 + t < p.m) p.y[(m0 + t) * p.ldy + n] = acc[t];
}

constexpr int kMaxDevices = 64;

// The device's opt-in shared-memory limit per block, read once per device (host calls per launch cost more than
// a small launch's kernel time).
int smem_optin(int device) {
    static std::atomic<int> limits[kMaxDevices] = {};
    if (device >= kMaxDevices) {
        int limit = 0;
        DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
        return limit;
    }
    int limit = limits[device].load(std::memory_order_relaxed);
    if (limit == 0) {
        DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
        limits[device].store(limit, std::memory_order_relaxed);
    }
    return limit;
}

template <typename W, int TM, int S>
bool try_staged(const DenseLinearParams& p, int warps, cudaStream_t stream) {
    const size_t smem = x_bytes(TM, p.k) + size_t(warps) * S * kStageBytes;
    int device = 0;
    DSV4_CUDA_CHECK(cudaGetDevice(&device));
    const int limit = smem_optin(device);
    if (smem > size_t(limit)) return false;
    auto kernel = dense_linear_staged_kernel<W, TM, S>;
    // Raise the kernel's dynamic shared-memory limit to the device's, once per device.
    static std::atomic<bool> raised[kMaxDevices] = {};
    if (smem > 48 * 1024 && (device >= kMaxDevices || !raised[device].load(std::memory_order_acquire))) {
        DSV4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit));
        if (device < kMaxDevices) raised[device].store(true, std::memory_order_release);
    }
    const int64_t m_tiles = (p.m + TM - 1) / TM, n_blocks = (p.n + 32 * warps - 1) / (32 * warps);
    if (m_tiles * n_blocks > int64_t(INT32_MAX)) return false;
    kernel<<<unsigned(m_tiles * n_blocks), unsigned(32 * warps), smem, stream>>>(p, m_tiles);
    DSV4_CUDA_CHECK(cudaGetLastError());
    return true;
}

template <typename W, int TM>
bool try_staged(const DenseLinearParams& p, cudaStream_t stream) {
    // Warps of work: one per 32 outputs and TM tokens. Under ~4 per SM, spread them one per block with deep rings.
    const int64_t warp_tasks = (p.n + 31) / 32 * ((p.m + TM - 1) / TM);
    if (warp_tasks < 132 * 4 && try_staged<W, TM, kSmallStages>(p, 1, stream)) return true;
    return try_staged<W, TM, kLargeStages>(p, kLargeWarps, stream);
}

template <typename W>
bool try_staged(const DenseLinearParams& p, cudaStream_t stream) {
    const uintptr_t w = reinterpret_cast<uintptr_t>(p.w);
    if (w % 16 != 0 || (p.ldw * int64_t(sizeof(W))) % 16 != 0) return false;
    if (p.m < 4) return try_staged<W, 1>(p, stream);
    return try_staged<W, 4>(p, stream);
}

}  // namespace

namespace detail {
void launch_dense_linear_tiled(const DenseLinearParams& p, cudaStream_t stream) {
    const dim3 block(kTileN, kTileM);
    const dim3 grid(unsigned((p.n + kTileN - 1) / kTileN), unsigned((p.m + kTileM - 1) / kTileM));
    if (p.type == DenseType::kF32)
        dense_linear_tiled_kernel<float><<<grid, block, 0, stream>>>(p);
    else
        dense_linear_tiled_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

void launch_dense_linear(const DenseLinearParams& p, cudaStream_t stream) {
    const bool staged = p.type == DenseType::kF32 ? try_staged<float>(p, stream) : try_staged<__nv_bfloat16>(p, stream);
    if (!staged) launch_dense_linear_tiled(p, stream);
}
}  // namespace detail

}  // namespace dsv4::cuda
