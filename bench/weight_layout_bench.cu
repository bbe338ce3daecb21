// How fast the GPU streams the routed experts' weights in the order the MoE kernels read them, against the same
// bytes laid out tile by tile. A CTA of the MoE kernels takes an item (expert, 128-row tile) and walks K in stages
// of 128 columns: per stage 64 bytes of each of its 128 rows, rows k/2 bytes apart (2 KiB for w1 / w3, 1 KiB for w2),
// so every stage touches 128 DRAM locations 64 bytes at a time. `tiled` stores each (tile, stage) block of 128 x 64
// bytes contiguously (8 KiB), the layout a repack at upload would give. Both read every byte once with the same grid,
// the same loads in flight (kAhead stages a thread) and the same item order; only the addresses differ.
// A second table sizes the reads like a batch-1 step's routed experts (six experts' w1 and w3: 48 MiB, under the L2's
// reach once warm, so each run reads the next of eight copies) with the row tiles of the batch-1 passes (64 rows on one
// GPU, 32 for fewer experts) and contiguous groups of 1 (the checkpoint's row order) to 64 rows: which group a repack
// at upload needs. The same table streams the 48 MiB the way the single-slot routed-expert pass does, without its
// arithmetic (a ring of 8 stages in shared memory filled by 16-byte cp.async, a CTA barrier a stage, all warps or one
// loader warp copying), and through the bulk copy engine with a full and an empty mbarrier a stage (one 64-byte copy a
// row, or the stage's rows stored back to back as one 4 KiB copy): what the kernel's loading scheme costs and what a
// repack would buy; and by the tensor-memory accelerator from the checkpoint's row order (one 2D copy a stage of a
// 64 x 64-byte box through a tensor map): whether the one-copy stage needs the repack at all. Usage:
// dsv4_bench_weight_layout. Prints GB/s per pattern beside the device-to-device copy rate.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "kernels/cuda/common/cp_async.cuh"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/tensor_map.h"
#include "kernels/cuda/common/vector_loads.cuh"

namespace {

using dsv4::cuda::load_streaming;

constexpr int kThreads = 256, kRows = 128, kStageBytes = 64;  // per row and stage: 128 e2m1 columns
constexpr int kAhead = 8;                                     // stages a thread has in flight

// The best of `timed` launches launch(1) .. launch(timed), in ms by CUDA events, after an untimed launch(0) that
// warms the code (launch(r) may pick its copy of the weights by r, so that none is read from the L2 the previous left).
template <typename Launch>
double best_ms(int timed, Launch launch) {
    cudaEvent_t a, b;
    DSV4_CUDA_CHECK(cudaEventCreate(&a));
    DSV4_CUDA_CHECK(cudaEventCreate(&b));
    launch(0);
    float best = 1e30f;
    for (int r = 1; r <= timed; ++r) {
        DSV4_CUDA_CHECK(cudaEventRecord(a));
        launch(r);
        DSV4_CUDA_CHECK(cudaEventRecord(b));
        DSV4_CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        best = ms < best ? ms : best;
    }
    DSV4_CUDA_CHECK(cudaGetLastError());
    DSV4_CUDA_CHECK(cudaEventDestroy(a));
    DSV4_CUDA_CHECK(cudaEventDestroy(b));
    return best;
}

// Items (expert, tile) over a persistent grid; per stage a thread reads 16 bytes of rows tid / 4 and 64 + tid / 4.
template <bool kTiled>
__global__ void __launch_bounds__(kThreads)
    stream_kernel(const uint8_t* w, int64_t items, int64_t row_bytes, uint32_t* sink) {
    const int tid = threadIdx.x, part = tid % 4;
    const int64_t stages = row_bytes / kStageBytes;
    uint32_t acc = 0;
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const uint8_t* tile = w + item * kRows * row_bytes;
        for (int64_t s0 = 0; s0 < stages; s0 += kAhead) {
            uint4 v[kAhead][2];
#pragma unroll
            for (int i = 0; i < kAhead; ++i) {
                const int64_t s = s0 + i < stages ? s0 + i : stages - 1;
                for (int h = 0; h < 2; ++h) {
                    const int row = tid / 4 + h * (kRows / 2);
                    const uint8_t* p = kTiled ? tile + s * (kRows * kStageBytes) + row * kStageBytes + part * 16
                                              : tile + row * row_bytes + s * kStageBytes + part * 16;
                    v[i][h] = load_streaming(p);
                }
            }
#pragma unroll
            for (int i = 0; i < kAhead; ++i)
                for (int h = 0; h < 2; ++h) acc ^= v[i][h].x ^ v[i][h].y ^ v[i][h].z ^ v[i][h].w;
        }
    }
    if (acc == 0x12345678u) sink[0] = acc;  // keeps the loads; practically never stored
}

