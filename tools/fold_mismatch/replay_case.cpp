// Replays MoeGemm.WarpgroupKernelEqualsWarpMmaBitwise's host-side draws (tests/gpu/moe_gemm_test.cpp, in its order)
// for the seed of the 2026-12-07 failure and describes one element of its last NVFP4 case (the fold edges at 64-slot
// passes): its expert, global scale, the item's codes; and writes element.bin (the activation row, the weight row,
// its codes, the global) for tensor_core_model.py. No GPU. Build from the repository root:
//   g++ -std=c++20 -O2 -I tests -I tests/gpu -I src -I /usr/local/cuda/include tools/fold_mismatch/replay_case.cpp \
//       -o /tmp/replay_case -L/usr/local/cuda/lib64 -lcudart -lgtest -lpthread
// then `/tmp/replay_case [ELEMENT]` (default 3771140; ~8 minutes on two cores: it draws every case's 1 GiB of experts).
// The case list must follow the test's.
#include <cstdio>
#include <cstdlib>
#include "moe_test_common.h"
using namespace dsv4;
using namespace dsv4::gpu_test;
struct Case {
    int64_t tokens, experts, topk, n, k;
    bool skewed;
    int bound;
    Scales scales;
};
int main(int argc, char** argv) {
    setenv("DSV4_TEST_SEED", "2261676159", 1);
    const size_t target = argc > 1 ? size_t(std::strtoull(argv[1], nullptr, 10)) : 3771140;
    Rng rng;
    const Case cases[] = {{512, 256, 6, 2048, 4096, false, 512, kCkpt}, {300, 16, 6, 4096, 2048, false, 300, kCkpt},
                          {300, 8, 3, 72, 512, true, 300, kCkpt},       {200, 32, 4, 264, 2048, false, 256, kEvery},
                          {256, 256, 6, 2048, 4096, false, 64, kCkpt},  {256, 256, 6, 4096, 2048, false, 128, kCkpt},
                          {40, 16, 6, 200, 1024, true, 64, kCkpt},      {60, 32, 4, 264, 2048, false, 64, kEvery},
                          {90, 32, 4, 264, 2048, false, 128, kEvery},   {64, 256, 6, 2048, 4096, false, 16, kCkpt},
                          {20, 16, 6, 200, 1024, true, 16, kEvery},     {256, 256, 6, 4096, 2048, false, 128, kEdges},
                          {512, 256, 6, 2048, 4096, false, 512, kEdges}};
    for (bool nvfp4 : {false, true})
        for (const Case& c : cases) {
            const Routing routing = route(rng, c.tokens, c.experts, c.topk, c.skewed);
            const StackedExperts stacked = stacked_experts(rng, c.experts, c.n, c.k, nvfp4, c.scales);
            std::vector<float> x = random_activations(rng, c.tokens, c.k);
            std::printf("case %s tokens %lld N %lld done\n", nvfp4 ? "nv" : "mx", (long long)c.tokens, (long long)c.n);
            std::fflush(stdout);
            if (!(nvfp4 && &c == &cases[12])) continue;
            const int64_t n = c.n, k = c.k, scale_cols = k / 16;
            const int64_t slot = int64_t(target) / n, col = int64_t(target) % n, n0 = col / 128 * 128;
            int64_t e = 0;
            while (routing.offsets[size_t(e + 1)] <= slot) ++e;
            const float global = stacked.global[size_t(e)];
            const int row_act = routing.row_index[size_t(slot)];
            std::printf("element %zu: slot %lld act row %d col %lld expert %lld (slots %d..%d) global %a\n", target,
                        (long long)slot, row_act, (long long)col, (long long)e, routing.offsets[size_t(e)],
                        routing.offsets[size_t(e) + 1], double(global));
            auto codes_of = [&](int64_t row) { return stacked.scale.data() + size_t(row * scale_cols); };
            int odd = 0;
            for (int64_t r = n0; r < n0 + 128; ++r)
                for (int64_t j = 0; j < scale_cols; ++j) {
                    const uint8_t v = codes_of(e * n + r)[j];
                    if (v != 0x08 && v != 0x40 && v != 0x78) {
                        ++odd;
                        std::printf("  item row %lld code %lld = %02x\n", (long long)r, (long long)j, v);
                    }
                }
            std::printf("row codes:");
            for (int64_t j = 0; j < scale_cols; ++j) std::printf(" %02x", codes_of(e * n + col)[j]);
            std::printf("\n");
            // the activation row's values and the weight row's nibbles, for an offline look
            FILE* f = std::fopen("element.bin", "wb");
            std::fwrite(x.data() + size_t(row_act) * size_t(k), 4, size_t(k), f);
            std::fwrite(stacked.data.data() + size_t((e * n + col) * (k / 2)), 1, size_t(k / 2), f);
            std::fwrite(codes_of(e * n + col), 1, size_t(scale_cols), f);
            std::fwrite(&global, 4, 1, f);
            std::fclose(f);
        }
}
