// Byte layouts of the packed cache entries (docs/gpu-design.md, "KV cache and state"), shared by the host (tests,
// planners) and the device (compressor writes, attention and indexer read). Plain constexpr, no CUDA.
//   main entry:    nope e4m3 [nope] | (one zero byte if nope is odd) | rope bf16 [rope] | UE8M0 scale
//                  [ceil(nope / 64)] | zero pad to 8 bytes (V4: 448 + 128 + 7 -> 584 B, vLLM's fp8_ds_mla size; a
//                  trailing partial 64-block has a scale of its own, as the CPU reference quantizes it; the byte
//                  after an odd nope keeps the bf16 rope values 2-byte aligned, for small models whose head_dim is
//                  odd)
//   indexer entry: e2m1 pairs [dim / 2] (low nibble = even index) | E8M0 scale [ceil(dim / 32)], no padding
//                  (V4: 64 + 4 -> 68 B)
// The one definition: quant/quant.h (kv_entry_layout, indexer_key_bytes) derives its names from it.
// The element value is code * 2^(scale - 127): exactly the bf16 value the CPU reference holds.
#pragma once

#include <cstdint>

#include "core/int_math.h"

namespace dsv4::cuda {

inline constexpr int64_t kKvScaleBlock = 64;     // nope values per UE8M0 scale (main entries)
inline constexpr int64_t kIndexScaleBlock = 32;  // values per E8M0 scale (indexer keys)

struct MainEntryLayout {
    int64_t nope = 0;  // head_dim - rope_dim e4m3 values at byte 0
    int64_t rope = 0;  // bf16 values at byte rope_offset()

    constexpr int64_t rope_offset() const { return round_up(nope, 2); }
    constexpr int64_t scale_offset() const { return rope_offset() + 2 * rope; }
    constexpr int64_t scales() const { return ceil_div(nope, kKvScaleBlock); }
    constexpr int64_t bytes() const { return round_up(scale_offset() + scales(), 8); }
};

constexpr MainEntryLayout main_entry_layout(int64_t head_dim, int64_t rope_dim) {
    return MainEntryLayout{head_dim - rope_dim, rope_dim};
}

struct IndexEntryLayout {
    int64_t dim = 0;

    constexpr int64_t scale_offset() const { return dim / 2; }
    constexpr int64_t scales() const { return ceil_div(dim, kIndexScaleBlock); }
    constexpr int64_t bytes() const { return scale_offset() + scales(); }
};

static_assert(main_entry_layout(512, 64).bytes() == 584, "V4 main entry is 584 bytes");
static_assert(main_entry_layout(33, 16).rope_offset() == 18 && main_entry_layout(33, 16).bytes() == 56,
              "an odd nope part is followed by one pad byte");
static_assert(IndexEntryLayout{128}.bytes() == 68, "V4 indexer entry is 68 bytes");

}  // namespace dsv4::cuda