// Items of kTileRows rows over a persistent grid, K in stages of 64 bytes a row (128 e2m1 columns), every CTA's
// loads of a stage issued together, kLoads 16-byte loads a thread in flight. The matrix is stored in groups of
// kGroup rows: [row / kGroup][stage][row % kGroup][64 bytes] (kGroup 1: row by row, the checkpoint's order).
template <int kTileRows, int kLoads, int kGroup>
__global__ void __launch_bounds__(kThreads)
    grouped_stream_kernel(const uint8_t* w, int64_t rows, int64_t row_bytes, uint32_t* sink) {
    constexpr int kLoadsPerStage = kTileRows * kStageBytes / 16;
    const int64_t stages = row_bytes / kStageBytes, per_item = kLoadsPerStage * stages;
    uint32_t acc = 0;
    for (int64_t item = blockIdx.x; item < rows / kTileRows; item += gridDim.x) {
        for (int64_t l0 = threadIdx.x; l0 < per_item; l0 += int64_t(kThreads) * kLoads) {
            uint4 v[kLoads];
#pragma unroll
            for (int i = 0; i < kLoads; ++i) {
                const int64_t l = l0 + int64_t(i) * kThreads < per_item ? l0 + int64_t(i) * kThreads : per_item - 1;
                const int64_t s = l / kLoadsPerStage, in_stage = l % kLoadsPerStage;
                const int64_t row = item * kTileRows + in_stage / 4, part = in_stage % 4;
                v[i] = load_streaming(w + (row / kGroup) * kGroup * row_bytes + s * kGroup * kStageBytes +
                                      (row % kGroup) * kStageBytes + part * 16);
            }
#pragma unroll
            for (int i = 0; i < kLoads; ++i) acc ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
        }
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

// Best of 8 runs, each over the next of `copies` copies of `bytes`.
template <int kTileRows, int kLoads, int kGroup>
double run_grouped(const uint8_t* w, size_t bytes, int copies, int64_t row_bytes, int grid, uint32_t* sink) {
    return best_ms(8, [&](int r) {
        grouped_stream_kernel<kTileRows, kLoads, kGroup>
            <<<grid, kThreads>>>(w + size_t(r % copies) * bytes, int64_t(bytes) / row_bytes, row_bytes, sink);
    });
}

// The single-slot routed-expert pass's loading scheme without its arithmetic: 64-row tiles, rows 2 KiB apart, a
// ring of 8 stages of 64 bytes a row in shared memory (80-byte row pitch, as moe_mma.cu's), 7 ahead; per stage the
// loading threads wait for the stage, the CTA meets at a barrier, the slot just freed is refilled, and the 8 warps
// that multiply read their 16 bytes of it. kLoaderWarp: one ninth warp issues every copy (moe_mma.cu's kLoader);
// else each of the 8 warps' threads copies one 16-byte chunk a stage.
constexpr int kRingStages = 8, kRingPitch = 80, kRingTile = 64;
template <bool kLoaderWarp>
__global__ void __launch_bounds__(kLoaderWarp ? 288 : 256)
    ring_stream_kernel(const uint8_t* w, int64_t rows, int64_t row_bytes, uint32_t* sink) {
    __shared__ __align__(16) uint8_t ring[kRingStages][kRingTile * kRingPitch];
    constexpr int kPer = kLoaderWarp ? 8 : 1;  // chunks a loading thread copies a stage
    const int tid = threadIdx.x;
    const bool loads = !kLoaderWarp || tid >= 256, reads = tid < 256;
    const int li = kLoaderWarp ? tid - 256 : tid;
    const int stages = int(row_bytes / kStageBytes);
    uint32_t acc = 0;
    for (int64_t item = blockIdx.x; item < rows / kRingTile; item += gridDim.x) {
        const uint8_t* tile = w + item * kRingTile * row_bytes;
        auto load = [&](int kt) {
#pragma unroll
            for (int i = 0; i < kPer; ++i) {
                const int c = li + (kLoaderWarp ? 32 : 256) * i, r = c / 4, part = c % 4;
                dsv4::cuda::cp_async16(dsv4::cuda::smem_addr(&ring[kt % kRingStages][r * kRingPitch + part * 16]),
                                       tile + r * row_bytes + kt * kStageBytes + part * 16);
            }
        };
        if (loads)
            for (int s = 0; s < kRingStages - 1; ++s) {
                if (s < stages) load(s);
                dsv4::cuda::cp_async_commit();
            }
        for (int kt = 0; kt < stages; ++kt) {
            if (loads) dsv4::cuda::cp_async_wait<kRingStages - 2>();
            __syncthreads();
            if (loads) {
                if (kt + kRingStages - 1 < stages) load(kt + kRingStages - 1);
                dsv4::cuda::cp_async_commit();
            }
            if (reads) {
                const uint4 v =
                    *reinterpret_cast<const uint4*>(&ring[kt % kRingStages][(tid / 4) * kRingPitch + (tid % 4) * 16]);
                acc ^= v.x ^ v.y ^ v.z ^ v.w;
            }
        }
        dsv4::cuda::cp_async_wait<0>();
        __syncthreads();
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

template <bool kLoaderWarp>
double run_ring(const uint8_t* w, size_t bytes, int copies, int64_t row_bytes, int grid, uint32_t* sink) {
    return best_ms(8, [&](int r) {
        ring_stream_kernel<kLoaderWarp><<<grid, kLoaderWarp ? 288 : 256>>>(w + size_t(r % copies) * bytes,
                                                                           int64_t(bytes) / row_bytes, row_bytes, sink);
    });
}

// The same ring filled by the bulk copy engine (cp.async.bulk, sm_90) with a full and an empty mbarrier a stage instead
// of the CTA barrier: the ninth warp issues the copies once a slot is released (kContiguous: the stage's 64 rows stored
// back to back, one 4 KiB copy; else one 64-byte copy a row), the 8 reading warps wait only for their stage's bytes
// and release the slot when read. No CTA-wide barrier a stage. kCpAsync: the loader warp's 16-byte cp.async copies
// (rows in the checkpoint's order) signal the full mbarrier as they land (cp.async.mbarrier.arrive), no bulk copy:
// the mbarriers' share of the gain without the repack. kTensor: one 2D tensor copy a stage of the rows in the
// checkpoint's order (`map`: the copies' rows one after the other, 64 x 64-byte boxes; the run's rows start at
// `first_row`), landing as the contiguous copy's 4 KiB.
template <bool kContiguous, bool kCpAsync = false, bool kTensor = false>
__global__ void __launch_bounds__(288)
    bulk_ring_kernel(const uint8_t* w, int64_t rows, int64_t row_bytes, uint32_t* sink,
                     const __grid_constant__ CUtensorMap map, int first_row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ __align__(128) uint8_t ring[kRingStages][kRingTile * 64];
    __shared__ __align__(8) uint64_t full[kRingStages], empty[kRingStages];
    const int tid = threadIdx.x, lane = tid % 32;
    auto addr = [](const void* p) { return dsv4::cuda::smem_addr(p); };
    if (tid == 0)
        for (int i = 0; i < kRingStages; ++i) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(addr(&full[i])), "r"(kCpAsync ? 32 : 1));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 8;" ::"r"(addr(&empty[i])));
        }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
    auto wait = [&](uint64_t* bar, uint32_t parity) {
        uint32_t done = 0;
        while (!done)
            asm volatile(
                "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                : "=r"(done)
                : "r"(addr(bar)), "r"(parity)
                : "memory");
    };
    const int stages = int(row_bytes / kStageBytes);
    uint32_t acc = 0;
    int64_t n = 0;  // stages this CTA has passed through the ring (the phases)
    for (int64_t item = blockIdx.x; item < rows / kRingTile; item += gridDim.x, n += stages) {
        const uint8_t* tile = w + item * kRingTile * row_bytes;
        if (tid >= 256) {  // the loader warp
            for (int kt = 0; kt < stages; ++kt) {
                const int64_t g = n + kt;
                const int slot = int(g % kRingStages);
                if (g >= kRingStages) wait(&empty[slot], uint32_t((g / kRingStages - 1) & 1));
                if (kCpAsync) {
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        const int c = lane + 32 * i, r = c / 4, part = c % 4;
                        dsv4::cuda::cp_async16(addr(&ring[slot][r * kStageBytes + part * 16]),
                                               tile + r * row_bytes + int64_t(kt) * kStageBytes + part * 16);
                    }
                    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(addr(&full[slot]))
                                 : "memory");
                    continue;
                }
                if (lane == 0)
                    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(addr(&full[slot])),
                                 "r"(kRingTile * kStageBytes)
                                 : "memory");
                __syncwarp();
                if (kTensor) {
                    if (lane == 0)
                        asm volatile(
                            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
                            "[%1, {%2, %3}], [%4];" ::"r"(addr(ring[slot])),
                            "l"(&map), "r"(kt * kStageBytes), "r"(first_row + int(item) * kRingTile),
                            "r"(addr(&full[slot]))
                            : "memory");
                } else if (kContiguous) {
                    if (lane == 0)
                        asm volatile(
                            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
                                "r"(addr(ring[slot])),
                            "l"(tile + int64_t(kt) * kRingTile * kStageBytes), "r"(kRingTile * kStageBytes),
                            "r"(addr(&full[slot]))
                            : "memory");
                } else {
                    for (int r = lane; r < kRingTile; r += 32)
                        asm volatile(
                            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
                                "r"(addr(&ring[slot][r * kStageBytes])),
                            "l"(tile + r * row_bytes + int64_t(kt) * kStageBytes), "r"(kStageBytes),
                            "r"(addr(&full[slot]))
                            : "memory");
                }
            }
        } else {
            for (int kt = 0; kt < stages; ++kt) {
                const int64_t g = n + kt;
                const int slot = int(g % kRingStages);
                wait(&full[slot], uint32_t((g / kRingStages) & 1));
                const uint4 v = *reinterpret_cast<const uint4*>(&ring[slot][tid * 16]);
                acc ^= v.x ^ v.y ^ v.z ^ v.w;
                __syncwarp();
                if (lane == 0)
                    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(addr(&empty[slot])) : "memory");
            }
        }
    }
    if (acc == 0x12345678u) sink[0] = acc;
