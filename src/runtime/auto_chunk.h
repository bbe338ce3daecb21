// The prefill piece a GPU model takes when its caller leaves the choice to the memory plan (CudaOptions::
// max_chunk_tokens = 0, what `dsv4 generate`, `chat` and `logits` on one GPU pass unless told --max-chunk-tokens;
// `serve` sizes them to its step budgets): the largest of 2048, 1024, 512 and 256 tokens whose whole plan (weights,
// state, the workspace the piece sizes, the reserve) fits the free memory with a tenth of it spare. Larger pieces
// prefill faster (docs/perf.md: 2.4x from 256 to 2048 tokens on V4-Flash shapes, H100) and change no bit (the
// forward is chunk-invariant), but the workspace grows with them (422 MiB at 256, 2,817 MiB at 2048 on V4-Flash
// shapes).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace dsv4 {

inline constexpr std::array<int64_t, 4> kAutoChunkTokens{2048, 1024, 512, 256};

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
