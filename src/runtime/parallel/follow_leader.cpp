// follow_leader: a follower's loop, the mirror of LeaderBackend (see leader_backend.h).
#include <map>
#include <vector>

#include "core/error.h"
#include "runtime/parallel/control_protocol.h"
#include "runtime/parallel/leader_backend.h"

namespace dsv4::parallel {
namespace {

// A mirrored call: a dsv4::Error it throws is the one the leader's identical call threw to its caller (a full
// context, a token outside the vocabulary), so the follower has nothing to do but go on with the next message. A
// DeviceError is this rank's own (CUDA, NCCL): the leader may be waiting in a collective this rank will never join,
// so it ends the follower (the rank exits, and the supervisor or the leader's watchdog stops the run).
template <typename Call>
void mirrored(Call&& call) {
    try {
        call();
    } catch (const DeviceError&) {
        throw;
    } catch (const Error&) {
    }
}

class Follower {
  public:
    Follower(Backend& local, const ControlHandler& on_control) : local_(local), on_control_(on_control) {}
    ~Follower() { release_all(); }

    // Makes the call of `message` on the local backend; false for "end".
    bool handle(const ControlMessage& message) {
        return std::visit([this](const auto& m) { return on(m); }, message);
    }

  private:
    bool on(const message::NewSequence& m) {
        check_unused(m.id, "new_sequence");
        mirrored([&] { sequences_.emplace(m.id, local_.new_sequence()); });
        return true;
    }
    bool on(const message::CopySequence& m) {
        SequenceState& source = sequence(m.source, "copy_sequence");
        check_unused(m.id, "copy_sequence");
        source.position = m.position;
        mirrored([&] { sequences_.emplace(m.id, local_.copy_sequence(source)); });
        return true;
    }
    bool on(const message::Release& m) {
        sequence(m.id, "release");
        sequences_.erase(m.id);
        return true;
    }
    bool on(const message::Forward& m) {
        SequenceState& state = sequence(m.id, "forward");
        state.position = m.position;
        mirrored([&] { local_.forward(state, m.ids, m.all_logits); });
        return true;
    }
    bool on(const message::ForwardBatch& m) {
        std::vector<BatchItem> items;
        for (const message::Forward& item : m.items) {
            SequenceState& state = sequence(item.id, "forward_batch");
            state.position = item.position;
            items.push_back({&state, item.ids, item.all_logits});
        }
        mirrored([&] { local_.forward_batch_into(items, logits_); });
        return true;
    }
    bool on(const message::ForwardBlock& m) {
        SequenceState& state = sequence(m.id, "forward_block");
        const ModelConfig& c = local_.config();
        const size_t streams = m.ids.size() * size_t(c.hc_mult) * size_t(c.hidden_size);
        DSV4_CHECK(m.streams_in.size() == streams,
                   "control message forward_block carries {} input stream values for {} ids, not {}: the ranks are "
                   "out of step (a bug, or ranks loading different models)",
                   m.streams_in.size(), m.ids.size(), streams);
        state.position = m.position;
        mirrored([&] { local_.forward_block(state, m.layer, m.start_position, m.ids, m.streams_in.data()); });
        return true;
    }
    bool on(const message::Control& m) {
        DSV4_CHECK(on_control_ != nullptr,
                   "the leader sent the control call '{}', but this rank runs without a control handler (a bug)",
                   m.name);
        mirrored([&] { on_control_(local_, m.name, m.value); });
        return true;
    }
    bool on(const message::End&) {
        release_all();
        return false;
    }

    SequenceState& sequence(uint64_t id, const char* call) {
        auto it = sequences_.find(id);
        DSV4_CHECK(it != sequences_.end(),
                   "control message {} names sequence {}, which this rank does not hold: the ranks are out of step "
                   "(a bug)",
                   call, id);
        return it->second;
    }
    void check_unused(uint64_t id, const char* call) {
        DSV4_CHECK(!sequences_.contains(id),
                   "control message {} makes sequence {}, which this rank holds already: the ranks are out of step "
                   "(a bug)",
                   call, id);
    }
    // In the order the leader made them (map destruction order is unspecified).
    void release_all() {
        while (!sequences_.empty()) sequences_.erase(sequences_.begin());
    }

    Backend& local_;
    const ControlHandler& on_control_;
    std::map<uint64_t, SequenceState> sequences_;
    std::vector<std::vector<float>> logits_;  // a batch's logits, unused here; capacity kept from step to step
};

}  // namespace

void follow_leader(Backend& local, ControlChannel& channel, const ControlHandler& on_control) {
    DSV4_CHECK(channel.rank() != 0, "follow_leader runs on a follower (rank > 0), not on rank 0");
    Follower follower(local, on_control);
    while (follower.handle(decode(channel.receive()))) {
    }
}

}  // namespace dsv4::parallel
