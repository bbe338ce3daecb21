// Decode-step kernels side by side with the versions they replace, at V4-Flash shapes: hc_pre / hc_head (split vs
// per-token path) over token counts, moe_gemm (compact grid vs the former strided grid) for the routed w1/w3/w2 at
// one token with the plain (tile 1) and hash-layer (tile 8) slot bounds, moe_combine, and the small bf16
// dense_linear calls at one token (staged kernel; bits checked against the tiled fallback), sparse attention (one
// cluster per token vs three kernels) at decode token counts. Each case is captured as a CUDA graph of 20 launches
// and replayed (median of 7 replays, per launch), so the times are kernel time, not launch cost; weights rotate over
// copies larger than L2 (8 routings of 6 experts for moe_gemm, 64 mixer copies), as in a decode step, where other
// layers' weights evict them. Correctness: the two versions' outputs compared bitwise for every rotation; the
// tensor-core routed experts at batches 1-256 (mma) print a hash of their outputs instead, to compare builds; at
// prefill sizes (prefill) the warp-MMA and warpgroup kernels side by side, bitwise. The GPU draws (draw: sample_rows
// at V4's vocabulary, 1-256 rows) are timed launch by launch (they overwrite their input; tests/gpu/sampling_test.cpp
// checks their ids).
// The attention's inputs (inputs): attention_inputs against the launches it replaces, bitwise.
// Usage: dsv4_bench_decode_kernels [hc|moe|mma|mma1|mma=N|rows|prefill|prefill_nvfp4|draw|combine|dense|attn|
//                                   attn_prefill|inputs]
//                                  [--chosen-only]
// (default: all; numbers recorded in docs/perf.md; mma1, mma=N: the routed experts at batch 1 or N alone, for a
// profiler; rows: the decode passes' row tiles side by side, bitwise; attn_prefill: the sequential sparse attention
// of an 8k prefill piece at V4-Flash's three slot counts, with a hash of its output to compare builds;
// --chosen-only: prefill and prefill_nvfp4 time only the launcher's choice, not the warp-MMA reference beside it,
// which took half of those modes' device time: for A/B calls of two builds, whose hashes then compare their bits;
// tests/gpu's MoeGemm.* compare the kernels bitwise)
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/attention_inputs/attention_inputs.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/compressor/kv_entry_layout.h"
#include "kernels/cuda/dense_linear/dense_linear.h"
#include "kernels/cuda/expert_layout/expert_layout.h"
#include "kernels/cuda/mhc/mhc.h"
#include "kernels/cuda/moe_expert/moe_expert.h"
#include "kernels/cuda/moe_gemm/moe_gemm.h"
#include "kernels/cuda/moe_gemm/moe_gemm_kernels.h"
#include "kernels/cuda/quant/quant.h"
#include "kernels/cuda/rms_norm/rms_norm.h"
#include "kernels/cuda/rope/rope.h"
#include "kernels/cuda/sampling/sampling.h"
#include "kernels/cuda/smoke/device_info.h"
#include "kernels/cuda/sparse_attention/sparse_attention.h"

using namespace dsv4::cuda;

namespace {

constexpr int kLaunches = 20, kReplays = 7;
bool g_chosen_only = false;  // --chosen-only

// The fills' counter-based hash of an element index.
__device__ __forceinline__ uint32_t index_hash(size_t i, uint32_t seed) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    return h ^ (h >> 13);
}
__global__ void fill_bytes(uint8_t* p, size_t n, uint32_t seed, uint8_t avoid_mask, uint8_t avoid) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint8_t b = uint8_t(index_hash(i, seed));
        if ((b & avoid_mask) == avoid) b ^= 1;
        p[i] = b;
    }
}
// Scale codes lo .. lo + span - 1, hashed from the index (span <= 256), shifted left by `shift`: E8M0 codes as they
// are, or (shift 3) e4m3 powers of two from their exponent fields.
__global__ void fill_codes(uint8_t* p, size_t n, uint32_t seed, uint32_t lo, uint32_t span, int shift = 0) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        p[i] = uint8_t((lo + index_hash(i, seed) % span) << shift);
}
// Normal-ish f32 values (sum of four uniforms) times `scale`.
__global__ void fill_f32(float* p, size_t n, uint32_t seed, float scale) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        float s = 0.0f;
        for (uint32_t r = 0; r < 4; ++r) {
            uint32_t h = (uint32_t(i) * 4u + r) * 2654435761u ^ seed;
            h ^= h >> 16;
            h *= 0x7feb352du;
            h ^= h >> 15;
            s += float(h >> 8) * (1.0f / 16777216.0f) - 0.5f;
        }
        p[i] = s * scale;
    }
}
__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        p[i] = __float2bfloat16(float(int(h % 2001) - 1000) * (1.0f / 256));
    }
}
// Packed main cache entries (kv_entry_layout.h) with finite values: e4m3 codes that are not NaN, scales 2^-8..2^-1,
// rope values in [-4, 4).
__global__ void fill_entries(uint8_t* kv, size_t entries, int entry_bytes, int rope_offset, int scale_offset,
                             int scale_end, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < entries * entry_bytes;
         i += size_t(gridDim.x) * blockDim.x) {
        const uint32_t h = index_hash(i, seed);
        const int at = int(i % entry_bytes);
        uint8_t b = uint8_t(h);
        if (at < rope_offset && (b & 0x7F) == 0x7F) b ^= 1;  // e4m3 NaN
        if (at >= rope_offset && at < scale_offset && at % 2) b = uint8_t(0x3F + (h >> 8) % 3 - 1) | (b & 0x80);
        if (at >= scale_offset) b = at < scale_end ? uint8_t(119 + (h >> 8) % 8) : 0;
        kv[i] = b;
    }
}

template <typename T>
void check_launch(T) {
    DSV4_CUDA_CHECK(cudaGetLastError());
}

// FNV-1a over the bytes of 16-bit device buffers, in order, after the device is idle: two builds' outputs compared.
template <typename T>
uint64_t device_bytes_hash(const DeviceBuffer<T>& b, uint64_t hash = 1469598103934665603ull) {
    static_assert(sizeof(T) == 2);
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint8_t> host(b.size() * 2);
    DSV4_CUDA_CHECK(cudaMemcpy(host.data(), b.get(), host.size(), cudaMemcpyDeviceToHost));
    for (uint8_t byte : host) hash = (hash ^ byte) * 1099511628211ull;
    return hash;
}
uint64_t device_bytes_hash(const std::vector<const DeviceBuffer<__nv_bfloat16>*>& buffers) {
    uint64_t hash = 1469598103934665603ull;
    for (const DeviceBuffer<__nv_bfloat16>* b : buffers) hash = device_bytes_hash(*b, hash);
    return hash;
}

// moe_combine's parameters over device buffers (routed rows [tokens k, dim], shared and out [tokens, dim]).
MoeCombineParams combine_params(const DeviceBuffer<__nv_bfloat16>& routed, const DeviceBuffer<int32_t>& experts,
                                const DeviceBuffer<int32_t>& slots, const DeviceBuffer<__nv_bfloat16>& shared,
                                DeviceBuffer<__nv_bfloat16>& out, int64_t tokens, int64_t dim, int64_t k) {
    MoeCombineParams p;
    p.routed = routed.get();
    p.experts = experts.get();
    p.assignment_slot = slots.get();
    p.shared = shared.get();
    p.out = out.get();
    p.tokens = tokens;
    p.dim = dim;
    p.k = int32_t(k);
    return p;
}

