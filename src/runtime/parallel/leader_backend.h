// Mirroring a backend over ranks. The leader (rank 0) runs any command unchanged on a LeaderBackend, which sends
// every call that changes state or runs the forward to the followers (control_protocol.h) and then makes it on its
// own local backend; each follower runs follow_leader(), which makes the same calls, with the same inputs and in the
// same order, on its local backend, so the collectives inside the forward meet. A follower's logits are dropped.
// Tested in tests/parallel/leader_backend_test.cpp (CPU backends on two threads over a LocalChannel).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/backend.h"
#include "runtime/parallel/control_channel.h"

namespace dsv4::parallel {

// A backend-specific call made on every rank (LeaderBackend::control): e.g. name "stage_profiling", value 0/1 turns
// CudaModel's stage profiler off or on. The same handler runs on the leader and on every follower; it throws
// dsv4::Error for a name it does not know.
using ControlHandler = std::function<void(Backend& local, const std::string& name, int64_t value)>;

// Rank 0's Backend. Sent, then made locally: new_sequence, copy_sequence, the release of a sequence (when the
// SequenceState it handed out is destroyed), forward, forward_batch, forward_block, control. Local only: config,
// numerics, pool_usage, placement, sequences_per_placement, and set_observer (observers are a debugging aid: the
// leader's activations are what one wants to see, and followers have no way to return theirs).
// The SequenceStates it hands out hold only the position and the sequence's id (state.device); the local backend's
// own state for that id is kept inside it, its position kept equal to the caller's both ways.
// An error of the local backend (a full context, a token outside the vocabulary) is thrown to the caller as usual;
// each follower hit the same error in the same call and goes on. Used by one thread at a time, like any backend.
class LeaderBackend final : public Backend {
  public:
    // `channel` must be rank 0's and outlive this backend; `on_control` is needed only for control().
    LeaderBackend(std::unique_ptr<Backend> local, ControlChannel& channel, ControlHandler on_control = {});
    ~LeaderBackend() override;  // sends "end": followers return from follow_leader
    LeaderBackend(const LeaderBackend&) = delete;
    LeaderBackend& operator=(const LeaderBackend&) = delete;

    const ModelConfig& config() const override { return local_->config(); }
    Numerics numerics() const override { return local_->numerics(); }
    SequenceState new_sequence() const override;
    SequenceState copy_sequence(const SequenceState& state) const override;
    std::vector<float> forward(SequenceState& state, std::span<const int32_t> ids, bool all_logits) override;
    std::vector<std::vector<float>> forward_batch(std::span<const BatchItem> items) override;
    void forward_batch_into(std::span<const BatchItem> items, std::vector<std::vector<float>>& logits) override;
    std::vector<float> forward_block(SequenceState& state, int64_t layer, int64_t start_position,
                                     std::span<const int32_t> ids, const float* streams_in) override;
    // The leader's own backend draws (the followers need no ids).
    bool draws_tokens() const override { return local_->draws_tokens(); }
    PoolUsage pool_usage() const override { return local_->pool_usage(); }
    // Every rank decides placements alike (slot_pools.h), so the leader's own answer stands for all.
    int placement(const SequenceState& state) const override { return local_->placement(local_state(state)); }
    std::vector<int64_t> sequences_per_placement() const override { return local_->sequences_per_placement(); }
    void set_observer(ActivationObserver observer) override { local_->set_observer(std::move(observer)); }

    // Runs on_control(local, name, value) on every rank.
    void control(const std::string& name, int64_t value);

    // The leader's own backend, for calls that concern this rank alone (CudaModel::stage_times). A call on it that
    // changes state or runs the forward is not mirrored and leaves the ranks out of step.
    Backend& local() { return *local_; }

    struct Link;  // the channel and whether "end" was sent: shared with the SequenceStates handed out

  private:
    SequenceState& local_state(const SequenceState& state) const;  // throws for a state this backend did not make

    std::unique_ptr<Backend> local_;
    std::shared_ptr<Link> link_;
    ControlHandler on_control_;
};

// A follower's loop (rank > 0): receives the leader's messages and makes each call on `local` (with its own map of
// sequence ids) until "end", then releases the sequences it still holds and returns. Throws dsv4::Error when the
// leader is gone (the channel's error) or on a protocol error: a malformed message, an unknown or reused sequence
// id, a control call without a handler. A dsv4::Error thrown by a mirrored call itself is swallowed: the leader's
// identical call threw the same error to its caller.
void follow_leader(Backend& local, ControlChannel& channel, const ControlHandler& on_control = {});

}  // namespace dsv4::parallel
