// The sparse attention kernels' shared parts (sparse_attention.cu, sparse_attention_cluster.cu,
// sparse_attention_sequential.cu): the CTA's shared memory, q and key-tile loads (FP8 entries dequantized to bf16),
// the tile's logits, probabilities and P V on mma.sync, the per-split max and P V passes, the combine's division.
// Included by those three files only (everything here is in an anonymous namespace: each kernel file compiles its
// own copy). Tested through tests/gpu/sparse_attention_test.cpp.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/ieee_quotient.h"
#include "kernels/cuda/common/cp_async.cuh"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/compressor/entry_codec.cuh"
#include "kernels/cuda/compressor/kv_entry_layout.h"
#include "kernels/cuda/rope/rope_math.cuh"
#include "kernels/cuda/sparse_attention/sparse_attention.h"

namespace dsv4::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kTile = 64;         // keys per tile
constexpr int kHeadsPerCta = 64;  // 4 m-tiles of 16 heads (the kernels; the cluster also runs CTAs of 16 heads)
constexpr int kPStride = kTile + 8;

// ---- The probability rounding point of `model` numerics (docs/numerics.md, "sparse attention") ----
// P = exp(l - M) with M the max logit over ALL of the token's keys (cpu::sparse_attention_head), rounded to bf16
// for the P.V product; the denominator sums the unrounded P in f32, then adds exp(sink - M). If the CPU reference
// moves to the official kernel's running block max, this function and the M it receives are the places to change.
__device__ __forceinline__ float probability(float logit, float row_max) { return expf(logit - row_max); }
__device__ __forceinline__ float probability_for_pv(float p) { return entry::round_bf16(p); }
// ---------------------------------------------------------------------------------------------------------------

// A CTA's shared memory for kHeads heads (64: 4 m-tiles; 16: one) of head_dim kHeadDim.
template <int kHeadDim, int kHeads = kHeadsPerCta>
struct Smem {
    static constexpr int kStride = kHeadDim + 8;  // bf16 elements per row: conflict-free fragment loads/ldmatrix
    __nv_bfloat16 q[kHeads * kStride];
    __nv_bfloat16 k[kTile * kStride];
    __nv_bfloat16 p[kHeads * kPStride];
    int valid[kTile];
    float row_max[kHeads];
    float partial[2][kHeads];
    float split_max[kHeads];  // the fused path's exchange: this split's max logits and denominators
    float split_den[kHeads];
};

// P V's warps: kHeads / 16 m-tiles times 8 / (kHeads / 16) slices of head_dim, pv_tiles() 8-dim n-tiles each.
template <int kHeadDim, int kHeads>
constexpr int pv_tiles() {
    return kHeadDim / (8 / (kHeads / 16)) / 8;
}

// The raw entries of a key tile (load_k_tile) follow Smem in the dynamic shared memory.
template <int kHeadDim, int kHeads = kHeadsPerCta>
constexpr int kStagedOffset = (int(sizeof(Smem<kHeadDim, kHeads>)) + 15) / 16 * 16;
template <int kHeadDim, int kHeads = kHeadsPerCta>
int smem_bytes(int32_t rope_dim) {
    return kStagedOffset<kHeadDim, kHeads> + kTile * int(main_entry_layout(kHeadDim, rope_dim).bytes());
}