// Median per-launch time in microseconds of `launch(i, stream)` for i = 0..kLaunches-1, captured as one graph.
double graph_us(const std::function<void(int, cudaStream_t)>& launch) {
    // The cases fill and upload their inputs on the legacy stream, which does not order work on a non-blocking one.
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    Stream stream;
    launch(0, stream.get());  // one-time host work (attributes, occupancy) outside the capture
    stream.synchronize();
    cudaGraph_t graph = nullptr;
    DSV4_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kLaunches; ++i) launch(i, stream.get());
    DSV4_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &graph));
    cudaGraphExec_t exec = nullptr;
    DSV4_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    DSV4_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
    std::vector<double> us;
    for (int r = 0; r < kReplays; ++r) {
        Event start, stop;
        start.record(stream.get());
        DSV4_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
        stop.record(stream.get());
        stream.synchronize();
        us.push_back(double(stop.elapsed_since(start)) * 1e3 / kLaunches);
    }
    DSV4_CUDA_CHECK(cudaGraphExecDestroy(exec));
    DSV4_CUDA_CHECK(cudaGraphDestroy(graph));
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
}

template <typename T>
bool same_bits(const DeviceBuffer<T>& a, const DeviceBuffer<T>& b) {
    std::vector<T> ha(a.size()), hb(b.size());
    a.download(ha.data(), ha.size());
    b.download(hb.data(), hb.size());
    return std::memcmp(ha.data(), hb.data(), ha.size() * sizeof(T)) == 0;
}

int failures = 0;
const char* verdict(bool same) {
    if (!same) ++failures;
    return same ? "identical" : "DIFFER";
}

const char* path_name(detail::HcMixPath path) {
    switch (path) {
        case detail::HcMixPath::kSplit:
            return "split";
        case detail::HcMixPath::kTiled:
            return "tiled";
        case detail::HcMixPath::kRowGroups:
            return "rows";
        default:
            return "token";
    }
}

// hc_pre (head = false) or hc_head at n_hc = 4, dim = 4096, `tokens` tokens.
void bench_hc(bool head, int64_t tokens) {
    const int64_t n = 4, dim = 4096, width = n * dim, rows = head ? n : hc_pre_mix_size(n);
    const int copies = 64;  // 64 x 1.5 MB of mixers > L2
    DeviceBuffer<float> fn{size_t(copies * rows * width)}, base{size_t(rows)}, scale{3};
    fill_f32<<<1024, 256>>>(fn.get(), fn.size(), 1, 2.0f / 128.0f);
    fill_f32<<<1, 64>>>(base.get(), base.size(), 2, 1.0f);
    fill_f32<<<1, 64>>>(scale.get(), scale.size(), 3, 1.0f);
    DeviceBuffer<__nv_bfloat16> streams{size_t(tokens * width)}, x_split{size_t(tokens * dim)},
        x_token(size_t(tokens * dim)), x_tiled(size_t(tokens * dim)), x_rows(size_t(tokens * dim));
    fill_bf16<<<256, 256>>>(streams.get(), streams.size(), 4);
    DeviceBuffer<float> mix_split{size_t(tokens * rows)}, mix_token{size_t(tokens * rows)},
        mix_tiled{size_t(tokens * rows)}, mix_rows{size_t(tokens * rows)};
    check_launch(0);
    auto params = [&](int i, __nv_bfloat16* x, float* mix) {
        HcMixParams p;
        p.streams = streams.get();
        p.fn = fn.get() + size_t(i % copies) * size_t(rows * width);
        p.base = base.get();
        p.scale = scale.get();
        p.x_out = x;
        p.mix = mix;
        p.tokens = tokens;
        p.n_hc = n;
        p.dim = dim;
        p.sinkhorn_iters = 20;
        p.hc_eps = 1e-6f;
        p.norm_eps = 1e-6f;
        return p;
    };
    const double split = graph_us([&](int i, cudaStream_t s) {
        detail::launch_hc_mix(params(i, x_split.get(), mix_split.get()), head, s, detail::HcMixPath::kSplit);
    });
    const double per_token = graph_us([&](int i, cudaStream_t s) {
        detail::launch_hc_mix(params(i, x_token.get(), mix_token.get()), head, s, detail::HcMixPath::kPerToken);
    });
    const double tiled = graph_us([&](int i, cudaStream_t s) {
        detail::launch_hc_mix(params(i, x_tiled.get(), mix_tiled.get()), head, s, detail::HcMixPath::kTiled);
    });
    // The row groups (hc_pre only).
    const double row_groups = head ? 0.0 : graph_us([&](int i, cudaStream_t s) {
        detail::launch_hc_mix(params(i, x_rows.get(), mix_rows.get()), head, s, detail::HcMixPath::kRowGroups);
    });
    // hc_pre_norm where the split kernel runs the norm too (hc_pre of up to 16 tokens): the fused launch as the model
    // makes it (weighted, quantized for the FP8 GEMMs), beside hc_pre then rms_norm, the two launches it replaces.
    const bool fused = !head && tokens <= 16;
    DeviceBuffer<float> norm_weight{size_t(dim)}, mix_norm{size_t(tokens * rows)}, mix_two{size_t(tokens * rows)},
        scales_norm{size_t(tokens * dim / 128)}, scales_two{size_t(tokens * dim / 128)};
    DeviceBuffer<__nv_bfloat16> x_norm(size_t(tokens * dim)), x_two(size_t(tokens * dim));
    DeviceBuffer<uint8_t> q_norm{size_t(tokens * dim)}, q_two{size_t(tokens * dim)};
    fill_f32<<<16, 256>>>(norm_weight.get(), norm_weight.size(), 5, 1.0f);
    auto norm_of = [&](__nv_bfloat16* x, uint8_t* q, float* q_scales) {
        return RmsNormParams{x, norm_weight.get(), x, tokens, dim, dim, dim, 1e-6f, q, q_scales};
    };
    const RmsNormParams fused_norm = norm_of(x_norm.get(), q_norm.get(), scales_norm.get()),
                        two_norm = norm_of(x_two.get(), q_two.get(), scales_two.get());
    const double norm_fused = !fused ? 0.0 : graph_us([&](int i, cudaStream_t s) {
        detail::launch_hc_mix(params(i, x_norm.get(), mix_norm.get()), false, s, detail::HcMixPath::kSplit,
                              &fused_norm);
    });
    const double norm_two = !fused ? 0.0 : graph_us([&](int i, cudaStream_t s) {
        detail::launch_hc_mix(params(i, x_two.get(), mix_two.get()), false, s, detail::HcMixPath::kSplit);
        rms_norm(two_norm, s);
    });
    bool same = true;
    for (int i = 0; i < 3; ++i) {
        if (fused) {
            detail::launch_hc_mix(params(i, x_norm.get(), mix_norm.get()), false, nullptr, detail::HcMixPath::kSplit,
                                  &fused_norm);
            detail::launch_hc_mix(params(i, x_two.get(), mix_two.get()), false, nullptr, detail::HcMixPath::kSplit);
            rms_norm(two_norm, nullptr);
        }
        detail::launch_hc_mix(params(i, x_split.get(), mix_split.get()), head, nullptr, detail::HcMixPath::kSplit);
        detail::launch_hc_mix(params(i, x_token.get(), mix_token.get()), head, nullptr, detail::HcMixPath::kPerToken);
        detail::launch_hc_mix(params(i, x_tiled.get(), mix_tiled.get()), head, nullptr, detail::HcMixPath::kTiled);
        if (!head)
            detail::launch_hc_mix(params(i, x_rows.get(), mix_rows.get()), head, nullptr,
                                  detail::HcMixPath::kRowGroups);
        DSV4_CUDA_CHECK(cudaDeviceSynchronize());
        same = same && same_bits(x_split, x_token) && same_bits(mix_split, mix_token) && same_bits(x_tiled, x_token) &&
               same_bits(mix_tiled, mix_token) &&
               (head || (same_bits(x_rows, x_token) && same_bits(mix_rows, mix_token))) &&
               (!fused || (same_bits(x_norm, x_two) && same_bits(mix_norm, mix_two) && same_bits(q_norm, q_two) &&
                           same_bits(scales_norm, scales_two)));
    }
    const double bytes = double(rows * width * 4) + double(tokens) * double(width * 2 + dim * 2 + rows * 4);
    std::printf("%-8s %6lld %12.2f %12.2f %10.2f %10.2f %10.2f %10.2f %8.1fx %9.0f   %-8s %s\n",
                head ? "hc_head" : "hc_pre", (long long)tokens, per_token, split, tiled, row_groups, norm_fused,
                norm_two, per_token / split, bytes / (split * 1e-6) / 1e9,
                path_name(detail::hc_mix_auto_path(tokens, head)), verdict(same));
}