#endif
}

template <bool kContiguous, bool kCpAsync = false, bool kTensor = false>
double run_bulk(const uint8_t* w, size_t bytes, int copies, int64_t row_bytes, int grid, uint32_t* sink,
                const CUtensorMap& map = {}) {
    return best_ms(8, [&](int r) {
        const int64_t rows = int64_t(bytes) / row_bytes;
        bulk_ring_kernel<kContiguous, kCpAsync, kTensor><<<grid, 288>>>(w + size_t(r % copies) * bytes, rows,
                                                                         row_bytes, sink, map, int(r % copies * rows));
    });
}


// The warpgroup expert kernel's loading scheme (moe_wgmma.cu) over the whole expert set: 128-row tiles, stages of
// 256 columns (128 bytes a row), a ring of 4 slots filled by 16-byte cp.async from all 256 threads, a CTA barrier a
// stage, then `spin` cycles standing for the stage's arithmetic. kLayout 0: rows in the checkpoint's order; 1: 64-row
// tiles whose 128-column blocks are 4 KiB runs (the layout the engine could repack its experts into until 2026-12-07)
// read in memory order; 2: those tiles with each tile's blocks stored rotated by the tile's index (block kt of tile t
// at place (kt + 2 t) mod blocks), so CTAs in step read different offsets. Every layout reads every byte once, the
// stages in ascending K.
constexpr int kWideRows = 128, kWideStageBytes = 128, kWideSlots = 4, kWidePitch = kWideStageBytes + 16;
template <int kLayout>
__global__ void __launch_bounds__(256)
    wide_ring_kernel(const uint8_t* w, int64_t rows, int64_t row_bytes, int64_t spin, uint32_t* sink) {
    __shared__ __align__(16) uint8_t ring[kWideSlots][kWideRows * kWidePitch];
    const int tid = threadIdx.x;
    const int stages = int(row_bytes / kWideStageBytes), blocks = int(row_bytes / 64);
    uint32_t acc = 0;
    for (int64_t item = blockIdx.x; item < rows / kWideRows; item += gridDim.x) {
        const uint8_t* tile = w + item * kWideRows * row_bytes;
        auto load = [&](int kt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int c = tid + 256 * i;
                int row, part;
                const uint8_t* src;
                if (kLayout == 0) {
                    row = c / 8, part = c % 8;
                    src = tile + row * row_bytes + kt * kWideStageBytes + part * 16;
                } else {
                    const int run = c / 256, in_run = c % 256, rr = in_run / 4, q = in_run % 4, g = run / 2;
                    row = g * 64 + rr, part = run % 2 * 4 + q;  // (the chunk swizzle left out: no reads check it)
                    int block = 2 * kt + run % 2;
                    if (kLayout == 2) block = int((block + 2 * ((item * 2 + g) % blocks)) % blocks);
                    src = tile + g * 64 * row_bytes + block * 4096 + rr * 64 + q * 16;
                }
                dsv4::cuda::cp_async16(dsv4::cuda::smem_addr(&ring[kt % kWideSlots][row * kWidePitch + part * 16]),
                                       src);
            }
        };
        for (int s = 0; s < kWideSlots - 1; ++s) {
            if (s < stages) load(s);
            dsv4::cuda::cp_async_commit();
        }
        for (int kt = 0; kt < stages; ++kt) {
            dsv4::cuda::cp_async_wait<kWideSlots - 2>();
            __syncthreads();
            if (kt + kWideSlots - 1 < stages) load(kt + kWideSlots - 1);
            dsv4::cuda::cp_async_commit();
            const uint4 v = *reinterpret_cast<const uint4*>(&ring[kt % kWideSlots][(tid / 2) * kWidePitch]);
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
            for (const long long until = clock64() + spin; clock64() < until;) {
            }
        }
        dsv4::cuda::cp_async_wait<0>();
        __syncthreads();
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

template <int kLayout>
double run_wide(const uint8_t* w, size_t bytes, int64_t row_bytes, int grid, int64_t spin, uint32_t* sink) {
    return best_ms(3, [&](int) {
        wide_ring_kernel<kLayout><<<grid, 256>>>(w, int64_t(bytes) / row_bytes, row_bytes, spin, sink);
    });
}

template <bool kTiled>
double run(const uint8_t* w, int64_t items, int64_t row_bytes, int grid, uint32_t* sink) {
    return best_ms(5, [&](int) { stream_kernel<kTiled><<<grid, kThreads>>>(w, items, row_bytes, sink); });
}

}  // namespace