__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t& r0, uint32_t& r1, const __nv_bfloat16* row) {
    const uint32_t addr = uint32_t(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(addr));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// A thread's outputs of one head (o[nt][2 r] and o[nt][2 r + 1] of every n-tile: its two columns of each) over the
// head's denominator, as bf16 pairs at out + nt * 8 + 2 * tig; zeros for a head without keys (`empty`). The
// numerators' range is checked once (quotients_exact: the denominator is at least 1, the max key's own term), so that
// every quotient is quotient_corrected's, three instructions with the division's bits where a division took ~15 with
// its branches; a row holding a zero, tiny, huge or infinite numerator divides. kRangeOnce false: every output
// divided (the sequential kernel's general splits, whose spilled sums the range check would read once more).
template <int kNTiles, bool kRangeOnce = true>
__device__ __forceinline__ void store_head_row(uint16_t* out, const float (&o)[kNTiles][4], int r, float denom,
                                               bool empty, int tig) {
    if constexpr (kRangeOnce) {
        float lo = INFINITY, hi = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
            lo = fminf(lo, fminf(fabsf(o[nt][2 * r]), fabsf(o[nt][2 * r + 1])));
            hi = fmaxf(hi, fmaxf(fabsf(o[nt][2 * r]), fabsf(o[nt][2 * r + 1])));
        }
        const float inv = 1.0f / denom;
        if (!empty && quotients_exact(lo, hi, denom)) {
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt)
                *reinterpret_cast<uint32_t*>(out + nt * 8 + 2 * tig) = pack_bf16(
                    quotient_corrected(o[nt][2 * r], denom, inv), quotient_corrected(o[nt][2 * r + 1], denom, inv));
            return;
        }
    }
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
        *reinterpret_cast<uint32_t*>(out + nt * 8 + 2 * tig) =
            empty ? 0u : pack_bf16(o[nt][2 * r] / denom, o[nt][2 * r + 1] / denom);
}

// Issues the copies of the CTA's q rows into s.q (heads past heads_here are zeros); they land with the first key
// tile's (load_k_tile waits for every copy the thread issued), so q's round trip overlaps the tile's.
template <int kHeadDim, int kHeads>
__device__ void load_q(Smem<kHeadDim, kHeads>& s, const SparseAttentionParams& p, int token, int head0,
                       int heads_here) {
    constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per head
    const uint4* src = reinterpret_cast<const uint4*>(p.q + (int64_t(token) * p.heads + head0) * kHeadDim);
    for (int i = threadIdx.x; i < kHeads * kChunks; i += kThreads) {
        const int h = i / kChunks, c = i % kChunks;
        __nv_bfloat16* dst = &s.q[h * Smem<kHeadDim, kHeads>::kStride + c * 8];
        if (h < heads_here)
            cp_async16(smem_addr(dst), src + int64_t(h) * kChunks + c);
        else
            *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
}

// The landed raw entries of a tile ([64, entry bytes] at `raw`) as bf16 keys in s.k, zeros where valid[r] < 0. The
// caller has waited for the copies and passed a barrier. A warp takes rows warp, warp + 8, ... (so a row's validity
// is uniform in it), its lanes 8-dim chunks of the row: the nope part's 8 codes and their block's scale, or the rope
// part's 8 bf16 values (the tensor-core path's rope_dim is a multiple of 8: head_dim % 16 == 0, nope % 8 == 0).
template <int kHeadDim, int kHeads>
__device__ void dequant_k_tile(Smem<kHeadDim, kHeads>& s, const uint8_t* raw, const int* valid,
                               const SparseAttentionParams& p) {
    constexpr int kChunks = kHeadDim / 8, kRounds = (kChunks + 31) / 32;
    const MainEntryLayout layout = main_entry_layout(kHeadDim, p.rope_dim);
    const int nope_chunks = int(layout.nope) / 8, entry_bytes = int(layout.bytes());
    const uint8_t* scales = raw + layout.scale_offset();
    const uint8_t* rope = raw + layout.rope_offset() - nope_chunks * 16;  // + 16 c: chunk c of the rope part
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int r = warp; r < kTile; r += kThreads / 32) {
        __nv_bfloat16* dst = &s.k[r * Smem<kHeadDim, kHeads>::kStride];
        const int at = r * entry_bytes;
        const bool live = valid[r] >= 0;
#pragma unroll
        for (int round = 0; round < kRounds; ++round) {
            const int c = lane + 32 * round;
            if (kChunks % 32 != 0 && c >= kChunks) break;
            uint4 out = make_uint4(0, 0, 0, 0);
            if (live && c < nope_chunks) {
                const uint2 codes = *reinterpret_cast<const uint2*>(raw + at + c * 8);
                const float scale = entry::e8m0_to_f32(scales[at + (c * 8) / kKvScaleBlock]);
                uint32_t packed[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const uint32_t word = (j < 2 ? codes.x : codes.y) >> ((j % 2) * 16);
                    const float2 v = entry::e4m3x2_to_f32x2(uint16_t(word));
                    packed[j] = pack_bf16(v.x * scale, v.y * scale);
                }
                out = make_uint4(packed[0], packed[1], packed[2], packed[3]);
            } else if (live) {
                const uint2 lo = *reinterpret_cast<const uint2*>(rope + at + c * 16);
                const uint2 hi = *reinterpret_cast<const uint2*>(rope + at + c * 16 + 8);
                out = make_uint4(lo.x, lo.y, hi.x, hi.y);
            }
            *reinterpret_cast<uint4*>(dst + c * 8) = out;
        }
    }
}