// The MoE's mHC post-mix (hc_post_of_moe: the combine of 6 routed rows and the shared row, then the post-mix of 4
// streams) at V4-Flash's width, us per launch and GB/s over the bytes it must move; the hash of the streams out and the
// combined rows tells two builds' bits apart (bench only: tests/gpu/mhc_test.cpp checks them).
void bench_hc_post(int64_t tokens) {
    const int64_t n = 4, dim = 4096, k = 6, mix_size = hc_pre_mix_size(n), slots = tokens * k;
    DeviceBuffer<__nv_bfloat16> streams{size_t(tokens * n * dim)}, out{size_t(tokens * n * dim)},
        routed{size_t(slots * dim)}, shared{size_t(tokens * dim)}, combined{size_t(tokens * dim)};
    fill_bf16<<<256, 256>>>(streams.get(), streams.size(), 11);
    fill_bf16<<<256, 256>>>(routed.get(), routed.size(), 12);
    fill_bf16<<<256, 256>>>(shared.get(), shared.size(), 13);
    DeviceBuffer<float> mix{size_t(tokens * mix_size)};
    fill_f32<<<64, 256>>>(mix.get(), mix.size(), 14, 1.0f);
    std::vector<int32_t> experts(static_cast<size_t>(slots)), assigned(static_cast<size_t>(slots));
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t j = 0; j < k; ++j) {  // distinct experts a token, not in ascending order; slot = t k + j
            experts[size_t(t * k + j)] = int32_t((t * 7 + (k - j) * 37) % 256);
            assigned[size_t(t * k + j)] = int32_t(t * k + j);
        }
    DeviceBuffer<int32_t> experts_d{experts.size()}, assigned_d{assigned.size()};
    experts_d.upload(experts.data(), experts.size());
    assigned_d.upload(assigned.data(), assigned.size());
    check_launch(0);
    const HcPostParams post{nullptr, streams.get(), mix.get(), out.get(), tokens, n, dim};
    const MoeCombineParams combine = combine_params(routed, experts_d, assigned_d, shared, combined, tokens, dim, k);
    const double us = graph_us([&](int, cudaStream_t s) { hc_post_of_moe(post, combine, s); });
    hc_post_of_moe(post, combine, nullptr);
    const uint64_t hash = device_bytes_hash({&out, &combined});
    // Streams in and out, the routed and shared rows in, the combined row out (bf16); mix and routing are small.
    const double bytes = double(tokens) * double(dim) * 2.0 * double(2 * n + k + 2);
    std::printf("%-8s %6lld %10.2f %9.0f   %016llx\n", "hc_post", (long long)tokens, us, bytes / (us * 1e-6) / 1e9,
                (unsigned long long)hash);
}

// Routed experts at one token: 6 of 256 MXFP4 experts [n, k], 8 routings rotated (> L2), slot bound 1 or 6.
void bench_moe(const char* name, int64_t n, int64_t k, int slot_bound) {
    const int64_t experts = 256, active = 6;
    constexpr int kRoutings = 8;
    DeviceBuffer<uint8_t> w{size_t(experts * n * k / 2)}, scale{size_t(experts * n * k / 32)};
    fill_bytes<<<1024, 256>>>(w.get(), w.size(), 5, 0, 1);
    fill_bytes<<<1024, 256>>>(scale.get(), scale.size(), 6, 0xFF, 0xFF);  // no 0xFF (E8M0 NaN)
    DeviceBuffer<uint8_t> a{size_t(k)};
    fill_bytes<<<64, 256>>>(a.get(), a.size(), 7, 0x7F, 0x7F);  // no e4m3 NaN
    DeviceBuffer<float> a_scale{size_t((k + 127) / 128)};
    std::vector<float> ones(a_scale.size(), 1.0f / 64);
    a_scale.upload(ones.data(), ones.size());
    std::vector<DeviceBuffer<int32_t>> offsets;
    for (int v = 0; v < kRoutings; ++v) {  // experts spread over the whole range, as a router picks them
        std::vector<int32_t> o(size_t(experts + 1), 0);
        for (int64_t e = 0; e < experts; ++e)
            o[size_t(e + 1)] = o[size_t(e)] + ((e * 7 + v * 5) % 43 == 0 && o[size_t(e)] < active ? 1 : 0);
        offsets.emplace_back(o.size());
        offsets.back().upload(o.data(), o.size());
    }
    std::vector<int32_t> rows(size_t(active), 0);
    DeviceBuffer<int32_t> row_index{rows.size()};
    row_index.upload(rows.data(), rows.size());
    DeviceBuffer<__nv_bfloat16> y_new{size_t(active * n)}, y_old{size_t(active * n)};
    check_launch(0);
    auto params = [&](int i, __nv_bfloat16* y, MoeGemmPath path = MoeGemmPath::kCudaCore) {
        MoeGemmParams p;
        p.path = path;
        p.a = a.get();
        p.a_scale = a_scale.get();
        p.row_index = row_index.get();
        p.expert_offsets = offsets[size_t(i % kRoutings)].get();
        p.w = w.get();
        p.w_scale = scale.get();
        p.y = y;
        p.experts = experts;
        p.n = n;
        p.k = k;
        p.max_slots_per_expert = slot_bound;
        return p;
    };
    const MoeGemmConfig config = moe_gemm_config(experts, n, k, slot_bound);
    const double compact = graph_us([&](int i, cudaStream_t s) { moe_gemm(params(i, y_new.get()), s); });
    const double strided = graph_us([&](int i, cudaStream_t s) {
        DSV4_CUDA_CHECK(detail::launch_moe_gemm_strided(params(i, y_old.get()), config, s));
    });
    const double mma = graph_us([&](int i, cudaStream_t s) { moe_gemm(params(i, y_new.get(), MoeGemmPath::kMma), s); });
    bool same = true;
    for (int i = 0; i < kRoutings; ++i) {
        moe_gemm(params(i, y_new.get()), nullptr);
        DSV4_CUDA_CHECK(detail::launch_moe_gemm_strided(params(i, y_old.get()), config, nullptr));
        DSV4_CUDA_CHECK(cudaDeviceSynchronize());
        same = same && same_bits(y_new, y_old);
    }
    const double bytes = double(active) * double(n * k / 2 + n * k / 32) + double(k) + 2.0 * double(active * n);
    std::printf("%-8s %6lld %6lld %5d %12.2f %12.2f %8.1fx %9.0f   %s   tensor cores %.2f us (%.0f GB/s)\n", name,
                (long long)n, (long long)k, config.m_tile, strided, compact, strided / compact,
                bytes / (compact * 1e-6) / 1e9, verdict(same), mma, bytes / (mma * 1e-6) / 1e9);
}

