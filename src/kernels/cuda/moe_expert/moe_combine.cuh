// moe_combine's per-token work, device side (moe_expert.h): the token's assignments in ascending expert order and the
// f32 sum of a column over them plus the shared expert's value. Shared by moe_combine (moe_expert.cu) and the kernels
// that fuse the combine into what reads its output (hc_post_of_moe, mhc_post.cu), so every combine gives the same bits.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/moe_expert/moe_expert.h"

namespace dsv4::cuda {

// A block's shared memory for one token's order.
struct MoeCombineOrder {
    int expert[kMaxCombineK], assigned[kMaxCombineK];
    int64_t slot[kMaxCombineK];  // the routed rows to add, in order
    int count;
};

// Token t's valid assignments (expert and slot >= 0) in ascending expert order (ties: selection order), as
// moe_forward's loop over experts accumulates them. k threads load the experts and slots at once, thread 0 sorts from
// shared memory. Every thread of the block calls it; the order is visible to all on return.
__device__ __forceinline__ void moe_combine_order(const MoeCombineParams& p, int64_t t, MoeCombineOrder& o) {
    if (threadIdx.x < p.k) {
        o.expert[threadIdx.x] = p.experts[t * p.k + threadIdx.x];
        o.assigned[threadIdx.x] = p.assignment_slot[t * p.k + threadIdx.x];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int order[kMaxCombineK];
        int n = 0;
        for (int j = 0; j < p.k; ++j) {
            const int e = o.expert[j];
            if (e < 0 || o.assigned[j] < 0) continue;
            int pos = n++;
            while (pos > 0 && o.expert[order[pos - 1]] > e) {
                order[pos] = order[pos - 1];
                --pos;
            }
            order[pos] = j;
        }
        for (int i = 0; i < n; ++i) o.slot[i] = o.assigned[order[i]];
        o.count = n;
    }
    __syncthreads();
}

// Column c of token t: its routed values (all loaded before the first add) summed in order in f32, plus the shared
// expert's value, rounded to bf16.
__device__ __forceinline__ __nv_bfloat16 moe_combine_value(const MoeCombineParams& p, const MoeCombineOrder& o,
                                                           int64_t t, int64_t c) {
    const int n = o.count;
    float routed[kMaxCombineK];
#pragma unroll
    for (int i = 0; i < kMaxCombineK; ++i) routed[i] = i < n ? bf16_to_f32(p.routed[o.slot[i] * p.dim + c]) : 0.0f;
    const float shared = bf16_to_f32(p.shared[t * p.dim + c]);
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxCombineK; ++i)
        if (i < n) acc += routed[i];
    return f32_to_bf16(acc + shared);
}

// kColumns consecutive columns c0.. of token t (moe_combine_value's arithmetic on each, the same bits), each row's
// values one 16-byte load (kColumns == 8; the caller checks c0 % 8 == 0 and 16-byte aligned rows).
template <int kColumns>
__device__ __forceinline__ void moe_combine_values(const MoeCombineParams& p, const MoeCombineOrder& o, int64_t t,
                                                   int64_t c0, float (&f)[kColumns], uint4& packed) {
    static_assert(kColumns == 8, "one 16-byte load a row");
    const int n = o.count;
    uint4 routed[kMaxCombineK];
#pragma unroll
    for (int i = 0; i < kMaxCombineK; ++i)
        routed[i] = i < n ? *reinterpret_cast<const uint4*>(p.routed + o.slot[i] * p.dim + c0) : make_uint4(0, 0, 0, 0);
    const uint4 shared = *reinterpret_cast<const uint4*>(p.shared + t * p.dim + c0);
    uint32_t out[kColumns / 2];
#pragma unroll
    for (int c = 0; c < kColumns; ++c) {
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < kMaxCombineK; ++i)
            if (i < n) acc += bf16x8_at(routed[i], c);
        const __nv_bfloat16 v = f32_to_bf16(acc + bf16x8_at(shared, c));
        f[c] = bf16_to_f32(v);
        const uint32_t bits = __bfloat16_as_ushort(v);
        out[c / 2] = c % 2 ? out[c / 2] | (bits << 16) : bits;
    }
    packed = make_uint4(out[0], out[1], out[2], out[3]);
}

}  // namespace dsv4::cuda