// kOneTileSplits (every split one tile: V4's plan): a split's P V from zero is added to the token's sum as soon as it
// is computed, in chunks of at most 16 n-tiles (each n-tile's MMA chain over the tile's keys is the same), so the
// split's O never takes a whole head slice of registers beside the sum (at head_dim 512 both would spill).
// Dequantizes the entries of slots [slot0, slot0 + 64) (those < slot_end and != -1) into s.k as bf16; other rows
// are zeros and marked invalid. The raw entries first land in `staged` ([64, entry bytes]) by 8-byte copies (an
// entry is a multiple of 8 bytes, not of 16), all in flight at once, then are decoded from shared memory.
// `in_flight()` runs between the copies' issue and the wait for them: work of the caller's that their round trip hides.
struct NoWork {
    __device__ void operator()() const {}
};
template <int kHeadDim, int kHeads, class InFlight = NoWork>
__device__ void load_k_tile(Smem<kHeadDim, kHeads>& s, uint8_t* staged, const SparseAttentionParams& p, int token,
                            int slot0, int slot_end, const InFlight& in_flight = {}) {
    const int entry_bytes = int(main_entry_layout(kHeadDim, p.rope_dim).bytes()), words = entry_bytes / 8;
    const int32_t* idx = p.indices + int64_t(token) * p.slots;
    if (threadIdx.x < kTile) {
        const int slot = slot0 + threadIdx.x;
        s.valid[threadIdx.x] = slot < slot_end ? idx[slot] : -1;
    }
    __syncthreads();
    // A warp per row (8 rows each), its lanes along the row: no division by the runtime entry size.
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int r = warp; r < kTile; r += kThreads / 32) {
        const int row = s.valid[r];
        if (row < 0) continue;
        for (int w = lane; w < words; w += 32)
            cp_async8(smem_addr(staged + r * entry_bytes + w * 8), p.kv + int64_t(row) * entry_bytes + w * 8);
    }
    in_flight();
    cp_async_wait_all();
    __syncthreads();
    dequant_k_tile(s, staged, s.valid, p);
    __syncthreads();
}

// The QK warps' roles: heads 16 mt.. of the CTA's kHeads, slot half `half` of the tile (32 keys); warps whose mt is
// past the heads compute no logits. With 64 heads every warp has a role (mt = warp % 4). With 16 only mt 0 has one,
// and its two warps are 0 and 1 rather than 0 and 4: warp w issues on scheduler w % 4, and warps 0 and 4 put the
// tile's 256 QK MMAs on one scheduler's tensor pipe, where 0 and 1 split them over two. The same MMAs in each warp, so
// the same bits.
template <int kHeads>
struct QkWarp {
    static constexpr bool kOneTile = kHeads / 16 == 1;  // one m-tile of heads: two warps have a role
    int mt, half;
    __device__ QkWarp() {
        const int warp = int(threadIdx.x / 32);
        mt = kOneTile ? warp / 2 : warp % 4;
        half = kOneTile ? warp % 2 : warp / 4;
    }
};