// The tensor-core routed experts at a batch: `tokens` tokens each routed to 6 distinct experts of 256 (a fixed hash,
// 8 routings rotated so no routing's weights stay in L2), w1 and w3 in one pair launch ([2048, 4096] each) and w2
// ([4096, 2048]) as the executor launches them. Bytes: the active experts' weights and scales (each read once), the
// gathered activations and the outputs. `hash`: FNV-1a of routing 0's outputs, to compare two builds' bits.
// variants: the prefill kernels side by side; row_tiles: the warp-MMA kernel's row tiles side by side (decode
// passes); topk: experts per token (3 of 256: one of two expert-parallel GPUs' share of a V4-Flash token's 6 of 256).
// variants: the warp-MMA kernel against the launcher's choice; single_slot: the kernel's passes for any slots against
// its single-slot passes (batch 1); row_tiles: its row tiles. nvfp4: the experts as NVIDIA's NVFP4 release holds them
// (e4m3 scales a 16 columns, powers of two as its lossless cast from MXFP4 gives, and a power-of-two global).
void bench_moe_mma(int64_t tokens, bool variants = false, bool row_tiles = false, int64_t topk = 6,
                   bool single_slot = false, bool nvfp4 = false) {
    const int64_t experts = 256, dim = 4096, inter = 2048, block = nvfp4 ? 16 : 32;
    constexpr int kRoutings = 8;
    DeviceBuffer<uint8_t> w1{size_t(experts * inter * dim / 2)}, w3{w1.size()}, w2{w1.size()};
    DeviceBuffer<uint8_t> s1{size_t(experts * inter * dim / block)}, s3{s1.size()}, s2{s1.size()};
    uint32_t seed = 20;
    for (DeviceBuffer<uint8_t>* b : {&w1, &w3, &w2}) fill_bytes<<<1024, 256>>>(b->get(), b->size(), seed++, 0, 1);
    // Checkpoint-like block scales, 2^-9 .. 2^-3 (codes 118-124, as tests/gpu's random_fp4_weight draws them; dsv4
    // bench's experts have one code a matrix, ~120): until 2026-12-04 these were random bytes, whose codes above 240
    // sent ~38 % of the warpgroup kernel's scale words down its slow path and kept its wide passes from ever folding.
    // NVFP4: e4m3 2^-3 .. 2^3 (exponent fields 4-10) under a global of 2^-6, the same products.
    for (DeviceBuffer<uint8_t>* b : {&s1, &s3, &s2}) {
        if (nvfp4)
            fill_codes<<<1024, 256>>>(b->get(), b->size(), seed++, 4, 7, 3);
        else
            fill_codes<<<1024, 256>>>(b->get(), b->size(), seed++, 118, 7);
    }
    std::vector<float> globals(size_t(experts), 0x1p-6f);
    DeviceBuffer<float> global{globals.size()};
    global.upload(globals.data(), globals.size());
    DeviceBuffer<uint8_t> x{size_t(tokens * dim)}, h{size_t(tokens * topk * inter)};
    fill_bytes<<<256, 256>>>(x.get(), x.size(), seed++, 0x7F, 0x7F);
    fill_bytes<<<256, 256>>>(h.get(), h.size(), seed++, 0x7F, 0x7F);
    DeviceBuffer<float> x_scale{size_t(tokens * dim / 128)}, h_scale{size_t(tokens * topk * inter / 128)};
    std::vector<float> sixty_fourth(x_scale.size() + h_scale.size(), 1.0f / 64);
    x_scale.upload(sixty_fourth.data(), x_scale.size());
    h_scale.upload(sixty_fourth.data(), h_scale.size());
    std::vector<DeviceBuffer<int32_t>> offsets, row_index;
    std::vector<int64_t> active(kRoutings, 0);
    int max_slots = 1;
    for (int v = 0; v < kRoutings; ++v) {
        std::vector<std::vector<int32_t>> by_expert(static_cast<size_t>(experts));
        for (int64_t t = 0; t < tokens; ++t)
            for (int64_t j = 0, picked = 0; picked < topk; ++j) {
                const uint32_t e = uint32_t(uint64_t(t * 7919 + j * 104729 + v * 15485863) * 2654435761u) >> 24;
                if (!by_expert[e].empty() && by_expert[e].back() == int32_t(t)) continue;  // picked already
                by_expert[e].push_back(int32_t(t));
                ++picked;
            }
        std::vector<int32_t> o{0}, r;
        for (const auto& rows : by_expert) {
            r.insert(r.end(), rows.begin(), rows.end());
            o.push_back(int32_t(r.size()));
            active[size_t(v)] += rows.empty() ? 0 : 1;
            max_slots = std::max(max_slots, int(rows.size()));
        }
        offsets.emplace_back(o.size());
        offsets.back().upload(o.data(), o.size());
        row_index.emplace_back(r.size());
        row_index.back().upload(r.data(), r.size());
    }
    double mean_active = 0;
    for (int64_t a : active) mean_active += double(a) / kRoutings;
    const int64_t slots = tokens * topk;
    DeviceBuffer<__nv_bfloat16> y1{size_t(slots * inter)}, y3{y1.size()}, y2{size_t(slots * dim)};
    // single_slot: the experts also in the tiled layout (kernels/cuda/expert_layout), for the bulk-copy passes.
    DeviceBuffer<uint8_t> w1t{single_slot ? w1.size() : 0}, w3t{w1t.size()}, w2t{w1t.size()};
    if (single_slot)
        for (auto [from, to] : {std::pair{&w1, &w1t}, std::pair{&w3, &w3t}, std::pair{&w2, &w2t}}) {
            DSV4_CUDA_CHECK(cudaMemcpy(to->get(), from->get(), from->size(), cudaMemcpyDeviceToDevice));
            const int64_t k_half = (from == &w2 ? inter : dim) / 2;
            repack_expert_tiles(to->get(), int64_t(from->size()) / k_half, k_half, nullptr);
        }
    check_launch(0);
    auto params = [&](int i, bool down, bool tiled = false) {
        MoeGemmParams p;
        p.a = down ? h.get() : x.get();
        p.a_scale = down ? h_scale.get() : x_scale.get();
        p.row_index = down ? nullptr : row_index[size_t(i % kRoutings)].get();
        p.expert_offsets = offsets[size_t(i % kRoutings)].get();
        p.w = down ? (tiled ? w2t : w2).get() : (tiled ? w1t : w1).get();
        p.w_scale = down ? s2.get() : s1.get();
        p.y = down ? y2.get() : y1.get();
        p.format = nvfp4 ? ExpertFormat::kNvfp4 : ExpertFormat::kMxfp4;
        p.w_global = nvfp4 ? global.get() : nullptr;
        if (!down) p.second = {(tiled ? w3t : w3).get(), s3.get(), nvfp4 ? global.get() : nullptr, y3.get()};
        p.tiled = tiled;
        p.experts = experts;
        p.n = down ? dim : inter;
        p.k = down ? inter : dim;
        p.max_slots_per_expert = int(tokens);
        p.expected_slots_per_expert = int((2 * slots + experts - 1) / experts);
        p.expected_active_experts = int(std::lround(mean_active));
        return p;
    };
    const double matrix_bytes = double(inter * dim / 2 + inter * dim / block);
    auto outputs_hash = [&](bool down) { return down ? device_bytes_hash({&y2}) : device_bytes_hash({&y1, &y3}); };
    for (bool down : {false, true}) {
        const double bytes = mean_active * matrix_bytes * (down ? 1 : 2) +
                             double(slots) * double(down ? inter + dim * 2 : dim + 2 * inter * 2);
        if (row_tiles) {
            uint64_t reference = 0;
            for (int row_groups : {4, 2, 1}) {
                auto launch = [&](int i, cudaStream_t s) {
                    DSV4_CUDA_CHECK(
                        detail::launch_moe_mma(params(i, down), detail::MoeMmaVariant::kWarpMma, s, row_groups));
                };
                const double us = graph_us(launch);
                launch(0, nullptr);
                const uint64_t hash = outputs_hash(down);
                if (row_groups == 4)
                    reference = hash;
                else if (hash != reference)
                    ++failures;
                std::printf("%-8s %6lld %4lld %8.1f %5d rows %10.2f %9.0f   %016llx %s\n", down ? "w2" : "w1+w3",
                            (long long)tokens, (long long)topk, mean_active, 16 * row_groups, us,
                            bytes / (us * 1e-6) / 1e9, (unsigned long long)hash, hash == reference ? "" : "DIFFERS");
            }
            continue;
        }
        if (!variants) {
            const double us = graph_us([&](int i, cudaStream_t s) { moe_gemm(params(i, down), s); });
            moe_gemm(params(0, down), nullptr);
            const uint64_t hash = outputs_hash(down);
            std::printf("%-8s %6lld %8.1f %8d %10.2f %9.0f   %016llx\n", down ? "w2" : "w1+w3", (long long)tokens,
                        mean_active, max_slots, us, bytes / (us * 1e-6) / 1e9, (unsigned long long)hash);
            continue;
        }
        // Prefill passes: the warp-MMA kernel against the launcher's choice (the warpgroup kernel on sm_90), outputs
        // compared bitwise (hashes of routing 0's outputs).
        const double flops = 2.0 * double(slots) * double(inter) * double(dim) * (down ? 1 : 2);
        uint64_t reference = 0;
        using V = detail::MoeMmaVariant;
        const std::vector<std::pair<V, bool>> runs =  // (variant, tiled weights); the first is the reference
            single_slot
                ? std::vector<std::pair<V, bool>>{{V::kAllSlots, false}, {V::kWarpMma, false}, {V::kWarpMma, true}}
            : g_chosen_only ? std::vector<std::pair<V, bool>>{{V::kChosen, false}}
                            : std::vector<std::pair<V, bool>>{{V::kWarpMma, false}, {V::kChosen, false}};
        for (auto [v, tiled] : runs) {
            const double us = graph_us(
                [&](int i, cudaStream_t s) { DSV4_CUDA_CHECK(detail::launch_moe_mma(params(i, down, tiled), v, s)); });
            DSV4_CUDA_CHECK(detail::launch_moe_mma(params(0, down, tiled), v, nullptr));
            const uint64_t hash = outputs_hash(down);
            if (v == runs.front().first && !tiled)
                reference = hash;
            else if (hash != reference)
                ++failures;
            const char* name = v == V::kAllSlots                              ? "any-slot passes"
                               : single_slot && tiled                         ? "single-slot passes, tiled (bulk)"
                               : single_slot                                  ? "single-slot passes"
                               : v == V::kWarpMma                             ? "warp mma"
                               : detail::moe_mma_takes_wgmma(params(0, down)) ? "wgmma"
                                                                              : "chosen (warp mma)";
            std::printf("%-8s %6lld %8.1f %8d %10.2f %9.0f %9.1f   %016llx %s %s\n", down ? "w2" : "w1+w3",
                        (long long)tokens, mean_active, max_slots, us, bytes / (us * 1e-6) / 1e9,
                        flops / (us * 1e-6) / 1e12, (unsigned long long)hash, name, hash == reference ? "" : "DIFFERS");
        }
    }
}

