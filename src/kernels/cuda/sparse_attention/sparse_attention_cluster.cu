// The sparse attention's fused cluster path (SparseAttentionCombine::kCluster; see sparse_attention.cu for the
// scheme and sparse_attention_tile.cuh for the parts it shares): a token's splits as one cluster exchanging through
// distributed shared memory. Tested by tests/gpu/sparse_attention_test.cpp (bitwise against the three kernels).
#include "kernels/cuda/common/bulk_copy.cuh"
#include "kernels/cuda/common/phase_clock.cuh"
#include "kernels/cuda/sparse_attention/sparse_attention_tile.cuh"

namespace dsv4::cuda {
namespace {

// The most splits a 16-head cluster takes (the largest cluster; launch_cluster checks).
constexpr int kMaxPushSplits = 16;

// The 16-head CTAs' receive area (sparse_attention_cluster_kernel's kPush), after the staged key tile: a slot a split,
// its denominators (kHeads floats), then its partial O of this CTA's share of the quads (16 bytes each).
template <int kHeads>
__host__ __device__ constexpr int receive_slot_bytes(int share_quads) {
    return kHeads * 4 + share_quads * 16;
}
template <int kHeadDim, int kHeads>
__host__ __device__ inline int receive_offset(int32_t rope_dim) {
    return (kStagedOffset<kHeadDim, kHeads> + kTile * int(main_entry_layout(kHeadDim, rope_dim).bytes()) + 15) / 16 *
           16;
}
template <int kHeadDim, int kHeads>
int cluster_smem_bytes(int32_t rope_dim, int32_t splits) {
    if (kHeads != kNarrowClusterHeads) return smem_bytes<kHeadDim, kHeads>(rope_dim);
    const int share_max = (kHeads * (kHeadDim / 4) + splits - 1) / splits;
    return receive_offset<kHeadDim, kHeads>(rope_dim) + splits * receive_slot_bytes<kHeads>(share_max);
}

// The fused path: the splits of one (token, head group) are one cluster (CTA rank = split), and the three kernels'
// passes run in one, exchanging through distributed shared memory what they exchange through the workspace: (1)
// each split's max logits, then every CTA takes the maximum over the cluster (with 16 heads a CTA, pushed by st.async
// onto each CTA's barrier); (2) P V and the denominator of its split, left in its own shared memory (the partial O
// over s.q and s.k, which pass 2 no longer reads) and, with 16 heads a CTA, pushed in shares to the CTAs that combine
// them (kPush below); (3) CTA r combines its share of the group's (head, dim) outputs from every split, in split
// order, and applies the inverse RoPE to the rope dims if asked. The arithmetic and its order are the three kernels'
// (and apply_rope's), so the bits are theirs; a split of one tile keeps it in shared memory, and its logits in
// registers, from pass 1 to pass 2.
// kHeads heads per CTA: 64 (4 m-tiles, as the kernels) or 16 (a token's heads over 4 clusters: a decode token's
// passes on 4x the SMs, each CTA with a quarter of the P V and of the combine; the tile is dequantized by each).
template <int kHeadDim, int kHeads>
__global__ void __launch_bounds__(kThreads, 1) sparse_attention_cluster_kernel(const SparseAttentionParams p) {
    using S = Smem<kHeadDim, kHeads>;
    constexpr int kNTiles = pv_tiles<kHeadDim, kHeads>();
    static_assert(kHeads * kHeadDim * 4 <= int(sizeof(S::q) + sizeof(S::k)), "the partial O fits over s.q and s.k");
    static_assert(offsetof(S, k) == sizeof(S::q), "s.k follows s.q");
    static_assert(offsetof(S, split_den) % 16 == 0 && kHeads * 4 % 16 == 0, "the denominators push as a bulk copy");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    S& s = *reinterpret_cast<S*>(smem_raw);
    uint8_t* staged = smem_raw + kStagedOffset<kHeadDim, kHeads>;
    float* partial_o = reinterpret_cast<float*>(smem_raw);  // [kHeads, kHeadDim], after pass 2
    cg::cluster_group cluster = cg::this_cluster();
    phase_mark(p.phase_clock, 0);
    // kPush (the 16-head CTAs of a decode step): each split pushes every CTA of the cluster that CTA's share of its
    // partial O and its denominators (bulk copies into a receive area after the staged tile: a slot a split), so that
    // the combine reads its own shared memory; no cluster barrier after pass 2, none before exit. Else the combine
    // reads the others' shared memory after a cluster barrier.
    constexpr bool kPush = kHeads == kNarrowClusterHeads;
    __shared__ uint64_t received;  // kPush: completes once every split's push has landed
    // kPush: every split's max logits, pushed by st.async onto `maxes_in` (the token's max after pass 1 without a
    // cluster barrier: each CTA waits for the bytes it receives).
    __shared__ uint64_t maxes_in;
    __shared__ float split_maxes[kPush ? kMaxPushSplits : 1][kHeads];

    const int token = blockIdx.x, head0 = blockIdx.y * kHeads, split = int(cluster.block_rank());
    const int heads_here = min(kHeads, p.heads - head0), m_tiles = (heads_here + 15) / 16;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tig = lane % 4;
    const QkWarp<kHeads> qk;
    const int mt = qk.mt, half = qk.half;
    const SplitRange range = split_range(p, split);

    // What pass 3 reads after the cluster barriers (which no load crosses), requested now so that its round trips
    // overlap pass 1's: the heads' sinks and the token's position. The inverse rotation's cos and sin of the token
    // (rope_dim / 2 pairs, the same for every head) are made by the last warp while the key tile's copies are in
    // flight (rope_table), so that pass 3's rope quads only read them: computed there, a quad's two double-precision
    // sincos held the warps of the rope quads, and with them the last cluster barrier, ~1.5 us after the others.
    constexpr int kQuads = kHeadDim / 4;                                  // 4 dims of a head per step
    const int quads = heads_here * kQuads, nope = kHeadDim - p.rope_dim;  // nope: a multiple of 8
    const int first = int(int64_t(quads) * split / p.splits), last = int(int64_t(quads) * (split + 1) / p.splits);
    const float sink = threadIdx.x < heads_here ? p.sink[head0 + threadIdx.x] : 0.0f;
    const int32_t position = p.inverse_rope_inv_freq ? p.positions[token] : 0;
    __shared__ float rope_cos[kHeadDim / 2], rope_sin[kHeadDim / 2];
    const int share_max = (quads + p.splits - 1) / p.splits;  // the largest CTA's share of the quads
    const int slot_bytes = receive_slot_bytes<kHeads>(share_max);
    uint8_t* const receive = smem_raw + receive_offset<kHeadDim, kHeads>(p.rope_dim);
    if (kPush && threadIdx.x == 0) {
        mbarrier_init(&received, 1);
        mbarrier_init(&maxes_in, 1);
        mbarrier_inits_visible();  // before the split cluster barrier's arrive below, whose wait precedes every push
        mbarrier_arm(&received, p.splits * (kHeads * 4 + (last - first) * 16));
        mbarrier_arm(&maxes_in, p.splits * kHeads * 4);
    }
    // kPush: a split cluster barrier, arrived at now and waited for before the first push (every CTA has started and
    // initialized its barriers by then, the precondition of distributed shared memory), so its latency hides behind
    // pass 1.
    if constexpr (kPush) asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
    auto rope_table = [&]() {
        if (!p.inverse_rope_inv_freq || warp != kThreads / 32 - 1) return;
        for (int m = lane; m < p.rope_dim / 2; m += 32)
            rope_cos_sin(position, p.inverse_rope_inv_freq[m], true, rope_cos[m], rope_sin[m]);
    };

    // Pass 1: this split's max logits (-inf without keys), then the token's over the cluster.
    load_q(s, p, token, head0, heads_here);
    const bool has_keys = range_has_keys(p, token, range);
    phase_mark(p.phase_clock, 1);
    float logits[4][4];  // this warp's logits of the split's tile, reused by pass 2 when the split is one tile
    if (has_keys) {
        range_max(s, staged, p, token, range, m_tiles, logits, rope_table);
    } else {
        rope_table();
        cp_async_wait_all();
        if (threadIdx.x < kHeads) s.row_max[threadIdx.x] = -INFINITY;
    }
    phase_mark(p.phase_clock, 2);
    if constexpr (kPush) {
        __syncthreads();  // s.row_max is whole (without keys, each head's thread wrote its own)
        asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
        if (threadIdx.x < p.splits * kHeads) {  // thread (r, h) pushes CTA r this split's max of head h
            const int r = threadIdx.x / kHeads, h = threadIdx.x % kHeads;
            store_to_cluster_shared(cluster_shared_address(&split_maxes[split][h], r), __float_as_uint(s.row_max[h]),
                                    cluster_shared_address(&maxes_in, r));
        }
        mbarrier_wait(&maxes_in, 0);
        if (threadIdx.x < heads_here) {
            float mx = -INFINITY;
            for (int sp = 0; sp < p.splits; ++sp) mx = fmaxf(mx, split_maxes[sp][threadIdx.x]);
            s.row_max[threadIdx.x] = mx;
        }
    } else {
        if (threadIdx.x < kHeads) s.split_max[threadIdx.x] = s.row_max[threadIdx.x];
        cluster.sync();
        if (threadIdx.x < heads_here) {
            float mx = -INFINITY;
            for (int sp = 0; sp < p.splits; ++sp)
                mx = fmaxf(mx, cluster.map_shared_rank(s.split_max, sp)[threadIdx.x]);
            s.row_max[threadIdx.x] = mx;
        }
    }
    __syncthreads();
    phase_mark(p.phase_clock, 3);

    // Pass 2: the split's unnormalized O and denominator (zeros without keys), into this CTA's shared memory.
    float o[kNTiles][4], den0 = 0.0f, den1 = 0.0f, sum0 = 0.0f, sum1 = 0.0f;
    for (int nt = 0; nt < kNTiles; ++nt)
        for (int i = 0; i < 4; ++i) o[nt][i] = 0.0f;
    if (has_keys) {
        range_pv(s, staged, p, token, range, m_tiles, range.end - range.begin <= kTile, logits, o, den0, den1);
        split_denominators(s, den0, den1, sum0, sum1);  // ends with a barrier: s.q and s.k are free
    }
    phase_mark(p.phase_clock, 4);
    const PvWarp<kHeads> pv;
    for (int r = 0; r < 2; ++r) {
        const int qk_head = mt * 16 + g + 8 * r, pv_head = pv.mt * 16 + g + 8 * r;
        if (mt < m_tiles && qk_head < heads_here && half == 0 && tig == 0) s.split_den[qk_head] = r == 0 ? sum0 : sum1;
        if (pv.mt >= m_tiles || pv_head >= heads_here) continue;
        float* out = partial_o + pv_head * kHeadDim + pv.slice * (kHeadDim / PvWarp<kHeads>::kSlices);
        for (int nt = 0; nt < kNTiles; ++nt)
            *reinterpret_cast<float2*>(out + nt * 8 + 2 * tig) = make_float2(o[nt][2 * r], o[nt][2 * r + 1]);
    }
    if constexpr (kPush) {
        shared_writes_before_bulk_copies();
        __syncthreads();
        if (warp == 0 && lane < p.splits) {  // lane r pushes CTA r its share
            const int r = lane, r_first = int(int64_t(quads) * r / p.splits);
            const int r_last = int(int64_t(quads) * (r + 1) / p.splits);
            const unsigned slot = cluster_shared_address(receive + split * slot_bytes, r);
            const unsigned bar = cluster_shared_address(&received, r);
            bulk_copy_to_cluster_shared(slot, s.split_den, kHeads * 4, bar);
            if (r_last > r_first)
                bulk_copy_to_cluster_shared(slot + kHeads * 4, partial_o + r_first * 4, (r_last - r_first) * 16, bar);
            bulk_copies_commit();
        }
        mbarrier_wait(&received, 0);
    } else {
        cluster.sync();
    }
    phase_mark(p.phase_clock, 5);

    // Pass 3: the combine of this CTA's share of the group's outputs (whole heads' denominators first), each the
    // splits' values added in ascending split order.
    auto den_of = [&](int sp) {
        return kPush ? reinterpret_cast<const float*>(receive + sp * slot_bytes)
                     : cluster.map_shared_rank(s.split_den, sp);
    };
    auto o_of = [&](int sp, int j) {  // quad j of the split's partial O
        return kPush ? reinterpret_cast<const float4*>(receive + sp * slot_bytes + kHeads * 4) + (j - first)
                     : reinterpret_cast<const float4*>(cluster.map_shared_rank(partial_o, sp)) + j;
    };
    if (threadIdx.x < heads_here) {
        float sum = 0.0f;
        for (int sp = 0; sp < p.splits; ++sp) sum += den_of(sp)[threadIdx.x];
        s.partial[0][threadIdx.x] = sum + expf(sink - s.row_max[threadIdx.x]);
    }
    __syncthreads();
    for (int j = first + int(threadIdx.x); j < last; j += kThreads) {
        const int h = j / kQuads, i = j % kQuads * 4;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
        for (int sp = 0; sp < p.splits; ++sp) {
            const float4 v = *o_of(sp, j);
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
            const int m = (i - nope) / 2;
            lo = rope_rotate(lo, rope_cos[m], rope_sin[m]);
            hi = rope_rotate(hi, rope_cos[m + 1], rope_sin[m + 1]);
        }
        __nv_bfloat162* out =
            reinterpret_cast<__nv_bfloat162*>(p.out + (int64_t(token) * p.heads + head0 + h) * kHeadDim + i);
        out[0] = lo;
        out[1] = hi;
    }
    phase_mark(p.phase_clock, 6);
    if constexpr (kPush) {
        if (warp == 0 && lane < p.splits) bulk_copies_read_done();  // the pushes out of this CTA have read it
    } else {
        cluster.sync();  // no CTA leaves while another still reads its shared memory
    }
    phase_mark(p.phase_clock, 7);
}

template <int kHeadDim, int kHeads>
const void* cluster_kernel() {
    return reinterpret_cast<const void*>(sparse_attention_cluster_kernel<kHeadDim, kHeads>);
}

template <int kHeadDim, int kHeads>
int64_t resident_cluster_count(const SparseAttentionParams& p) {
    return resident_clusters(cluster_kernel<kHeadDim, kHeads>(), kThreads, p.splits,
                             cluster_smem_bytes<kHeadDim, kHeads>(p.rope_dim, p.splits));
}

template <int kHeadDim, int kHeads>
void launch_cluster(const SparseAttentionParams& p, cudaStream_t stream) {
    if (kHeads == kNarrowClusterHeads && p.splits > kMaxPushSplits)
        throw_cuda_error(cudaErrorInvalidValue, "sparse attention: more splits than a 16-head cluster takes", __FILE__,
                         __LINE__);
    resident_cluster_count<kHeadDim, kHeads>(p);  // allows the size and raises the shared-memory limit (cached)
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(unsigned(p.tokens), unsigned((p.heads + kHeads - 1) / kHeads), unsigned(p.splits));
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = size_t(cluster_smem_bytes<kHeadDim, kHeads>(p.rope_dim, p.splits));
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
