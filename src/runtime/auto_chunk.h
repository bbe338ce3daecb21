// The prefill piece a GPU model takes when its caller leaves the choice to the memory plan (CudaOptions::
// max_chunk_tokens = 0, what `dsv4 generate`, `chat` and `logits` pass unless told --max-chunk-tokens; `serve` sizes
// them to its step budgets): the largest of 8192, 4096, 2048, 1024, 512 and 256 tokens whose whole plan (weights,
// state, the workspace the piece sizes, the reserve) fits the free memory with a tenth of it spare. Larger pieces
// prefill faster and change no bit (the forward is chunk-invariant), but the workspace grows with them (422 MiB at
// 256, 2,817 MiB at 2048, ~11 GiB at 8192 on V4-Flash shapes). docs/perf.md, "Prefill rate by piece size" (4 layers
// of V4-Flash, one H100): 28.7k tokens/s at 256, 72.8k at 2048, 79.2k at 4096, 86.1k at 8192.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace dsv4 {

inline constexpr std::array<int64_t, 6> kAutoChunkTokens{8192, 4096, 2048, 1024, 512, 256};

// `plan_bytes(tokens)`: the bytes the model needs with pieces of `tokens`. The smallest candidate when none fits
// (the caller's own check then reports what does not fit).
template <class PlanBytes>
int64_t auto_chunk_tokens(const PlanBytes& plan_bytes, size_t free_bytes) {
    const size_t usable = free_bytes - free_bytes / 10;
    for (int64_t tokens : kAutoChunkTokens)
        if (plan_bytes(tokens) <= usable) return tokens;
    return kAutoChunkTokens.back();
}

}  // namespace dsv4