void bench_combine() {
    const int64_t dim = 4096, k = 6;
    DeviceBuffer<__nv_bfloat16> routed{size_t(k * dim)}, shared{size_t(dim)}, out{size_t(dim)};
    fill_bf16<<<64, 256>>>(routed.get(), routed.size(), 9);
    fill_bf16<<<64, 256>>>(shared.get(), shared.size(), 10);
    const std::vector<int32_t> experts = {200, 3, 77, 150, 9, 31}, slots = {5, 0, 3, 4, 1, 2};
    DeviceBuffer<int32_t> d_experts{experts.size()}, d_slots{slots.size()};
    d_experts.upload(experts.data(), experts.size());
    d_slots.upload(slots.data(), slots.size());
    check_launch(0);
    const MoeCombineParams p = combine_params(routed, d_experts, d_slots, shared, out, 1, dim, k);
    const double us = graph_us([&](int, cudaStream_t s) { moe_combine(p, s); });
    std::printf("moe_combine, 1 token, dim 4096, k 6: %.2f us (CPU-reference check: tests/gpu/moe_expert_test)\n", us);
}

// The attention's inputs of `tokens` rows at V4-Flash shapes (64 heads of 512, rope 64): attention_inputs against
// the launches it replaces (head_rms_norm, apply_ropes on q and kv, pack_kv_entries into the chunk's entries and,
// with `ring`, into ring entries), each of those also timed alone; outputs compared bitwise from the same inputs.
void bench_inputs(int64_t tokens, bool ring) {
    const int64_t heads = 64, d = 512, rope = 64, entry = kv_entry_layout(d, rope).bytes;
    DeviceBuffer<__nv_bfloat16> q0{size_t(tokens * heads * d)}, kv0{size_t(tokens * d)};
    fill_bf16<<<256, 256>>>(q0.get(), q0.size(), 21);
    fill_bf16<<<256, 256>>>(kv0.get(), kv0.size(), 22);
    DeviceBuffer<__nv_bfloat16> q{q0.size()}, kv{kv0.size()}, q_ref{q0.size()}, kv_ref{kv0.size()};
    DeviceBuffer<uint8_t> entries{size_t(tokens * entry)}, ring_entries{size_t(2 * tokens * entry)};
    DeviceBuffer<uint8_t> entries_ref{entries.size()}, ring_ref{ring_entries.size()};
    std::vector<float> freq(size_t(rope / 2));
    for (size_t i = 0; i < freq.size(); ++i) freq[i] = std::pow(10000.0f, -2.0f * float(i) / float(rope));
    std::vector<int32_t> positions, slots;
    for (int64_t t = 0; t < tokens; ++t) {
        positions.push_back(int32_t(4096 + 37 * t));
        slots.push_back(int32_t(2 * t + 1));
    }
    DeviceBuffer<float> d_freq{freq.size()};
    DeviceBuffer<int32_t> d_pos{positions.size()}, d_slots{slots.size()};
    d_freq.upload(freq.data(), freq.size());
    d_pos.upload(positions.data(), positions.size());
    d_slots.upload(slots.data(), slots.size());
    check_launch(0);
    auto fused = [&](__nv_bfloat16* qp, __nv_bfloat16* kvp, uint8_t* e, uint8_t* r, cudaStream_t s) {
        AttentionInputsParams p;
        p.q = qp;
        p.kv = kvp;
        p.inv_freq = d_freq.get();
        p.positions = d_pos.get();
        p.entries = e;
        p.ring = ring ? r : nullptr;
        p.ring_slots = ring ? d_slots.get() : nullptr;
        p.tokens = tokens;
        p.heads = heads;
        p.head_dim = d;
        p.rope_dim = rope;
        p.eps = 1e-6f;
        attention_inputs(p, s);
    };
    auto norm = [&](__nv_bfloat16* qp, cudaStream_t s) { head_rms_norm({qp, tokens, heads, d, heads * d, 1e-6f}, s); };
    auto ropes = [&](__nv_bfloat16* qp, __nv_bfloat16* kvp, cudaStream_t s) {
        const ApplyRopeParams r[] = {{qp, d_freq.get(), d_pos.get(), tokens, heads, d, rope, heads * d, false},
                                     {kvp, d_freq.get(), d_pos.get(), tokens, 1, d, rope, d, false}};
        apply_ropes(r, s);
    };
    auto packs = [&](__nv_bfloat16* kvp, uint8_t* e, uint8_t* r, cudaStream_t s) {
        pack_kv_entries({kvp, e, nullptr, tokens, d, rope, d}, s);
        if (ring) pack_kv_entries({kvp, r, d_slots.get(), tokens, d, rope, d}, s);
    };
    // Bits: both from the same inputs.
    auto reset = [&](DeviceBuffer<__nv_bfloat16>& qd, DeviceBuffer<__nv_bfloat16>& kvd, DeviceBuffer<uint8_t>& e,
                     DeviceBuffer<uint8_t>& r) {
        DSV4_CUDA_CHECK(cudaMemcpy(qd.get(), q0.get(), q0.bytes(), cudaMemcpyDeviceToDevice));
        DSV4_CUDA_CHECK(cudaMemcpy(kvd.get(), kv0.get(), kv0.bytes(), cudaMemcpyDeviceToDevice));
        DSV4_CUDA_CHECK(cudaMemset(e.get(), 0xA5, e.bytes()));
        DSV4_CUDA_CHECK(cudaMemset(r.get(), 0x5A, r.bytes()));
    };
    reset(q, kv, entries, ring_entries);
    reset(q_ref, kv_ref, entries_ref, ring_ref);
    fused(q.get(), kv.get(), entries.get(), ring_entries.get(), nullptr);
    norm(q_ref.get(), nullptr);
    ropes(q_ref.get(), kv_ref.get(), nullptr);
    packs(kv_ref.get(), entries_ref.get(), ring_ref.get(), nullptr);
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    auto same = [](const auto& a, const auto& b) {
        std::vector<uint8_t> x(a.bytes()), y(b.bytes());
        DSV4_CUDA_CHECK(cudaMemcpy(x.data(), a.get(), x.size(), cudaMemcpyDeviceToHost));
        DSV4_CUDA_CHECK(cudaMemcpy(y.data(), b.get(), y.size(), cudaMemcpyDeviceToHost));
        return x == y;
    };
    const bool bits = same(q, q_ref) && same(kv, kv_ref) && same(entries, entries_ref) && same(ring_entries, ring_ref);
    if (!bits) ++failures;
    // Times (in place, so the launches repeat on their own outputs: the same work each time).
    const double norm_us = graph_us([&](int, cudaStream_t s) { norm(q_ref.get(), s); });
    const double rope_us = graph_us([&](int, cudaStream_t s) { ropes(q_ref.get(), kv_ref.get(), s); });
    const double pack_us =
        graph_us([&](int, cudaStream_t s) { packs(kv_ref.get(), entries_ref.get(), ring_ref.get(), s); });
    const double separate_us = graph_us([&](int, cudaStream_t s) {
        norm(q_ref.get(), s);
        ropes(q_ref.get(), kv_ref.get(), s);
        packs(kv_ref.get(), entries_ref.get(), ring_ref.get(), s);
    });
    const double fused_us =
        graph_us([&](int, cudaStream_t s) { fused(q.get(), kv.get(), entries.get(), ring_entries.get(), s); });
    const double bytes = 2.0 * double(q0.bytes() + kv0.bytes()) + double(tokens * entry) * (ring ? 2 : 1);
    std::printf("%-6s %6lld %5s %9.1f %9.1f %9.1f %11.1f %9.1f %9.0f   %s\n", "inputs", (long long)tokens,
                ring ? "yes" : "no", norm_us, rope_us, pack_us, separate_us, fused_us, bytes / (fused_us * 1e-6) / 1e9,
                bits ? "same" : "DIFFER");
}

