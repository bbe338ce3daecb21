// The two numerics modes (DESIGN.md) and the one place that applies them. Every activation is held in f32;
// in `model` numerics the Precision helpers round and quantize exactly where DeepSeek's official inference
// code materializes bf16 tensors or quantizes (spec §3, §11.3); in `reference` numerics they do nothing, which
// is what transformers computes in float32. Tested through the model tests (tests/model/).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/quantized_matrix.h"
#include "core/thread_pool.h"
#include "model/model_config.h"

namespace dsv4 {

enum class Numerics { kReference, kModel };

Numerics parse_numerics(std::string_view name);  // "reference" | "model"; throws dsv4::Error otherwise
const char* numerics_name(Numerics n);

// Refuses, with a dsv4::Error naming the field, a config whose shapes `numerics` cannot compute: in model numerics
// the indexer's Hadamard rotation needs a power-of-two index_head_dim (DeepSeek's code too). Reference numerics
// computes every config the config reader accepts.
void check_numerics_support(const ModelConfig& config, Numerics numerics);

class Precision {
public:
    Precision(Numerics numerics, ThreadPool& pool) : numerics_(numerics), pool_(pool) {}

    bool model() const { return numerics_ == Numerics::kModel; }
    ThreadPool& pool() const { return pool_; }

    // An activation the official code stores as bf16: rounded in model numerics.
    void activation(float* x, int64_t n) const;

    // y = x W^T as the official `linear()` computes it: in model numerics the input is FP8-quantized
    // (block 128, UE8M0) when W is FP8/FP4 and the output is bf16. x [tokens, W.cols], y [tokens, W.rows].
    void linear(const float* x, int64_t tokens, const QuantizedMatrix& w, float* y) const;

    // y = x W^T in f32 with no rounding in either mode (router gate, compressor projections, head).
    void linear_f32(const float* x, int64_t tokens, const QuantizedMatrix& w, float* y) const;

    // Grouped low-rank output projection (spec §7.7): x [tokens, groups * in_per_group], W [groups * out_per_group,
    // in_per_group]; group j's rows of W act on group j's slice of x. y [tokens, groups * out_per_group].
    // The official code runs it as a bf16 einsum with wo_a dequantized to bf16: no input quantization,
    // bf16 output in model numerics.
    void grouped_linear(const float* x, int64_t tokens, const QuantizedMatrix& w, int64_t groups, float* y) const;

    // The per-head unweighted RMS norm of q: bf16 arithmetic step by step in model numerics (the official
    // code normalizes the bf16 tensor in place), f32 in reference numerics (as transformers does).
    void head_rms_norm(float* q, int64_t n, float eps) const;

    // KV nope dims: FP8 round trip in blocks of 64 (model numerics only).
    void kv_nope_fp8(float* x, int64_t n) const;

    // Indexer q and keys: Hadamard rotation, bf16, FP4 round trip in blocks of 32 (model numerics only).
    void indexer_rotate_fp4(float* x, int64_t n) const;

private:
    Numerics numerics_;
    ThreadPool& pool_;
};

}  // namespace dsv4