// S for heads 16 mt.. (rows g, g + 8) x slots 32 nh + 8 nt + 2 tig (+1) of the tile, as logits l = (q . k) * scale,
// -inf for invalid slots.
template <int kHeadDim, int kHeads>
__device__ void tile_logits(const Smem<kHeadDim, kHeads>& s, float scale, int mt, int nh, float (&l)[4][4]) {
    constexpr int kS = Smem<kHeadDim, kHeads>::kStride;
    const int lane = threadIdx.x % 32, tig = lane % 4;
    for (int nt = 0; nt < 4; ++nt)
        for (int i = 0; i < 4; ++i) l[nt][i] = 0.0f;
    // ldmatrix rows: A's matrices are heads 0-7 | 8-15 x dims 0-7 | 8-15 of the k-step (lanes 8-15: heads 8..,
    // lanes 16-31: dims 8..); each of B's two loads is n-tiles 2j, 2j + 1 x dims 0-7 | 8-15 (lanes 8-15: dims 8..,
    // lanes 16-31: the second n-tile's keys). The same fragments as 32-bit loads, in a third of the instructions.
    const __nv_bfloat16* qa = &s.q[(mt * 16 + lane % 8 + (lane / 8 % 2) * 8) * kS + (lane / 16) * 8];
    const __nv_bfloat16* kb = &s.k[(nh * 32 + lane % 8 + (lane / 16) * 8) * kS + (lane / 8 % 2) * 8];
#pragma unroll 4
    for (int k0 = 0; k0 < kHeadDim; k0 += 16) {
        uint32_t a[4], b01[4], b23[4];
        ldmatrix_x4(a, qa + k0);
        ldmatrix_x4(b01, kb + k0);
        ldmatrix_x4(b23, kb + 16 * kS + k0);
        mma_16816(l[0], a, b01[0], b01[1]);
        mma_16816(l[1], a, b01[2], b01[3]);
        mma_16816(l[2], a, b23[0], b23[1]);
        mma_16816(l[3], a, b23[2], b23[3]);
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
        const int slot = nh * 32 + nt * 8 + 2 * tig;
        const bool v0 = s.valid[slot] >= 0, v1 = s.valid[slot + 1] >= 0;
        l[nt][0] = v0 ? l[nt][0] * scale : -INFINITY;
        l[nt][1] = v1 ? l[nt][1] * scale : -INFINITY;
        l[nt][2] = v0 ? l[nt][2] * scale : -INFINITY;
        l[nt][3] = v1 ? l[nt][3] * scale : -INFINITY;
    }
}

struct SplitRange {
    int begin, end;
};
__device__ __forceinline__ SplitRange split_range(const SparseAttentionParams& p, int split) {
    const int tiles = (p.slots + kTile - 1) / kTile;
    const int per_split = (tiles + p.splits - 1) / p.splits;
    const int begin = min(split * per_split * kTile, p.slots);
    return SplitRange{begin, min(begin + per_split * kTile, p.slots)};
}

// Per-head max logit over slots [begin, end) into s.row_max (every warp pair combines its two slot halves). `last`
// receives this warp's logits of the range's last tile (pass 2 reuses them when the range is one tile). `in_flight`:
// load_k_tile's, each tile.
template <int kHeadDim, int kHeads, class InFlight = NoWork>
__device__ __forceinline__ void range_max(Smem<kHeadDim, kHeads>& s, uint8_t* staged, const SparseAttentionParams& p,
                                          int token, SplitRange range, int m_tiles, float (&last)[4][4],
                                          const InFlight& in_flight = {}) {
    const int lane = threadIdx.x % 32;
    const QkWarp<kHeads> qk;
    const int mt = qk.mt, nh = qk.half;
    float m0 = -INFINITY, m1 = -INFINITY;
    for (int slot0 = range.begin; slot0 < range.end; slot0 += kTile) {
        __syncthreads();
        load_k_tile(s, staged, p, token, slot0, range.end, in_flight);
        if (mt < m_tiles) {
            float(&l)[4][4] = last;
            tile_logits(s, p.scale, mt, nh, l);
            for (int nt = 0; nt < 4; ++nt) {
                m0 = fmaxf(m0, fmaxf(l[nt][0], l[nt][1]));
                m1 = fmaxf(m1, fmaxf(l[nt][2], l[nt][3]));
            }
        }
    }
    for (int o = 1; o < 4; o <<= 1) {
        m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, o));
        m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, o));
    }
    if (lane % 4 == 0 && mt * 16 < kHeads) {
        s.partial[nh][mt * 16 + lane / 4] = m0;
        s.partial[nh][mt * 16 + lane / 4 + 8] = m1;
    }
    __syncthreads();
    if (threadIdx.x < kHeads) s.row_max[threadIdx.x] = fmaxf(s.partial[0][threadIdx.x], s.partial[1][threadIdx.x]);
    __syncthreads();
}