// Sparse attention of `tokens` decode tokens over `slots` cache entries each (V4-Flash: 64 heads of 512, rope 64;
// CSA 128 + 512 slots, HCA 128 + context / 128), the splits combined by one cluster per token (kCluster) against
// the three kernels through the workspace (kKernels). Entries are spread over 75 MB (> L2) and each launch reads
// another of 8 index sets.
void bench_attention(int32_t tokens, int32_t slots, bool prefill = false) {
    const int32_t heads = 64, d = 512, rope = 64, sets = 8;
    const MainEntryLayout layout = main_entry_layout(d, rope);
    const size_t entries = size_t(75) * 1000 * 1000 / size_t(layout.bytes());
    DeviceBuffer<uint8_t> kv{entries * size_t(layout.bytes())};
    fill_entries<<<1024, 256>>>(kv.get(), entries, int(layout.bytes()), int(layout.rope_offset()),
                                int(layout.scale_offset()), int(layout.scale_offset() + layout.scales()), 13);
    DeviceBuffer<__nv_bfloat16> q{size_t(tokens) * heads * d};
    fill_bf16<<<256, 256>>>(q.get(), q.size(), 14);
    std::vector<int32_t> idx(size_t(sets) * tokens * slots);
    uint32_t h = 15;
    for (int32_t& v : idx) {
        h = h * 1664525u + 1013904223u;
        v = int32_t(h % uint32_t(entries));
    }
    DeviceBuffer<int32_t> d_idx{idx.size()};
    d_idx.upload(idx.data(), idx.size());
    DeviceBuffer<float> sink{size_t(heads)};
    fill_f32<<<1, 64>>>(sink.get(), sink.size(), 16, 1.0f);
    const SparseAttentionPlan plan = plan_sparse_attention(heads, d, slots);
    DeviceBuffer<float> ws{size_t(std::max<int64_t>(1, tokens * plan.workspace_floats_per_token))};
    DeviceBuffer<uint16_t> out_cluster{size_t(tokens) * heads * d}, out_kernels{size_t(tokens) * heads * d};
    check_launch(0);
    auto params = [&](int i, SparseAttentionCombine combine, uint16_t* out) {
        SparseAttentionParams p;
        p.q = reinterpret_cast<const uint16_t*>(q.get());
        p.kv = kv.get();
        p.indices = d_idx.get() + size_t(i % sets) * tokens * slots;
        p.sink = sink.get();
        p.out = out;
        p.workspace = ws.get();
        p.workspace_floats = tokens * plan.workspace_floats_per_token;
        p.tokens = tokens;
        p.heads = heads;
        p.head_dim = d;
        p.rope_dim = rope;
        p.slots = slots;
        p.splits = plan.splits;
        p.scale = 1.0f / std::sqrt(float(d));
        p.combine = combine;
        return p;
    };
    // The three kernels, then the cluster with 64 and with 16 heads per CTA, each against the kernels' bits.
    const double kernels_us = graph_us([&](int i, cudaStream_t s) {
        sparse_attention(params(i, SparseAttentionCombine::kKernels, out_kernels.get()), s);
    });
    sparse_attention(params(0, SparseAttentionCombine::kKernels, out_kernels.get()), nullptr);
    if (prefill) {  // a prefill piece: the kernels against the sequential kernel (no workspace)
        const double sequential_us = graph_us([&](int i, cudaStream_t s) {
            sparse_attention(params(i, SparseAttentionCombine::kSequential, out_cluster.get()), s);
        });
        sparse_attention(params(0, SparseAttentionCombine::kSequential, out_cluster.get()), nullptr);
        DSV4_CUDA_CHECK(cudaDeviceSynchronize());
        const bool auto_sequential =
            detail::sparse_attention_takes_sequential(params(0, SparseAttentionCombine::kAuto, out_cluster.get()));
        std::printf("%-6d %6d %6d %11s %12.2f %12.2f %12s   %-9s %s %016llx\n", tokens, slots, plan.splits, "-",
                    kernels_us, sequential_us, "(sequential)", auto_sequential ? "sequential" : "kernels",
                    verdict(same_bits(out_cluster, out_kernels)),
                    (unsigned long long)device_bytes_hash(out_cluster));
        return;
    }
    double cluster_us[2] = {0.0, 0.0};
    int64_t resident[2] = {0, 0};
    bool same = true;
    for (int v = 0; v < 2; ++v) {
        const int32_t heads = v == 0 ? 64 : kNarrowClusterHeads;
        auto cluster = [&](int i) {
            SparseAttentionParams p = params(i, SparseAttentionCombine::kCluster, out_cluster.get());
            p.cluster_heads = heads;
            return p;
        };
        resident[v] = detail::sparse_attention_resident_clusters(cluster(0), heads);
        if (!resident[v]) continue;
        cluster_us[v] = graph_us([&](int i, cudaStream_t s) { sparse_attention(cluster(i), s); });
        sparse_attention(cluster(0), nullptr);
        DSV4_CUDA_CHECK(cudaDeviceSynchronize());
        same = same && same_bits(out_cluster, out_kernels);
    }
    const int32_t automatic =
        detail::sparse_attention_cluster_heads(params(0, SparseAttentionCombine::kAuto, out_cluster.get()));
    char choice[16];
    std::snprintf(choice, sizeof choice, automatic ? "cluster%d" : "kernels", automatic);
    std::printf("%-6d %6d %6d %5lld/%-5lld %12.2f %12.2f %12.2f   %-9s %s\n", tokens, slots, plan.splits,
                (long long)resident[0], (long long)resident[1], kernels_us, cluster_us[0], cluster_us[1], choice,
                verdict(same));
}

