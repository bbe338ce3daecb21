// Sparse attention kernels (see sparse_attention.h). A CTA owns one token, a group of up to 64 heads and a range of
// slots (its split), walked in tiles of 64 keys: the tile is dequantized once into shared memory (bf16) and used by
// all heads. 8 warps: for S = Q K^T warp w computes heads 16(w%4).. x slots 32(w/4).. of the tile; for O += P V it
// owns heads 16(w%4).. x dims (w/4) * head_dim/2 ... Tensor cores: mma.sync m16n8k16 bf16 -> f32 (sm_80+ PTX, so
// the same code builds for sm_90a and sm_100a).
// Pass structure: (1) the max logit M of each head over all the token's slots (a local pre-pass when the token is
// not split, else sparse_attention_max_kernel + a read of every split's max); (2) P = bf16(exp(l - M)), P V and
// the unrounded denominator per split; (3) with splits, sparse_attention_combine_kernel sums the splits in order.
// Logits are recomputed by identical code in passes 1 and 2, so l <= M holds bit for bit. Every sum has a fixed
// order: results do not depend on the launch or on other tokens.
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
template <int kHeadDim, int kHeads>
__device__ void load_k_tile(Smem<kHeadDim, kHeads>& s, uint8_t* staged, const SparseAttentionParams& p, int token,
                            int slot0, int slot_end) {
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
    cp_async_wait_all();
    __syncthreads();
    dequant_k_tile(s, staged, s.valid, p);
    __syncthreads();
}

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
// receives this warp's logits of the range's last tile (pass 2 reuses them when the range is one tile).
template <int kHeadDim, int kHeads>
__device__ __forceinline__ void range_max(Smem<kHeadDim, kHeads>& s, uint8_t* staged, const SparseAttentionParams& p,
                                          int token, SplitRange range, int m_tiles, float (&last)[4][4]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, mt = warp % 4, nh = warp / 4;
    float m0 = -INFINITY, m1 = -INFINITY;
    for (int slot0 = range.begin; slot0 < range.end; slot0 += kTile) {
        __syncthreads();
        load_k_tile(s, staged, p, token, slot0, range.end);
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

template <int kHeadDim>
__global__ void __launch_bounds__(kThreads, 1) sparse_attention_max_kernel(const SparseAttentionParams p) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Smem<kHeadDim>& s = *reinterpret_cast<Smem<kHeadDim>*>(smem_raw);
    uint8_t* staged = smem_raw + kStagedOffset<kHeadDim>;
    const int token = blockIdx.x, head0 = blockIdx.y * kHeadsPerCta, split = blockIdx.z;
    const int heads_here = min(kHeadsPerCta, p.heads - head0), m_tiles = (heads_here + 15) / 16;
    load_q(s, p, token, head0, heads_here);
    if (!range_has_keys(p, token, split_range(p, split))) {
        cp_async_wait_all();
        if (threadIdx.x < heads_here)
            workspace(p).max[(int64_t(token) * p.splits + split) * p.heads + head0 + threadIdx.x] = -INFINITY;
        return;
    }
    float logits[4][4];
    range_max(s, staged, p, token, split_range(p, split), m_tiles, logits);
    if (threadIdx.x < heads_here)
        workspace(p).max[(int64_t(token) * p.splits + split) * p.heads + head0 + threadIdx.x] = s.row_max[threadIdx.x];
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
    const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4;
    const int mt = warp % 4, half = warp / 4;  // QK: heads 16 mt.., slot half of the tile
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
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
    const int mt = warp % 4, half = warp / 4;
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

template <int kHeadDim>
__global__ void __launch_bounds__(kThreads, 1) sparse_attention_kernel(const SparseAttentionParams p) {
    static_assert(kHeadDim % 16 == 0 && (kHeadDim / 2) % 8 == 0, "head_dim: k-steps of 16, two halves of n-tiles");
    constexpr int kNTiles = kHeadDim / 16;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Smem<kHeadDim>& s = *reinterpret_cast<Smem<kHeadDim>*>(smem_raw);
    uint8_t* staged = smem_raw + kStagedOffset<kHeadDim>;

    const int token = blockIdx.x, head0 = blockIdx.y * kHeadsPerCta, split = blockIdx.z;
    const int heads_here = min(kHeadsPerCta, p.heads - head0), m_tiles = (heads_here + 15) / 16;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
    const int mt = warp % 4, half = warp / 4;
    const SplitRange range = split_range(p, split);

    load_q(s, p, token, head0, heads_here);
    if (p.splits > 1 && !range_has_keys(p, token, range)) {
        cp_async_wait_all();
        const Workspace ws = workspace(p);
        const int64_t row0 = (int64_t(token) * p.splits + split) * p.heads + head0;
        for (int i = threadIdx.x; i < heads_here * kHeadDim; i += kThreads) ws.o[row0 * kHeadDim + i] = 0.0f;
        if (threadIdx.x < heads_here) ws.denom[row0 + threadIdx.x] = 0.0f;
        return;
    }
    float logits[4][4];
    if (p.splits == 1) {
        range_max(s, staged, p, token, range, m_tiles, logits);
    } else {
        __syncthreads();
        if (threadIdx.x < heads_here) {
            const float* m = workspace(p).max + int64_t(token) * p.splits * p.heads + head0 + threadIdx.x;
            float mx = -INFINITY;
            for (int sp = 0; sp < p.splits; ++sp) mx = fmaxf(mx, m[int64_t(sp) * p.heads]);
            s.row_max[threadIdx.x] = mx;
        }
        __syncthreads();
    }
    float o[kNTiles][4], den0, den1, sum0, sum1;
    range_pv(s, staged, p, token, range, m_tiles, false, logits, o, den0, den1);
    split_denominators(s, den0, den1, sum0, sum1);
    if (mt >= m_tiles) return;
    const int h0 = mt * 16 + g, h1 = h0 + 8;

    if (p.splits == 1) {
        // o / (sum + exp(sink - M)) -> bf16 (cpu::sparse_attention_head, then the bf16 activation); heads without
        // keys give zeros.
        const int hs[2] = {h0, h1};
        const float sums[2] = {sum0, sum1}, maxes[2] = {s.row_max[h0], s.row_max[h1]};
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            if (hs[r] >= heads_here) continue;
            const bool empty = maxes[r] == -INFINITY;
            const float denom = empty ? 1.0f : sums[r] + expf(p.sink[head0 + hs[r]] - maxes[r]);
            store_head_row(p.out + (int64_t(token) * p.heads + head0 + hs[r]) * kHeadDim + half * (kHeadDim / 2), o, r,
                           denom, empty, tig);
        }
        return;
    }
    // Split partials: unnormalized O and the denominator without the sink.
    const Workspace ws = workspace(p);
    const int hs[2] = {h0, h1};
    for (int r = 0; r < 2; ++r) {
        if (hs[r] >= heads_here) continue;
        const int64_t row = (int64_t(token) * p.splits + split) * p.heads + head0 + hs[r];
        if (half == 0 && tig == 0) ws.denom[row] = r == 0 ? sum0 : sum1;
        float* out = ws.o + row * kHeadDim + half * (kHeadDim / 2);
        for (int nt = 0; nt < kNTiles; ++nt)
            *reinterpret_cast<float2*>(out + nt * 8 + 2 * tig) = make_float2(o[nt][2 * r], o[nt][2 * r + 1]);
    }
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

// One CTA per (token, head), a thread per output dim: sums the splits in order, adds the sink, divides, rounds to
// bf16. The split loops are unrolled so their loads are in flight together.
__global__ void sparse_attention_combine_kernel(const SparseAttentionParams p) {
    const int token = blockIdx.x, head = blockIdx.y;
    const Workspace ws = workspace(p);
    const int64_t row0 = int64_t(token) * p.splits * p.heads + head;
    float mx = -INFINITY, sum = 0.0f;
#pragma unroll 16
    for (int sp = 0; sp < p.splits; ++sp) mx = fmaxf(mx, ws.max[row0 + int64_t(sp) * p.heads]);
#pragma unroll 16
    for (int sp = 0; sp < p.splits; ++sp) sum += ws.denom[row0 + int64_t(sp) * p.heads];
    const float denom = sum + expf(p.sink[head] - mx), inv = 1.0f / denom;
    const bool empty = mx == -INFINITY;
    uint16_t* out = p.out + (int64_t(token) * p.heads + head) * p.head_dim;
    for (int i = threadIdx.x; i < p.head_dim; i += blockDim.x) {
        float acc = 0.0f;
#pragma unroll 16
        for (int sp = 0; sp < p.splits; ++sp) acc += ws.o[(row0 + int64_t(sp) * p.heads) * p.head_dim + i];
        out[i] = empty ? uint16_t(0) : combined(acc, denom, inv);
    }
}

// The fused path: the splits of one (token, head group) are one cluster (CTA rank = split), and the three kernels'
// passes run in one, exchanging through distributed shared memory what they exchange through the workspace: (1)
// each split's max logits, then every CTA takes the maximum over the cluster; (2) P V and the denominator of its
// split, left in its own shared memory (the partial O over s.q and s.k, which pass 2 no longer reads); (3) CTA r
// combines its share of the group's (head, dim) outputs from every split, in split order, and applies the inverse
// RoPE to the rope dims if asked. The arithmetic and its order are the three kernels' (and apply_rope's), so the
// bits are theirs; a split of one tile keeps it in shared memory, and its logits in registers, from pass 1 to pass 2.
// kHeads heads per CTA: 64 (4 m-tiles, as the kernels) or 16 (a token's heads over 4 clusters: a decode token's
// passes on 4x the SMs, each CTA with a quarter of the P V and of the combine; the tile is dequantized by each).
template <int kHeadDim, int kHeads>
__global__ void __launch_bounds__(kThreads, 1) sparse_attention_cluster_kernel(const SparseAttentionParams p) {
    using S = Smem<kHeadDim, kHeads>;
    constexpr int kNTiles = pv_tiles<kHeadDim, kHeads>();
    static_assert(kHeads * kHeadDim * 4 <= int(sizeof(S::q) + sizeof(S::k)), "the partial O fits over s.q and s.k");
    static_assert(offsetof(S, k) == sizeof(S::q), "s.k follows s.q");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    S& s = *reinterpret_cast<S*>(smem_raw);
    uint8_t* staged = smem_raw + kStagedOffset<kHeadDim, kHeads>;
    float* partial_o = reinterpret_cast<float*>(smem_raw);  // [kHeads, kHeadDim], after pass 2
    cg::cluster_group cluster = cg::this_cluster();

    const int token = blockIdx.x, head0 = blockIdx.y * kHeads, split = int(cluster.block_rank());
    const int heads_here = min(kHeads, p.heads - head0), m_tiles = (heads_here + 15) / 16;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
    const int mt = warp % 4, half = warp / 4;
    const SplitRange range = split_range(p, split);

    // What pass 3 reads after the cluster barriers (which no load crosses), requested now so that its round trips
    // overlap pass 1's: the heads' sinks, the token's position and the inverse rotation's frequencies of this
    // thread's first quad of outputs.
    constexpr int kQuads = kHeadDim / 4;                                  // 4 dims of a head per step
    const int quads = heads_here * kQuads, nope = kHeadDim - p.rope_dim;  // nope: a multiple of 8
    const int first = int(int64_t(quads) * split / p.splits), last = int(int64_t(quads) * (split + 1) / p.splits);
    const float sink = threadIdx.x < heads_here ? p.sink[head0 + threadIdx.x] : 0.0f;
    const int32_t position = p.inverse_rope_inv_freq ? p.positions[token] : 0;
    float first_freq[2] = {0.0f, 0.0f};
    if (const int i = (first + int(threadIdx.x)) % kQuads * 4;
        p.inverse_rope_inv_freq && first + int(threadIdx.x) < last && i >= nope)
        first_freq[0] = p.inverse_rope_inv_freq[(i - nope) / 2],
        first_freq[1] = p.inverse_rope_inv_freq[(i - nope) / 2 + 1];

    // Pass 1: this split's max logits (-inf without keys), then the token's over the cluster.
    load_q(s, p, token, head0, heads_here);
    const bool has_keys = range_has_keys(p, token, range);
    float logits[4][4];  // this warp's logits of the split's tile, reused by pass 2 when the split is one tile
    if (has_keys) {
        range_max(s, staged, p, token, range, m_tiles, logits);
    } else {
        cp_async_wait_all();
        if (threadIdx.x < kHeads) s.row_max[threadIdx.x] = -INFINITY;
    }
    if (threadIdx.x < kHeads) s.split_max[threadIdx.x] = s.row_max[threadIdx.x];
    cluster.sync();
    if (threadIdx.x < heads_here) {
        float mx = -INFINITY;
        for (int sp = 0; sp < p.splits; ++sp) mx = fmaxf(mx, cluster.map_shared_rank(s.split_max, sp)[threadIdx.x]);
        s.row_max[threadIdx.x] = mx;
    }
    __syncthreads();

    // Pass 2: the split's unnormalized O and denominator (zeros without keys), into this CTA's shared memory.
    float o[kNTiles][4], den0 = 0.0f, den1 = 0.0f, sum0 = 0.0f, sum1 = 0.0f;
    for (int nt = 0; nt < kNTiles; ++nt)
        for (int i = 0; i < 4; ++i) o[nt][i] = 0.0f;
    if (has_keys) {
        range_pv(s, staged, p, token, range, m_tiles, range.end - range.begin <= kTile, logits, o, den0, den1);
        split_denominators(s, den0, den1, sum0, sum1);  // ends with a barrier: s.q and s.k are free
    }
    const PvWarp<kHeads> pv;
    for (int r = 0; r < 2; ++r) {
        const int qk_head = mt * 16 + g + 8 * r, pv_head = pv.mt * 16 + g + 8 * r;
        if (mt < m_tiles && qk_head < heads_here && half == 0 && tig == 0) s.split_den[qk_head] = r == 0 ? sum0 : sum1;
        if (pv.mt >= m_tiles || pv_head >= heads_here) continue;
        float* out = partial_o + pv_head * kHeadDim + pv.slice * (kHeadDim / PvWarp<kHeads>::kSlices);
        for (int nt = 0; nt < kNTiles; ++nt)
            *reinterpret_cast<float2*>(out + nt * 8 + 2 * tig) = make_float2(o[nt][2 * r], o[nt][2 * r + 1]);
    }
    cluster.sync();

    // Pass 3: the combine of this CTA's share of the group's outputs (whole heads' denominators first).
    if (threadIdx.x < heads_here) {
        float sum = 0.0f;
        for (int sp = 0; sp < p.splits; ++sp) sum += cluster.map_shared_rank(s.split_den, sp)[threadIdx.x];
        s.partial[0][threadIdx.x] = sum + expf(sink - s.row_max[threadIdx.x]);
    }
    __syncthreads();
    for (int j = first + int(threadIdx.x); j < last; j += kThreads) {
        const int h = j / kQuads, i = j % kQuads * 4;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
        for (int sp = 0; sp < p.splits; ++sp) {
            const float4 v =
                *reinterpret_cast<const float4*>(cluster.map_shared_rank(partial_o, sp) + h * kHeadDim + i);
            acc.x += v.x;
            acc.y += v.y;
            acc.z += v.z;
            acc.w += v.w;
        }
        const float denom = s.partial[0][h], inv = 1.0f / denom;
        const bool empty = s.row_max[h] == -INFINITY;
        auto dim = [&](float v) { return bf16_bits(empty ? uint16_t(0) : combined(v, denom, inv)); };
        __nv_bfloat162 lo = __halves2bfloat162(dim(acc.x), dim(acc.y));
        __nv_bfloat162 hi = __halves2bfloat162(dim(acc.z), dim(acc.w));
        if (p.inverse_rope_inv_freq && i >= nope) {  // a quad is all nope or all rope
            const bool first_quad = j == first + int(threadIdx.x);
            float c, sn;
            rope_cos_sin(position, first_quad ? first_freq[0] : p.inverse_rope_inv_freq[(i - nope) / 2], true, c, sn);
            lo = rope_rotate(lo, c, sn);
            rope_cos_sin(position, first_quad ? first_freq[1] : p.inverse_rope_inv_freq[(i - nope) / 2 + 1], true, c,
                         sn);
            hi = rope_rotate(hi, c, sn);
        }
        __nv_bfloat162* out =
            reinterpret_cast<__nv_bfloat162*>(p.out + (int64_t(token) * p.heads + head0 + h) * kHeadDim + i);
        out[0] = lo;
        out[1] = hi;
    }
    cluster.sync();  // no CTA leaves while another still reads its shared memory
}

// The sequential path (SparseAttentionCombine::kSequential): one CTA per (token, head group) walks the token's
// tiles twice, in order: pass 1 the max logit of each head (as range_max), pass 2 split after split with the main
// kernel's arithmetic (the same logits, P, P V chain from zero and denominators per split: range_pv's and
// split_denominators' code), each split's O and denominator added to the token's sums as the combine kernel adds
// them (from +0, in split order), then divided and rounded as it does: the same bits as the three kernels, with no
// workspace. For a prefill piece the splits' partial O (a V4 token's 10 x 64 heads x 512 f32 = 1.3 MB, written and
// read back) and the q rows reloaded per split and pass were most of the kernels' memory traffic.
// The tiles stream through two raw buffers: tile i + 1's indices and entries are in flight while tile i is
// dequantized and multiplied (each warp issues its own rows' copies, so the issue needs no barrier). A tile
// without a valid slot is skipped: the kernels add its exact zeros (P = 0 against zeroed keys), which leave every
// sum, started at +0, unchanged; so is a split without keys.
template <int kHeadDim>
struct SequentialSmem {
    __host__ __device__ static int entry_bytes(int32_t rope_dim) {
        return int(main_entry_layout(kHeadDim, rope_dim).bytes());
    }
    __host__ __device__ static int raw_offset(int buffer, int32_t rope_dim) {
        return kStagedOffset<kHeadDim> + buffer * kTile * entry_bytes(rope_dim);
    }
    __host__ __device__ static int valid_offset(int32_t rope_dim) { return raw_offset(2, rope_dim); }
    __host__ __device__ static int bytes(int32_t rope_dim) {
        return valid_offset(rope_dim) + 2 * kTile * int(sizeof(int));
    }
};

// Issues the copies of tile [slot0, slot0 + 64) (slots < slot_end) into `raw` ([64, entry bytes]) and its rows'
// indices into `valid` (-1: empty), then commits them as one group. Warp w takes rows w, w + 8, ... (load_k_tile's
// rows), reading their indices itself.
template <int kHeadDim>
__device__ void issue_k_tile(uint8_t* raw, int* valid, const SparseAttentionParams& p, int token, int slot0,
                             int slot_end) {
    const int entry_bytes = int(main_entry_layout(kHeadDim, p.rope_dim).bytes()), words = entry_bytes / 8;
    const int32_t* idx = p.indices + int64_t(token) * p.slots;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    constexpr int kRowsPerWarp = kTile / (kThreads / 32);
    int mine = -1;
    if (lane < kRowsPerWarp) {
        const int r = warp + (kThreads / 32) * lane, slot = slot0 + r;
        mine = slot < slot_end ? idx[slot] : -1;
        valid[r] = mine;
    }
    // A row's words in rounds of 32 lanes, as many rounds as the largest entry of this head_dim needs (all rope:
    // 2 head_dim bytes), the rounds past this entry's words predicated off: no loop over a runtime count.
    constexpr int kMaxRounds = (2 * kHeadDim / 8 + 31) / 32;
#pragma unroll 1
    for (int i = 0; i < kRowsPerWarp; ++i) {
        const int r = warp + (kThreads / 32) * i, row = __shfl_sync(0xffffffffu, mine, i);
        if (row < 0) continue;
        const unsigned dst = smem_addr(raw + r * entry_bytes);
        const uint8_t* src = p.kv + int64_t(row) * entry_bytes;
#pragma unroll
        for (int round = 0; round < kMaxRounds; ++round) {
            const int w = lane + 32 * round;
            if (w < words) cp_async8(dst + w * 8, src + w * 8);
        }
    }
    cp_async_commit();
}

template <int kHeadDim, bool kOneTileSplits>
__global__ void __launch_bounds__(kThreads, 1) sparse_attention_sequential_kernel(const SparseAttentionParams p) {
    constexpr int kNTiles = kHeadDim / 16;
    constexpr int kChunk = kNTiles < 16 ? kNTiles : 16;
    static_assert(kNTiles % kChunk == 0);
    using L = SequentialSmem<kHeadDim>;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Smem<kHeadDim>& s = *reinterpret_cast<Smem<kHeadDim>*>(smem_raw);
    // Step i's raw entries and indices: buffer i % 2 (offsets, not arrays of pointers, which would live in local
    // memory and turn every read of the tiles into a generic load).
    uint8_t* const raw0 = smem_raw + L::raw_offset(0, p.rope_dim);
    const int raw_bytes = L::raw_offset(1, p.rope_dim) - L::raw_offset(0, p.rope_dim);
    int* const valid0 = reinterpret_cast<int*>(smem_raw + L::valid_offset(p.rope_dim));
    auto raw = [&](int step) { return raw0 + (step % 2) * raw_bytes; };
    auto valid = [&](int step) { return valid0 + (step % 2) * kTile; };

    const int token = blockIdx.x, head0 = blockIdx.y * kHeadsPerCta;
    const int heads_here = min(kHeadsPerCta, p.heads - head0), m_tiles = (heads_here + 15) / 16;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
    const int mt = warp % 4, half = warp / 4;  // QK: heads 16 mt.., slot half of the tile; P V: dims half (64 heads)

    // Steps 0 .. tiles - 1 are pass 1's tiles, tiles .. 2 tiles - 1 pass 2's: the same tiles again.
    const int tiles = (p.slots + kTile - 1) / kTile, steps = 2 * tiles;
    auto issue = [&](int step) {
        const int slot0 = (step % tiles) * kTile;
        issue_k_tile<kHeadDim>(raw(step), valid(step), p, token, slot0, p.slots);
    };
    load_q(s, p, token, head0, heads_here);  // lands with step 0's group
    if (steps > 0)
        issue(0);
    else
        cp_async_wait_all();

    float m0 = -INFINITY, m1 = -INFINITY;  // pass 1: this warp's running max of rows g, g + 8
    float base0 = 0.0f, base1 = 0.0f;
    constexpr int kOTiles = kOneTileSplits ? 1 : kNTiles;  // the split's O across its tiles (general splits only)
    float o[kOTiles][4], acc[kNTiles][4], den0 = 0.0f, den1 = 0.0f, sum0 = 0.0f, sum1 = 0.0f;
    bool split_live = false;  // pass 2: the current split had a tile with keys
    int split = 0;
    SplitRange range = split_range(p, 0);
    for (int nt = 0; nt < kNTiles; ++nt)
        for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
    for (int nt = 0; nt < kOTiles; ++nt)
        for (int i = 0; i < 4; ++i) o[nt][i] = 0.0f;

    for (int step = 0; step < steps; ++step) {
        const bool pass2 = step >= tiles;
        const int slot0 = (step % tiles) * kTile;
        if (step == tiles) {  // pass 1 ends: the max over every tile, as range_max combines it
            for (int off = 1; off < 4; off <<= 1) {
                m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, off));
                m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, off));
            }
            if (lane % 4 == 0 && mt * 16 < kHeadsPerCta) {
                s.partial[half][mt * 16 + lane / 4] = m0;
                s.partial[half][mt * 16 + lane / 4 + 8] = m1;
            }
            __syncthreads();
            if (threadIdx.x < kHeadsPerCta)
                s.row_max[threadIdx.x] = fmaxf(s.partial[0][threadIdx.x], s.partial[1][threadIdx.x]);
            __syncthreads();
            const int qk_row = mt * 16 + g;
            const float max0 = s.row_max[qk_row], max1 = s.row_max[qk_row + 8];
            base0 = max0 == -INFINITY ? INFINITY : max0;
            base1 = max1 == -INFINITY ? INFINITY : max1;
        }
        // This step's copies landed for every thread (the next step's stay in flight), and every warp is done with
        // the previous tile's s.k, s.p and s.valid and with the buffer the next step's copies go to.
        if (step + 1 < steps) {
            __syncthreads();
            issue(step + 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        const int* v = valid(step);
        const bool tile_live = __syncthreads_or(threadIdx.x < kTile && v[threadIdx.x] >= 0) != 0;
        if (tile_live) {
            if (threadIdx.x < kTile) s.valid[threadIdx.x] = v[threadIdx.x];  // tile_logits' mask
            dequant_k_tile(s, raw(step), v, p);
            __syncthreads();
            if (!pass2) {
                if (mt < m_tiles) {
                    float l[4][4];
                    tile_logits(s, p.scale, mt, half, l);
                    for (int nt = 0; nt < 4; ++nt) {
                        m0 = fmaxf(m0, fmaxf(l[nt][0], l[nt][1]));
                        m1 = fmaxf(m1, fmaxf(l[nt][2], l[nt][3]));
                    }
                }
            } else {
                split_live = true;
                if (mt < m_tiles) {  // range_pv's P and denominators
                    float l[4][4];
                    tile_logits(s, p.scale, mt, half, l);
                    tile_probabilities(s, l, base0, base1, mt, half, den0, den1);
                }
                __syncthreads();
                if (kOneTileSplits && mt < m_tiles) {  // range_pv's P V, straight into the sum by chunks
#pragma unroll
                    for (int c0 = 0; c0 < kNTiles; c0 += kChunk) {
                        float oc[kChunk][4];
#pragma unroll
                        for (int nt = 0; nt < kChunk; ++nt)
#pragma unroll
                            for (int i = 0; i < 4; ++i) oc[nt][i] = 0.0f;
                        tile_pv(s, mt, half * (kHeadDim / 2) + c0 * 8, oc);
#pragma unroll
                        for (int nt = 0; nt < kChunk; ++nt)
#pragma unroll
                            for (int i = 0; i < 4; ++i) acc[c0 + nt][i] += oc[nt][i];
                    }
                }
                // range_pv's P V (64 heads: the P V warp is the QK warp)
                if (!kOneTileSplits && mt < m_tiles) tile_pv(s, mt, half * (kHeadDim / 2), o);
            }
        }
        // The end of a split in pass 2: its denominators, and its O and denominator into the token's sums.
        if (pass2 && (slot0 + kTile >= range.end || step + 1 == steps)) {
            if (split_live) {
                float split0, split1;
                split_denominators(s, den0, den1, split0, split1);
                if constexpr (!kOneTileSplits)
#pragma unroll
                    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
                        for (int i = 0; i < 4; ++i) {
                            acc[nt][i] += o[nt][i];
                            o[nt][i] = 0.0f;
                        }
                sum0 += split0;
                sum1 += split1;
            }
            den0 = den1 = 0.0f;
            split_live = false;
            while (++split < p.splits) {  // the next split with slots (empty ranges past the end add nothing)
                range = split_range(p, split);
                if (range.begin < range.end) break;
            }
        }
    }
    if (mt >= m_tiles) return;
    // The combine's last step: o / (sum + exp(sink - M)) as bf16, zeros for a head without keys.
    const int hs[2] = {mt * 16 + g, mt * 16 + g + 8};
    const float sums[2] = {sum0, sum1};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (hs[r] >= heads_here) continue;
        const float mx = steps > 0 ? s.row_max[hs[r]] : -INFINITY;
        const float denom = sums[r] + expf(p.sink[head0 + hs[r]] - mx);
        store_head_row<kNTiles, kOneTileSplits>(
            p.out + (int64_t(token) * p.heads + head0 + hs[r]) * kHeadDim + half * (kHeadDim / 2), acc, r, denom,
            mx == -INFINITY, tig);
    }
}