// Workspace carve-up (splits > 1): max and denominator [tokens, splits, heads], O [tokens, splits, heads, d].
// Whether any slot of the token's range is filled (block-uniform). An empty split contributes max -inf, denominator
// +0 and P.V +0 exactly (P = exp(-inf) = 0 against zeroed keys), so it writes those without the work: a token's
// trailing empty tiles (HCA before its entries exist, or a graph sized for the longest context) cost a check.
__device__ bool range_has_keys(const SparseAttentionParams& p, int token, SplitRange range) {
    const int32_t* idx = p.indices + int64_t(token) * p.slots;
    int any = 0;
    for (int j = range.begin + int(threadIdx.x); j < range.end; j += kThreads) any |= idx[j] >= 0;
    return __syncthreads_or(any) != 0;
}

struct Workspace {
    float *max, *denom, *o;
};
__device__ __forceinline__ Workspace workspace(const SparseAttentionParams& p) {
    const int64_t rows = int64_t(p.tokens) * p.splits * p.heads;
    return Workspace{p.workspace, p.workspace + rows, p.workspace + 2 * rows};
}

// Pass 2 over slots [range.begin, range.end) with the max logits in s.row_max: this warp's P V accumulators
// (heads 16 pv_mt + g, + 8 x its slice of head_dim: PvWarp) and its partial denominators (QK warp (mt, half):
// unrounded P, lanes of a quad apart). `tile_loaded`: the range is one tile, s.k still holds it and `logits` are
// this warp's logits of it (the fused path's max pass computed them with the same code). Each output is the same
// chain of MMAs over the tile's keys whichever warp computes it.
template <int kHeads>
struct PvWarp {
    static constexpr int kMTiles = kHeads / 16, kSlices = 8 / kMTiles;
    int mt, slice;
    __device__ PvWarp() : mt(int(threadIdx.x / 32) % kMTiles), slice(int(threadIdx.x / 32) / kMTiles) {}
};
// A tile's P for warp (mt, half): the probabilities of its 16 x 32 logits `l` against the rows' bases (their maxima,
// +inf where a row has no key), added to the denominators of rows g and g + 8 and stored to s.p as bf16 for P V.
// range_pv's and the sequential kernel's one definition.
template <int kHeadDim, int kHeads>
__device__ __forceinline__ void tile_probabilities(Smem<kHeadDim, kHeads>& s, const float (&l)[4][4], float base0,
                                                   float base1, int mt, int half, float& den0, float& den1) {
    const int lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
    for (int nt = 0; nt < 4; ++nt) {
        const float p0 = probability(l[nt][0], base0), p1 = probability(l[nt][1], base0);
        const float p2 = probability(l[nt][2], base1), p3 = probability(l[nt][3], base1);
        den0 += p0 + p1;
        den1 += p2 + p3;
        const int col = half * 32 + nt * 8 + 2 * tig;
        *reinterpret_cast<uint32_t*>(&s.p[(mt * 16 + g) * kPStride + col]) =
            pack_bf16(probability_for_pv(p0), probability_for_pv(p1));
        *reinterpret_cast<uint32_t*>(&s.p[(mt * 16 + g + 8) * kPStride + col]) =
            pack_bf16(probability_for_pv(p2), probability_for_pv(p3));
    }
}

// A tile's P V for the 16 heads of row tile `mt`: kCount 8-dim n-tiles of the values from column col0 on,
// o[nt] += P V by k16 steps in ascending order. range_pv's and the sequential kernel's one definition.
template <int kCount, int kHeadDim, int kHeads>
__device__ __forceinline__ void tile_pv(const Smem<kHeadDim, kHeads>& s, int mt, int col0, float (&o)[kCount][4]) {
    constexpr int kS = Smem<kHeadDim, kHeads>::kStride;
    const int lane = threadIdx.x % 32;
    const __nv_bfloat16* pa = &s.p[(mt * 16 + lane % 8 + (lane / 8 % 2) * 8) * kPStride + (lane / 16) * 8];
#pragma unroll
    for (int k0 = 0; k0 < kTile; k0 += 16) {
        uint32_t a[4];
        ldmatrix_x4(a, pa + k0);  // tile_logits' A rows
        const __nv_bfloat16* vrow = &s.k[(k0 + lane % 16) * kS + col0];
#pragma unroll
        for (int nt = 0; nt < kCount; ++nt) {
            uint32_t b0, b1;
            ldmatrix_x2_trans(b0, b1, vrow + nt * 8);
            mma_16816(o[nt], a, b0, b1);
        }
    }
}