// dense_linear, bf16 W [n, 4096], one token: the router gate / compressor / indexer projections of a decode step.
void bench_dense(int64_t n) {
    const int64_t k = 4096;
    const size_t w_bytes = size_t(n * k * 2);
    const int copies = int(std::max<size_t>(1, (size_t(512) << 20) / w_bytes));
    DeviceBuffer<__nv_bfloat16> w{size_t(copies) * size_t(n * k)}, x{size_t(k)};
    fill_bf16<<<1024, 256>>>(w.get(), w.size(), 11);
    fill_bf16<<<16, 256>>>(x.get(), x.size(), 12);
    DeviceBuffer<float> y{size_t(n)}, y_ref{size_t(n)};
    check_launch(0);
    auto params = [&](int i, float* out) {
        DenseLinearParams p;
        p.type = DenseType::kBF16;
        p.x = x.get();
        p.w = w.get() + size_t(i % copies) * size_t(n * k);
        p.y = out;
        p.m = 1;
        p.n = n;
        p.k = k;
        p.ldx = k;
        p.ldw = k;
        p.ldy = n;
        return p;
    };
    const double us = graph_us([&](int i, cudaStream_t s) { dense_linear(params(i, y.get()), s); });
    dense_linear(params(0, y.get()), nullptr);
    detail::launch_dense_linear_tiled(params(0, y_ref.get()), nullptr);
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    std::printf("dense_linear bf16 N %5lld K 4096 M 1: %7.2f us, %6.0f GB/s   staged vs tiled %s\n", (long long)n, us,
                double(w_bytes) / (us * 1e-6) / 1e9, verdict(same_bits(y, y_ref)));
}

