// The MoE combine's inputs for the tests that run it (moe_expert_test.cpp: moe_combine against the CPU;
// mhc_test.cpp: hc_post_of_moe against moe_combine then hc_post): each token picks k distinct experts in random
// order, about one assignment in 7 is dropped (expert or slot -1, each half of them), the kept ones numbered as
// slots in assignment order; random routed rows per slot and shared rows per token. Host copies for a reference and
// device copies for the kernels.
#pragma once

#include <algorithm>
#include <numeric>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/cuda/moe_expert/moe_expert.h"

namespace dsv4::gpu_test {

struct MoeCombineInputs {
    int64_t tokens = 0, dim = 0;
    int32_t k = 0, slots = 0;
    std::vector<int32_t> chosen, slot;  // [tokens, k]: expert (-1: dropped) and slot (-1: dropped) of each assignment
    std::vector<float> routed;          // [slots, dim], bf16 values
    std::vector<float> shared;          // [tokens, dim], bf16 values
    cuda::DeviceBuffer<uint16_t> d_routed, d_shared;
    cuda::DeviceBuffer<int32_t> d_chosen, d_slot;

    // moe_combine's parameters over the device copies, writing `out` ([tokens, dim] bf16).
    cuda::MoeCombineParams params(cuda::DeviceBuffer<uint16_t>& out) const {
        cuda::MoeCombineParams p;
        p.routed = reinterpret_cast<const __nv_bfloat16*>(d_routed.get());
        p.experts = d_chosen.get();
        p.assignment_slot = d_slot.get();
        p.shared = reinterpret_cast<const __nv_bfloat16*>(d_shared.get());
        p.out = reinterpret_cast<__nv_bfloat16*>(out.get());
        p.tokens = tokens;
        p.dim = dim;
        p.k = k;
        return p;
    }
};

inline MoeCombineInputs random_moe_combine_inputs(Rng& rng, int64_t tokens, int64_t dim, int32_t k, int64_t experts) {
    MoeCombineInputs in;
    in.tokens = tokens;
    in.dim = dim;
    in.k = k;
    in.chosen.resize(static_cast<size_t>(tokens * k));
    in.slot.resize(in.chosen.size());
    for (int64_t t = 0; t < tokens; ++t) {
        std::vector<int32_t> ids(static_cast<size_t>(experts));
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), rng.engine());
        for (int32_t j = 0; j < k; ++j) {
            const size_t a = size_t(t * k + j);
            const uint32_t draw = rng.engine()() % 14;
            in.chosen[a] = draw == 0 ? -1 : ids[size_t(j)];
            in.slot[a] = draw == 1 ? -1 : in.slots++;
        }
    }
    in.routed = rng.normal_bf16(int64_t(in.slots) * dim, 2.0f);
    in.shared = rng.normal_bf16(tokens * dim);
    in.d_routed = to_device(to_bf16(in.routed));
    in.d_shared = to_device(to_bf16(in.shared));
    in.d_chosen = to_device(in.chosen);
    in.d_slot = to_device(in.slot);
    return in;
}

}  // namespace dsv4::gpu_test
