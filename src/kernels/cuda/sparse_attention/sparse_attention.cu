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
// This file: the three-kernel path (the max pass, P V per split, the combine); the fused cluster path is in
// sparse_attention_cluster.cu, the sequential one in sparse_attention_sequential.cu, their shared parts in
// sparse_attention_tile.cuh.
#include "kernels/cuda/sparse_attention/sparse_attention_tile.cuh"

namespace dsv4::cuda {
namespace {

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

}  // namespace detail
}  // namespace dsv4::cuda