// sample_rows at V4's vocabulary: `rows` draws from model-like logits (N(0, 2.5) and a few far above). The kernel
// overwrites its rows with the weights, so each timed launch gets a fresh copy (made before its start event); one
// launch per timing, median of 9.
void bench_draw(int64_t rows, const char* mode) {
    constexpr int64_t V = 129280;
    const size_t n = size_t(rows * V);
    DeviceBuffer<float> pristine(n), logits(n);
    fill_f32<<<1024, 256>>>(pristine.get(), n, 7u, 5.0f);  // ~N(0, 2.9)
    std::vector<RowDraw> host(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
        RowDraw& d = host[size_t(r)];
        d.greedy = std::strcmp(mode, "greedy") == 0;
        d.temperature = 1.0f;
        d.min_p = std::strcmp(mode, "min_p 0.05") == 0 ? 0.05f : 0.0f;
        d.u = double(r + 1) / double(rows + 2);
        d.logits_row = int32_t(r);
    }
    DeviceBuffer<RowDraw> draws(host.size());
    draws.upload(host.data(), host.size());
    DeviceBuffer<int32_t> ids(static_cast<size_t>(rows));
    DeviceBuffer<uint8_t> scratch(sample_rows_scratch_bytes(rows, V));
    Stream stream;
    std::vector<double> us;
    for (int i = 0; i < 10; ++i) {
        DSV4_CUDA_CHECK(
            cudaMemcpyAsync(logits.get(), pristine.get(), n * sizeof(float), cudaMemcpyDeviceToDevice, stream.get()));
        Event start, stop;
        start.record(stream.get());
        SampleParams p;
        p.logits = logits.get();
        p.draws = draws.get();
        p.ids = ids.get();
        p.scratch = scratch.get();
        p.draws_count = rows;
        p.vocab = V;
        sample_rows(p, stream.get());
        stop.record(stream.get());
        stream.synchronize();
        if (i > 0) us.push_back(double(stop.elapsed_since(start)) * 1e3);
    }
    std::sort(us.begin(), us.end());
    std::printf("%-6s %6lld %-12s %10.1f\n", "draw", (long long)rows, mode, us[us.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
    const std::string only = argc > 1 ? argv[1] : "";
    for (int i = 2; i < argc; ++i) {
        if (std::strcmp(argv[i], "--chosen-only") != 0) {
            std::fprintf(stderr, "dsv4_bench_decode_kernels: unknown option '%s'\n", argv[i]);
            return 2;
        }
        g_chosen_only = true;
    }
    auto run = [&](const char* part) { return only.empty() || only == part; };
    std::printf("device: %s\n", describe_device(0).c_str());
    {
        const size_t copy_bytes = size_t(1) << 30;
        DeviceBuffer<uint8_t> src{copy_bytes}, dst{copy_bytes};
        const double us = graph_us([&](int, cudaStream_t s) {
            DSV4_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), copy_bytes, cudaMemcpyDeviceToDevice, s));
        });
        std::printf("limit: device-to-device copy %.0f GB/s (read + write of 1 GiB)\n", 2.0 * copy_bytes / us / 1e3);
    }
    if (run("hc")) {
        std::printf("\n%-8s %6s %12s %12s %10s %10s %10s %10s %9s %9s   %-8s %s\n", "op", "tokens", "per-token us",
                    "split us", "tiled us", "rows us", "+norm us", "2 launch", "speedup", "GB/s", "auto", "bits");
        for (bool head : {false, true})
            for (int64_t tokens : {1, 2, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 8192}) bench_hc(head, tokens);
        std::printf("\n%-8s %6s %10s %9s   %s\n", "post-mix", "tokens", "us", "GB/s", "hash of streams out, f");
        for (int64_t tokens : {1, 16, 64, 256, 2048, 8192}) bench_hc_post(tokens);
    }
    if (run("moe")) {
        std::printf("\n%-8s %6s %6s %5s %12s %12s %9s %9s   %s\n", "moe", "N", "K", "tile", "strided us", "compact us",
                    "speedup", "GB/s", "bits");
        bench_moe("w1/w3", 2048, 4096, 1);
        bench_moe("w2", 4096, 2048, 1);
        bench_moe("w1 hash", 2048, 4096, 6);
        bench_moe("w2 hash", 4096, 2048, 6);
    }
    if (run("mma")) {
        std::printf("\n%-8s %6s %8s %8s %10s %9s   %s\n", "routed", "tokens", "experts", "max", "us", "GB/s",
                    "hash of routing 0's outputs");
        for (int64_t tokens : {1, 16, 64, 256}) bench_moe_mma(tokens);
    }
    if (only == "mma1") bench_moe_mma(1);  // batch 1 alone (for a profiler: w1+w3's launches, then w2's)
    if (only.rfind("mma=", 0) == 0) bench_moe_mma(std::stoll(only.substr(4)));  // any batch alone, likewise
    if (only == "single") {                // batch 1: the passes for any slots against the single-slot ones (same bits)
        std::printf("\n%-8s %6s %8s %8s %10s %9s %9s   %s\n", "routed", "tokens", "experts", "max", "us", "GB/s",
                    "TFLOP/s", "hash of routing 0's outputs, kernel");
        for (int64_t topk : {6, 3}) bench_moe_mma(1, true, false, topk, true);
    }
    if (only == "rows") {
        std::printf("\n%-8s %6s %4s %8s %10s %10s %9s   %s\n", "routed", "tokens", "topk", "experts", "row tile", "us",
                    "GB/s", "hash of routing 0's outputs");
        for (int64_t tokens : {1, 2, 4, 16})
            for (int64_t topk : {6, 3}) bench_moe_mma(tokens, false, true, topk);
    }
    if (run("prefill")) {
        std::printf("\n%-8s %6s %8s %8s %10s %9s %9s   %s\n", "routed", "tokens", "experts", "max", "us", "GB/s",
                    "TFLOP/s", "hash of routing 0's outputs, kernel");
        for (int64_t tokens : {16, 64, 256, 512, 2048, 8192}) bench_moe_mma(tokens, true);
    }
    if (run("prefill_nvfp4")) {
        std::printf("\n%-8s %6s %8s %8s %10s %9s %9s   %s (NVFP4 experts)\n", "routed", "tokens", "experts", "max", "us",
                    "GB/s", "TFLOP/s", "hash of routing 0's outputs, kernel");
        for (int64_t tokens : {256, 2048, 8192}) bench_moe_mma(tokens, true, false, 6, false, true);
    }
    if (run("draw")) {
        std::printf("\n%-6s %6s %-12s %10s\n", "draw", "rows", "mode", "us");
        for (int64_t rows : {1, 64, 256})
            for (const char* mode : {"greedy", "T 1", "min_p 0.05"}) bench_draw(rows, mode);
    }
    if (run("combine")) {
        std::printf("\n");
        bench_combine();
    }
    if (run("dense")) {
        std::printf("\n");
        for (int64_t n : {64, 512, 1024, 2048}) bench_dense(n);
    }
    if (run("inputs")) {
        std::printf("\n%-6s %6s %5s %9s %9s %9s %11s %9s %9s   %s\n", "inputs", "tokens", "ring", "norm us", "rope us",
                    "pack us", "separate us", "fused us", "GB/s", "bits");
        for (int64_t tokens : {1, 16, 64, 256})
            for (bool ring : {false, true}) bench_inputs(tokens, ring);
        for (int64_t tokens : {1024, 8192}) bench_inputs(tokens, false);
    }
    if (run("attn")) {
        std::printf("\n%-6s %6s %6s %11s %12s %12s %12s   %-9s %s\n", "attn", "slots", "splits", "resident",
                    "kernels us", "cluster64 us", "cluster16 us", "auto", "bits");
        for (int32_t tokens : {1, 2, 4, 8, 16, 64})
            for (int32_t slots : {160, 640}) bench_attention(tokens, slots);
        for (int32_t tokens : {64, 128, 256, 1024, 8192})
            for (int32_t slots : {160, 640}) bench_attention(tokens, slots, true);
    }
    if (only == "attn_prefill") {  // SWA (the window), HCA at 8k (window + 64 entries), CSA (window + top-512)
        std::printf("\n%-6s %6s %6s %11s %12s %12s %12s   %-9s %s\n", "attn", "slots", "splits", "resident",
                    "kernels us", "sequent. us", "", "auto", "bits, hash of the sequential's output");
        for (int32_t slots : {128, 192, 640}) bench_attention(8192, slots, true);
    }
    std::printf("\n%s\n", failures ? "BITWISE CHECK FAILED" : "all bitwise checks passed");
    return failures ? 1 : 0;
}