template <int kHeadDim, bool kOneTileSplits>
void launch_sequential(const SparseAttentionParams& p, cudaStream_t stream) {
    const auto kernel = sparse_attention_sequential_kernel<kHeadDim, kOneTileSplits>;
    const int bytes = SequentialSmem<kHeadDim>::bytes(p.rope_dim);
    DSV4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    const dim3 grid(p.tokens, (p.heads + kHeadsPerCta - 1) / kHeadsPerCta);
    kernel<<<grid, kThreads, bytes, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

template <int kHeadDim>
void launch_sequential(const SparseAttentionParams& p, cudaStream_t stream) {
    const int tiles = (p.slots + kTile - 1) / kTile;
    if ((tiles + p.splits - 1) / p.splits <= 1)  // split_range's tiles per split
        launch_sequential<kHeadDim, true>(p, stream);
    else
        launch_sequential<kHeadDim, false>(p, stream);
}

template <int kHeadDim>
void launch(const SparseAttentionParams& p, cudaStream_t stream) {
    const int bytes = smem_bytes<kHeadDim>(p.rope_dim);
    const dim3 grid(p.tokens, (p.heads + kHeadsPerCta - 1) / kHeadsPerCta, p.splits);
    if (p.splits > 1) {
        DSV4_CUDA_CHECK(cudaFuncSetAttribute(sparse_attention_max_kernel<kHeadDim>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
        sparse_attention_max_kernel<kHeadDim><<<grid, kThreads, bytes, stream>>>(p);
        DSV4_CUDA_CHECK(cudaGetLastError());
    }
    DSV4_CUDA_CHECK(
        cudaFuncSetAttribute(sparse_attention_kernel<kHeadDim>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    sparse_attention_kernel<kHeadDim><<<grid, kThreads, bytes, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
    if (p.splits > 1) {
        const int threads = (std::min(p.head_dim, 512) + 31) / 32 * 32;
        sparse_attention_combine_kernel<<<dim3(p.tokens, p.heads), threads, 0, stream>>>(p);
        DSV4_CUDA_CHECK(cudaGetLastError());
    }
}

template <int kHeadDim, int kHeads>
const void* cluster_kernel() {
    return reinterpret_cast<const void*>(sparse_attention_cluster_kernel<kHeadDim, kHeads>);
}

template <int kHeadDim, int kHeads>
int64_t resident_cluster_count(const SparseAttentionParams& p) {
    return resident_clusters(cluster_kernel<kHeadDim, kHeads>(), kThreads, p.splits,
                             smem_bytes<kHeadDim, kHeads>(p.rope_dim));
}

template <int kHeadDim, int kHeads>
void launch_cluster(const SparseAttentionParams& p, cudaStream_t stream) {
    resident_cluster_count<kHeadDim, kHeads>(p);  // allows the size and raises the shared-memory limit (cached)
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(unsigned(p.tokens), unsigned((p.heads + kHeads - 1) / kHeads), unsigned(p.splits));
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = size_t(smem_bytes<kHeadDim, kHeads>(p.rope_dim));
    config.stream = stream;
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = unsigned(p.splits);
    config.attrs = &attribute;
    config.numAttrs = 1;
    DSV4_CUDA_CHECK(cudaLaunchKernelEx(&config, sparse_attention_cluster_kernel<kHeadDim, kHeads>, p));
}

// Calls fn.template operator()<kHeadDim, kHeads>() for the built cluster kernels (16 heads where head_dim allows
// 8 P V slices of whole n-tiles); returns false for any other (head_dim, heads per CTA).
template <class Fn>
bool with_cluster_kernel(int32_t head_dim, int32_t heads_per_cta, Fn&& fn) {
    if (heads_per_cta == kNarrowClusterHeads) {
        if (head_dim == 512) return fn.template operator()<512, kNarrowClusterHeads>(), true;
        if (head_dim == 128) return fn.template operator()<128, kNarrowClusterHeads>(), true;
        return false;
    }
    if (heads_per_cta != kHeadsPerCta) return false;
    switch (head_dim) {
        case 512:
            return fn.template operator()<512, kHeadsPerCta>(), true;
        case 128:
            return fn.template operator()<128, kHeadsPerCta>(), true;
        case 96:
            return fn.template operator()<96, kHeadsPerCta>(), true;
        case 80:
            return fn.template operator()<80, kHeadsPerCta>(), true;
        default:
            return false;
    }
}

}  // namespace

namespace detail {

void sparse_attention_launch(const SparseAttentionParams& p, cudaStream_t stream) {
    switch (p.head_dim) {
        case 512: return launch<512>(p, stream);
        case 128: return launch<128>(p, stream);
        case 96: return launch<96>(p, stream);
        case 80: return launch<80>(p, stream);
        default: return;  // rejected by the host-side contract
    }
}

void sparse_attention_sequential_launch(const SparseAttentionParams& p, cudaStream_t stream) {
    switch (p.head_dim) {
        case 512: return launch_sequential<512>(p, stream);
        case 128: return launch_sequential<128>(p, stream);
        case 96: return launch_sequential<96>(p, stream);
        case 80: return launch_sequential<80>(p, stream);
        default: return;  // rejected by the host-side contract
    }
}

int64_t sparse_attention_resident_clusters(const SparseAttentionParams& p, int32_t heads_per_cta) {
    int64_t resident = 0;
    with_cluster_kernel(p.head_dim, heads_per_cta,
                        [&]<int kHeadDim, int kHeads>() { resident = resident_cluster_count<kHeadDim, kHeads>(p); });
    return resident;
}

void sparse_attention_cluster_launch(const SparseAttentionParams& p, int32_t heads_per_cta, cudaStream_t stream) {
    with_cluster_kernel(p.head_dim, heads_per_cta,
                        [&]<int kHeadDim, int kHeads>() { launch_cluster<kHeadDim, kHeads>(p, stream); });
}

}  // namespace detail
}  // namespace dsv4::cuda
