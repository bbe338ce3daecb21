// Routed-expert test inputs shared by the moe_gemm and expert-layout tests: routings of tokens to experts, and
// random FP4 experts stacked as the kernels read them, with the scale codes a comparison needs.
#pragma once

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "gemm_test_common.h"

namespace dsv4::gpu_test {

// Routing of `tokens` tokens to `topk` distinct experts each (skewed: expert 0 always, when it exists).
struct Routing {
    std::vector<int32_t> offsets, row_index;
    int max_slots = 1;
};
inline Routing route(Rng& rng, int64_t tokens, int64_t experts, int64_t topk, bool skewed) {
    std::vector<std::vector<int32_t>> by_expert(static_cast<size_t>(experts));
    for (int64_t t = 0; t < tokens; ++t) {
        std::vector<int64_t> ids(static_cast<size_t>(experts));
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin() + (skewed ? 1 : 0), ids.end(), rng.engine());
        for (int64_t j = 0; j < topk; ++j) by_expert[size_t(ids[size_t(j)])].push_back(int32_t(t));
    }
    Routing r;
    r.offsets.push_back(0);
    for (const auto& rows : by_expert) {
        r.row_index.insert(r.row_index.end(), rows.begin(), rows.end());
        r.offsets.push_back(int32_t(r.row_index.size()));
        r.max_slots = std::max(r.max_slots, int(rows.size()));
    }
    return r;
}

// The scale codes of a comparison: random_fp4_weight's checkpoint-like ones; every code but NaN (stacked_experts); or
// the edges of the range the warpgroup kernel folds into the weights (kernels/cuda/moe_gemm/scale_fold.h: factors
// 2^-6 .. 2^15) with codes just outside it in some experts, whose tiles with that row are then promoted unfolded while
// the others fold in the same launch. MXFP4: codes 107 and 128, one 106 or 129 in every other expert. NVFP4 (powers
// of two, as NVIDIA's lossless cast gives): even experts a global of 2^-17 and codes 2^-3 and 2^8 (factors 2^-6 and
// 2^5), with one code 2^-4 (factor 2^-7) in every other even expert; odd ones a global of 1 and codes 2^-6 and 2^1
// (factors 2^8 and 2^15), with one code 2^2 (factor 2^16) or 2.25 (not a power of two) in every other odd expert;
// every eighth expert a global of 0.75 (nothing folds).
enum class Scales { kCheckpoint, kEveryCode, kFoldEdges };
constexpr Scales kCkpt = Scales::kCheckpoint, kEvery = Scales::kEveryCode, kEdges = Scales::kFoldEdges;

// `experts` random FP4 experts stacked [experts, n, k/2] with their scales (`scales`) and NVFP4 global scales.
struct StackedExperts {
    std::vector<uint8_t> data, scale;
    std::vector<float> global;
};
inline StackedExperts stacked_experts(Rng& rng, int64_t experts, int64_t n, int64_t k, bool nvfp4, Scales scales) {
    StackedExperts s;
    for (int64_t e = 0; e < experts; ++e) {
        HostWeight we = random_fp4_weight(rng, n, k, nvfp4);
        if (scales == Scales::kFoldEdges && !nvfp4) {
            for (size_t i = 0; i < we.scale.size(); ++i) we.scale[i] = rng.engine()() % 2 ? 107 : 128;
            if (e % 2) we.scale[size_t(rng.engine()() % we.scale.size())] = e % 4 == 1 ? 106 : 129;
        }
        float global = nvfp4 ? rng.uniform(0.001f, 3.0f) : 1.0f;
        if (scales == Scales::kFoldEdges && nvfp4) {
            // e4m3 codes 0 EEEE 000 are 2^(E - 7): 2^-6 and 2^1 beside a global of 1, 2^-3 and 2^8 beside 2^-17
            const uint8_t low = e % 2 ? 0x08 : 0x20, high = e % 2 ? 0x40 : 0x78;
            for (size_t i = 0; i < we.scale.size(); ++i) we.scale[i] = rng.engine()() % 2 ? low : high;
            const size_t outside = size_t(rng.engine()() % we.scale.size());
            if (e % 2) we.scale[outside] = e % 4 == 1 ? 0x48 : 0x41;
            if (e % 4 == 2) we.scale[outside] = 0x18;  // 2^-4: factor 2^-7
            global = e % 8 == 6 ? 0.75f : e % 2 ? 1.0f : 0x1p-17f;
        }
        if (scales == Scales::kEveryCode)
            for (size_t i = 0; i < we.scale.size(); ++i) {
                const uint8_t code = uint8_t((i * 37 + size_t(e)) % 255);  // never 255 (E8M0 NaN)
                we.scale[i] = nvfp4 && (code & 0x7F) == 0x7F ? 0 : code;   // nor e4m3 NaN
            }
        s.data.insert(s.data.end(), we.data.begin(), we.data.end());
        s.scale.insert(s.scale.end(), we.scale.begin(), we.scale.end());
        s.global.push_back(global);
    }
    return s;
}

}  // namespace dsv4::gpu_test
