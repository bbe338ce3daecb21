// The model's weights on one GPU, in their checkpoint formats (docs/gpu-design.md "Data on the device"): FP8
// e4m3 + f32 block scales (E8M0 decoded at upload, exact), routed experts of a layer concatenated per projection
// (packed e2m1 + E8M0/e4m3 scales as stored, or dense), dense matrices as stored (F32 or BF16), the embedding as a
// bf16 table (the forward rounds it to bf16 anyway), small vectors as f32. Matrices that read the same input are
// stacked by rows where the stack is itself a valid matrix of their format (one launch for all; each part stays
// addressable as a view into the stack, no second copy). Everything lives in one device arena, filled through a
// pinned staging buffer. measure_weights() gives the size before anything is allocated.
// Tested through tests/gpu/cuda_model_test.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "core/progress.h"
#include "core/quantized_matrix.h"
#include "kernels/cuda/common/device_buffer.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace dsv4::cuda {

struct DeviceMatrix {
    WeightFormat format = WeightFormat::kF32;  // kF32, kBF16 or kFp8Block
    int64_t rows = 0, cols = 0;
    const void* data = nullptr;    // [rows, cols] f32 / bf16 / e4m3
    const float* scale = nullptr;  // kFp8Block: [ceil(rows/128), ceil(cols/128)] f32
};

// One projection (w1, w2 or w3) of all routed experts of a layer.
struct DeviceExperts {
    WeightFormat format = WeightFormat::kFp4Mx;  // kFp4Mx, kNvfp4, kF32 or kBF16
    int64_t experts = 0, rows = 0, cols = 0;
    const void* data = nullptr;      // [experts, rows, cols / 2] packed e2m1, or [experts, rows, cols] dense
    const uint8_t* scale = nullptr;  // [experts, rows, cols / 32] E8M0 or [experts, rows, cols / 16] e4m3
    const float* global = nullptr;   // [experts] f32 (NVFP4)
};

struct DeviceHc {
    const float* fn = nullptr;     // [rows, n_hc * D]
    const float* base = nullptr;   // [rows]
    const float* scale = nullptr;  // [3] or [1]
};

struct DeviceCompressor {
    int64_t ratio = 0, head_dim = 0;
    bool overlap = false;
    DeviceMatrix wkv, wgate;      // [c * head_dim, D] dense, used in f32 (in DeviceAttention::f32_proj if stacked)
    const float* ape = nullptr;   // [ratio, c * head_dim]
    const float* norm = nullptr;  // [head_dim]
};

struct DeviceIndexer {
    DeviceMatrix wq_b;          // [nI * dI, q_lora_rank]
    DeviceMatrix weights_proj;  // [nI, D] dense (in DeviceAttention::f32_proj if stacked)
    DeviceCompressor compressor;
};

struct DeviceAttention {
    const float* sink = nullptr;     // [H]
    DeviceMatrix wq_a;               // [q_lora_rank, D] (the first rows of wq_a_wkv where they stack)
    const float* q_norm = nullptr;   // [q_lora_rank]
    DeviceMatrix wq_b;               // [H * d, q_lora_rank]
    DeviceMatrix wkv;                // [d, D] (the last rows of wq_a_wkv where they stack)
    const float* kv_norm = nullptr;  // [d]
    DeviceMatrix wo_a;               // [g * o_lora_rank, H * d / g]
    DeviceMatrix wo_b;               // [D, g * o_lora_rank]
    std::optional<DeviceCompressor> compressor;
    std::optional<DeviceIndexer> indexer;
    // wq_a and wkv stacked by rows, [q_lora_rank + d, D]: one launch for the two projections of x. Only where the
    // stack is a matrix of their format itself: one dense format, or FP8 with q_lora_rank % 128 == 0 (wkv's 128-row
    // scale blocks then follow wq_a's unchanged); data == nullptr otherwise.
    DeviceMatrix wq_a_wkv;
    // The f32 projections of x (f32_projections below) stacked by rows, [sum of their rows, D]: one dense_linear for
    // all. Only where they share one dense format; data == nullptr otherwise (and on layers without a compressor).
    DeviceMatrix f32_proj;
};

// The dense projections of x that an attention sub-block computes with f32 outputs, in one fixed order: the main
// compressor's wkv and wgate, the indexer compressor's wkv and wgate, the indexer's weights_proj (the present ones).
// DeviceAttention::f32_proj stacks their rows in this order. For AttentionWeights (host) and DeviceAttention alike.
template <typename Attention>
auto f32_projections(Attention& a) {
    std::vector<decltype(&a.compressor->wkv)> parts;
    if (a.compressor) {
        parts.push_back(&a.compressor->wkv);
        parts.push_back(&a.compressor->wgate);
    }
    if (a.indexer) {
        parts.push_back(&a.indexer->compressor.wkv);
        parts.push_back(&a.indexer->compressor.wgate);
        parts.push_back(&a.indexer->weights_proj);
    }
    return parts;
}

struct DeviceMoe {
    DeviceMatrix gate;                 // [E, D] dense, used in f32
    const float* bias = nullptr;       // [E] (score routing); null on hash layers
    const int32_t* tid2eid = nullptr;  // [vocab, k] (hash layers)
    DeviceExperts w1, w2, w3;          // routed: [E][I, D], [E][D, I], [E][I, D]
    DeviceMatrix s1, s2, s3;           // shared expert: [I, D], [D, I], [I, D] (s1, s3 in s1_s3 if stacked)
    // s1 (gate) and s3 (up) stacked by rows, [2 I, D]: one launch for both. Only where the stack is a matrix of their
    // format: one dense format, or FP8 with I % 128 == 0; data == nullptr otherwise.
    DeviceMatrix s1_s3;
};

struct DeviceBlock {
    const float* attn_norm = nullptr;
    const float* ffn_norm = nullptr;
    DeviceHc hc_attn, hc_ffn;
    DeviceAttention attn;
    DeviceMoe ffn;
};

struct DeviceWeights {
    const __nv_bfloat16* embed = nullptr;  // [vocab, D] bf16
    DeviceMatrix head;                     // [vocab, D] dense, used in f32
    const float* norm = nullptr;           // [D]
    DeviceHc hc_head;
    std::vector<DeviceBlock> layers;
};

// Which routed experts of every layer go to this GPU: [first, first + count) (expert parallelism; all of them on one
// GPU). DeviceExperts then holds those `count`, expert `first` at index 0; no other expert's bytes are read.
struct ExpertShare {
    int64_t first = 0, count = -1;  // count -1: every expert
    // The held experts come without host bytes (CudaOptions::random_experts_seed): their space in the arena is
    // reserved, not written, for the caller to fill on the device. MXFP4 only. Otherwise a routed expert without
    // bytes is an error naming it.
    bool generated = false;
};

// Bytes the arena needs for `weights` (MTP layers are not uploaded: the forward does not run them). Throws
// dsv4::Error naming the tensor when a format has no GPU path yet.
size_t measure_weights(const ModelConfig& config, const ModelWeights& weights, ExpertShare experts = {});

// Uploads into `arena` (>= measure_weights bytes) and returns the device views, drawing the bytes copied so far on
// `progress` where given. Synchronous.
DeviceWeights upload_weights(const ModelConfig& config, const ModelWeights& weights, DeviceBuffer<uint8_t>& arena,
                             cudaStream_t stream, ExpertShare experts = {}, ProgressLine* progress = nullptr);

}  // namespace dsv4::cuda