template <int kHeadDim, int kHeads>
__device__ __forceinline__ void range_pv(Smem<kHeadDim, kHeads>& s, uint8_t* staged, const SparseAttentionParams& p,
                                         int token, SplitRange range, int m_tiles, bool tile_loaded,
                                         const float (&logits)[4][4], float (&o)[pv_tiles<kHeadDim, kHeads>()][4],
                                         float& den0, float& den1) {
    constexpr int kNTiles = pv_tiles<kHeadDim, kHeads>();  // 8-dim n-tiles of this warp's slice of head_dim
    const int g = threadIdx.x % 32 / 4;
    const QkWarp<kHeads> qk;
    const int mt = qk.mt, half = qk.half;
    const PvWarp<kHeads> pv;
    // Heads without any valid key have M = -inf: their P is 0 (the CPU reference outputs zeros).
    const int qk_row = mt * 16 < kHeads ? mt * 16 + g : g;  // warps past the heads compute nothing
    const float max0 = s.row_max[qk_row], max1 = s.row_max[qk_row + 8];
    const float base0 = max0 == -INFINITY ? INFINITY : max0, base1 = max1 == -INFINITY ? INFINITY : max1;
    for (int nt = 0; nt < kNTiles; ++nt)
        for (int i = 0; i < 4; ++i) o[nt][i] = 0.0f;
    den0 = den1 = 0.0f;

    for (int slot0 = range.begin; slot0 < range.end; slot0 += kTile) {
        __syncthreads();  // the previous tile's P V is done with s.k and s.p
        if (!tile_loaded) load_k_tile(s, staged, p, token, slot0, range.end);
        if (mt < m_tiles) {
            float l[4][4];
            if (tile_loaded) {
#pragma unroll
                for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                    for (int i = 0; i < 4; ++i) l[nt][i] = logits[nt][i];
            } else {
                tile_logits(s, p.scale, mt, half, l);
            }
            tile_probabilities(s, l, base0, base1, mt, half, den0, den1);
        }
        __syncthreads();
        if (pv.mt < m_tiles) tile_pv(s, pv.mt, pv.slice * (kHeadDim / PvWarp<kHeads>::kSlices), o);
    }
}

// The split's denominator of heads 16 mt + g and + 8 from the warps' partial sums, in a fixed order (lanes of a
// quad, then the two slot halves). Every thread of the CTA calls it (two barriers).
template <int kHeadDim, int kHeads>
__device__ __forceinline__ void split_denominators(Smem<kHeadDim, kHeads>& s, float den0, float den1, float& sum0,
                                                   float& sum1) {
    const int lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
    const QkWarp<kHeads> qk;
    const int mt = qk.mt, half = qk.half;
    for (int off = 1; off < 4; off <<= 1) {
        den0 += __shfl_xor_sync(0xffffffffu, den0, off);
        den1 += __shfl_xor_sync(0xffffffffu, den1, off);
    }
    __syncthreads();
    if (tig == 0 && mt * 16 < kHeads) {
        s.partial[half][mt * 16 + g] = den0;
        s.partial[half][mt * 16 + g + 8] = den1;
    }
    __syncthreads();
    const int h0 = mt * 16 < kHeads ? mt * 16 + g : g, h1 = h0 + 8;  // warps past the heads: values unused
    sum0 = s.partial[0][h0] + s.partial[1][h0];
    sum1 = s.partial[0][h1] + s.partial[1][h1];
}

// The combined output of one dim: the splits' P V sum over their denominators and the sink, as bf16; inv: 1 / denom,
// once a head, so that each dim's division is quotient_rn's multiply and correction (the division's bits). A head
// without keys (max -inf) gives zeros: its callers test that once a head.
__device__ __forceinline__ __nv_bfloat16 bf16_bits(uint16_t bits) {
    return __ushort_as_bfloat16(bits);
}
__device__ __forceinline__ uint16_t combined(float acc, float denom, float inv) {
    const __nv_bfloat16 v = __float2bfloat16_rn(quotient_rn(acc, denom, inv));
    return *reinterpret_cast<const uint16_t*>(&v);
}

}  // namespace
}  // namespace dsv4::cuda
