// Backend: what the CLI and the runtime need from a forward implementation, whatever runs it. CpuModel (the
// reference) and CudaModel (src/runtime/cuda/) implement it; a SequenceState made by one backend is fed only to it.
// Tested by tests/model (CPU) and tests/gpu/cuda_model_test.cpp (GPU against CPU).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"
#include "model/model_config.h"
#include "model/numerics.h"
#include "model/observer.h"
#include "model/sequence_state.h"

namespace dsv4 {

// The next token drawn where the logits are computed (Backend::draws_tokens), by runtime/sampler.h's definition of
// a draw without top-k and top-p: greedy, or temperature with an optional min-p, with step 4's uniform `u` taken by
// the caller from the request's generator. So the id is the one the host Sampler gives for the same logits, and a
// step of a large batch copies no logits to the host (V4 at batch 256: 132 MB).
struct TokenDraw {
    bool greedy = true;
    float temperature = 1.0f;
    float min_p = 0.0f;
    double u = 0.0;
    int32_t id = -1;  // out: the drawn id, or -1 where the logits held a NaN
};

// One sequence's share of a batched forward (Backend::forward_batch). With `draw` (a backend that draws_tokens(),
// an item without all_logits), the next id is drawn from the item's last logits into draw->id and the item's
// logits are not returned (an empty vector).
struct BatchItem {
    SequenceState* state = nullptr;
    std::span<const int32_t> ids;
    bool all_logits = false;
    TokenDraw* draw = nullptr;
};

class Backend {
  public:
    virtual ~Backend() = default;

    virtual const ModelConfig& config() const = 0;
    virtual Numerics numerics() const = 0;

    // A fresh sequence at position 0.
    virtual SequenceState new_sequence() const = 0;

    // An independent copy of `state` (made by this backend): fed the same ids, both give the same logits, bit for
    // bit, as `state` would. The prefix cache (runtime/prefix_cache.h) keeps such copies of computed prefixes.
    // Throws dsv4::Error when the backend has no room for another sequence.
    virtual SequenceState copy_sequence(const SequenceState& state) const = 0;

    // Feeds `ids` at positions state.position, ... and advances the state. Returns the logits after every
    // position ([ids.size(), vocab], f32, on the host) when `all_logits`, else only after the last one ([1, vocab]).
    virtual std::vector<float> forward(SequenceState& state, std::span<const int32_t> ids, bool all_logits) = 0;

    // forward() for several sequences (each at most once) in one call; returns each item's logits as forward()
    // would, bit for bit (batch invariance). A backend that batches (CudaModel: shared pieces, decode steps
    // replayed from CUDA graphs) overrides it; this one runs the items one after another.
    virtual std::vector<std::vector<float>> forward_batch(std::span<const BatchItem> items) {
        check_no_draws(items);
        std::vector<std::vector<float>> logits;
        for (const BatchItem& item : items) logits.push_back(forward(*item.state, item.ids, item.all_logits));
        return logits;
    }

    // Whether forward_batch draws the items that ask for it (BatchItem::draw): CudaModel does, on the GPU.
    virtual bool draws_tokens() const { return false; }

    // forward_batch() into `logits`: item i's logits in logits[i] (its capacity reused), the vector grown to the
    // items if shorter and never shrunk (entries past the items keep their capacity for a later, larger step). A
    // caller that steps every few milliseconds (the engine, dsv4 bench) keeps its vectors from step to step, so no
    // fresh host pages are faulted in and zeroed each step (V4 at batch 256: 132 MB of logits a step).
    virtual void forward_batch_into(std::span<const BatchItem> items, std::vector<std::vector<float>>& logits) {
        std::vector<std::vector<float>> out = forward_batch(items);
        if (logits.size() < out.size()) logits.resize(out.size());
        for (size_t i = 0; i < out.size(); ++i) logits[i] = std::move(out[i]);
    }

    // Teacher forcing, for testing one backend against another block by block: runs block `layer` alone (mHC pre,
    // attention, mHC post, mHC pre, MoE, mHC post) on the input streams `streams_in` ([ids.size(), n_hc, D] f32
    // holding bf16 values) of `ids` at positions start_position, ...; advances only that layer's part of `state`
    // and not state.position (the caller runs the layers one after another over the same positions, so it passes
    // the positions: that layer must have seen exactly [0, start_position) before). Returns the output streams
    // ([ids.size(), n_hc, D], bf16 values).
    virtual std::vector<float> forward_block(SequenceState& state, int64_t layer, int64_t start_position,
                                             std::span<const int32_t> ids, const float* streams_in) = 0;

    // How full the backend's state pool is (the CUDA backend's cache pages; zeros for a backend without a pool).
    struct PoolUsage {
        int64_t pages_used = 0, pages_total = 0;
        int64_t sequences_used = 0, sequences_total = 0;
    };
    virtual PoolUsage pool_usage() const { return {}; }

    // Where a sequence's state lives, for a backend that spreads sequences over devices (CudaModel under
    // data-parallel attention: the GPU rank that owns it), else 0; and how many sequences each device holds (empty:
    // one device). A copy_sequence lives where its source does, so the prefix cache weighs where a copy would run
    // (runtime/prefix_cache.h).
    virtual int placement(const SequenceState& /*state*/) const { return 0; }
    virtual std::vector<int64_t> sequences_per_placement() const { return {}; }

    // Optional: receives named intermediate activations (attn_in, attn.q, ..., ffn.router_margin) for debugging
    // and golden diffs. A GPU backend downloads them only while an observer is set.
    virtual void set_observer(ActivationObserver observer) = 0;

  protected:
    // For a backend that does not draw tokens.
    static void check_no_draws(std::span<const BatchItem> items) {
        for (const BatchItem& item : items)
            DSV4_CHECK(item.draw == nullptr, "this backend does not draw tokens: ask for the logits instead");
    }
};

}  // namespace dsv4
