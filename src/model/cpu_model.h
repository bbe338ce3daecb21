// The CPU reference backend of DeepSeek-V4: the whole forward pass in f32 (with the official rounding and
// quantization in `model` numerics), threaded, over one sequence's state. It is the oracle the GPU backend is
// tested against. Tested against transformers and DeepSeek's reference outputs in tests/model/.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/rope.h"
#include "model/attention.h"
#include "model/backend.h"
#include "model/numerics.h"
#include "model/sequence_state.h"
#include "model/weights.h"

namespace dsv4 {

class CpuModel final : public Backend {
public:
    CpuModel(const ModelConfig& config, ModelWeights weights, Numerics numerics, int threads = 0);

    const ModelConfig& config() const override { return config_; }
    Numerics numerics() const override { return numerics_; }

    SequenceState new_sequence() const override;
    SequenceState copy_sequence(const SequenceState& state) const override;

    // Feeds `ids` at positions state.position, ... and advances the state. Returns the logits after every
    // position ([ids.size(), vocab], f32) when `all_logits`, else only after the last one ([1, vocab]).
    std::vector<float> forward(SequenceState& state, std::span<const int32_t> ids, bool all_logits) override;

    // One block alone on given input streams (Backend::forward_block).
    std::vector<float> forward_block(SequenceState& state, int64_t layer, int64_t start_position,
                                     std::span<const int32_t> ids, const float* streams_in) override;

    // Optional: receives every named intermediate activation (for debugging and golden diffs).
    void set_observer(ActivationObserver observer) override { observer_ = std::move(observer); }

private:
    void block_forward(int64_t layer, const BlockWeights& w, LayerState& state, int64_t start_position,
                       const int32_t* ids, int64_t tokens, std::vector<float>& streams);

    ModelConfig config_;
    ModelWeights weights_;
    Numerics numerics_;
    std::unique_ptr<ThreadPool> pool_;
    Precision precision_;
    cpu::RopeTable main_rope_, compress_rope_;
    ActivationObserver observer_;
};

}  // namespace dsv4
