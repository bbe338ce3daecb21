// The sparse attention's sequential path (SparseAttentionCombine::kSequential; see sparse_attention.cu for the
// scheme and sparse_attention_tile.cuh for the parts it shares): one CTA per (token, head group) walks its splits in
// order. Tested by tests/gpu/sparse_attention_test.cpp (bitwise against the three kernels).
#include "kernels/cuda/sparse_attention/sparse_attention_tile.cuh"

namespace dsv4::cuda {
namespace {

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

}  // namespace

namespace detail {

void sparse_attention_sequential_launch(const SparseAttentionParams& p, cudaStream_t stream) {
    switch (p.head_dim) {
        case 512: return launch_sequential<512>(p, stream);
        case 128: return launch_sequential<128>(p, stream);
        case 96: return launch_sequential<96>(p, stream);
        case 80: return launch_sequential<80>(p, stream);
        default: return;  // rejected by the host-side contract
    }
}

}  // namespace detail
}  // namespace dsv4::cuda