int main() {
    int sms = 0;
    DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp prop{};
    DSV4_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const int64_t experts = 256, n = 2048;
    const size_t bytes = size_t(experts * n * 2048);  // w1 of V4-Flash: 256 experts x 2048 rows x 4096 e2m1
    uint8_t* w = nullptr;
    uint8_t* copy = nullptr;
    uint32_t* sink = nullptr;
    DSV4_CUDA_CHECK(cudaMalloc(&w, bytes));
    DSV4_CUDA_CHECK(cudaMalloc(&copy, bytes));
    DSV4_CUDA_CHECK(cudaMalloc(&sink, 4));
    DSV4_CUDA_CHECK(cudaMemset(w, 1, bytes));
    const double copy_ms =
        best_ms(1, [&](int) { DSV4_CUDA_CHECK(cudaMemcpy(copy, w, bytes, cudaMemcpyDeviceToDevice)); });
    std::printf("device: %s, %d SMs; %.2f GB of weights; device-to-device copy %.0f GB/s (read + write)\n", prop.name,
                sms, double(bytes) / 1e9, 2.0 * double(bytes) / (copy_ms * 1e6));
    std::printf("%-34s %6s %10s %10s\n", "pattern", "CTAs", "ms", "GB/s");
    for (int64_t row_bytes : {2048, 1024}) {  // w1 / w3 (K 4096), w2 (K 2048)
        const int64_t items = int64_t(bytes) / (kRows * row_bytes);
        for (int per_sm : {1, 2, 3}) {
            const int grid = sms * per_sm;
            const double rows = run<false>(w, items, row_bytes, grid, sink);
            const double tiled = run<true>(w, items, row_bytes, grid, sink);
            std::printf("rows %4lld B apart, 64 B a stage      %6d %10.3f %10.0f\n", (long long)row_bytes, grid, rows,
                        double(bytes) / (rows * 1e6));
            std::printf("tiled, 8 KiB a stage contiguous      %6d %10.3f %10.0f\n", grid, tiled,
                        double(bytes) / (tiled * 1e6));
        }
    }
    // The warpgroup kernel's scheme over the whole 1 GiB: rows, tiled, tiled with rotated blocks; idle stages and
    // stages that spend ~1 us (1,800 cycles) on arithmetic.
    std::printf(
        "\nwarpgroup-like passes over %.2f GB: 128-row tiles, 256-column stages, a ring of 4, a CTA barrier a "
        "stage\n",
        double(bytes) / 1e9);
    std::printf("%-40s %6s %10s %10s\n", "layout, cycles a stage", "CTAs", "ms", "GB/s");
    for (int64_t spin : {0, 1800})
        for (int per_sm : {1, 2}) {
            const int grid = sms * per_sm;
            auto wide = [&](const char* layout, double ms) {
                std::printf("%-24s %15lld %6d %10.3f %10.0f\n", layout, (long long)spin, grid, ms,
                            double(bytes) / (ms * 1e6));
            };
            wide("rows", run_wide<0>(w, bytes, 2048, grid, spin, sink));
            wide("tiled", run_wide<1>(w, bytes, 2048, grid, spin, sink));
            wide("tiled, rotated blocks", run_wide<2>(w, bytes, 2048, grid, spin, sink));
        }

    // A batch-1 step's w1 and w3: 12 matrices of 2048 rows x 2048 bytes (48 MiB), eight copies.
    const size_t b1_bytes = size_t(12) * 2048 * 2048;
    const int copies = 8;
    if (size_t(copies) * b1_bytes > bytes) return 1;
    std::printf("\nbatch-1 sized: 48 MiB a run (six experts' w1 + w3), rows 2 KiB, each run the next of %d copies\n",
                copies);
    std::printf("%-34s %6s %10s %10s\n", "tile rows / contiguous group", "CTAs", "us", "GB/s");
    // The eight copies' rows in 64 x 64-byte boxes, no swizzle (the reads here do not care).
    const CUtensorMap map = dsv4::cuda::byte_matrix_map(w, int64_t(copies) * int64_t(b1_bytes) / 2048, 2048, kRingTile,
                                                        kStageBytes, false);
    for (int per_sm : {2, 3, 4}) {
        const int grid = sms * per_sm;
        auto row = [&](const char* tile, int group, double ms) {
            std::printf("%s tiles, groups of %3d rows    %6d %10.1f %10.0f\n", tile, group, grid, ms * 1e3,
                        double(b1_bytes) / (ms * 1e6));
        };
        row("32-row", 1, run_grouped<32, 8, 1>(w, b1_bytes, copies, 2048, grid, sink));
        row("32-row", 32, run_grouped<32, 8, 32>(w, b1_bytes, copies, 2048, grid, sink));
        row("64-row", 1, run_grouped<64, 8, 1>(w, b1_bytes, copies, 2048, grid, sink));
        row("64-row", 16, run_grouped<64, 8, 16>(w, b1_bytes, copies, 2048, grid, sink));
        row("64-row", 32, run_grouped<64, 8, 32>(w, b1_bytes, copies, 2048, grid, sink));
        row("64-row", 64, run_grouped<64, 8, 64>(w, b1_bytes, copies, 2048, grid, sink));
        auto ring = [&](const char* who, double ms) {
            std::printf("64-row ring of 8 stages, %-10s %6d %10.1f %10.0f\n", who, grid, ms * 1e3,
                        double(b1_bytes) / (ms * 1e6));
        };
        ring("all copy", run_ring<false>(w, b1_bytes, copies, 2048, grid, sink));
        ring("one warp", run_ring<true>(w, b1_bytes, copies, 2048, grid, sink));
        ring("bulk rows", run_bulk<false>(w, b1_bytes, copies, 2048, grid, sink));
        ring("bulk 4 KiB", run_bulk<true>(w, b1_bytes, copies, 2048, grid, sink));
        ring("cp.async+mbar", run_bulk<false, true>(w, b1_bytes, copies, 2048, grid, sink));
        ring("tensor 2D", run_bulk<false, false, true>(w, b1_bytes, copies, 2048, grid, sink, map));
    }
    return 0;
}
