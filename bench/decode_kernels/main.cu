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
//                                   attn_prefill|inputs|phases]
//                                  [--chosen-only]
// (default: all; numbers recorded in docs/perf.md; mma1, mma=N: the routed experts at batch 1 or N alone, for a
// profiler; phases: the batch-1 pre-mix's and sparse attention's cluster kernels, the attention's inputs and
// the router on their phase clocks (where their time goes, which ncu's few stall samples of such short kernels cannot
// say); rows: the decode passes' row tiles side by side, bitwise; attn_prefill: the sequential sparse attention of an
// 8k prefill piece at V4-Flash's three slot counts, with a hash of its output to compare builds;
// --chosen-only: prefill and prefill_nvfp4 time only the launcher's choice, not the warp-MMA reference beside it,
// which took half of those modes' device time: for A/B calls of two builds, whose hashes then compare their bits;
// tests/gpu's MoeGemm.* compare the kernels bitwise)
// This file: the options and the table heads; the benches are in hc_bench.cu, moe_bench.cu, attention_bench.cu and
// dense_and_draw_bench.cu, their shared parts in common.cuh.
#include <cstdio>
#include <cstring>
#include <string>

#include "common.cuh"

using namespace dsv4::bench;

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
    if (only == "phases") bench_phases();  // the batch-1 cluster kernels' phases on the clock (phases_bench.cu)
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
