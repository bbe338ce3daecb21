// LeaderBackend: rank 0's mirroring Backend (see leader_backend.h). Every mirrored call is broadcast before it runs
// locally, so the followers start it at the same time as the leader.
#include "runtime/parallel/leader_backend.h"

#include <utility>

#include "core/error.h"
#include "runtime/parallel/control_protocol.h"

namespace dsv4::parallel {

struct LeaderBackend::Link {
    explicit Link(ControlChannel& c) : channel(c) {}
    void send(const ControlMessage& message) { channel.broadcast(encode(message)); }

    ControlChannel& channel;
    uint64_t next_id = 1;  // sequence ids are never reused, so a stale id is an error on the followers
    bool ended = false;    // "end" sent: followers no longer listen
};

namespace {

// What the caller's SequenceState holds in `device`: the id, and the local backend's own state of the sequence.
struct LeaderSequence final : DeviceSequence {
    LeaderSequence(uint64_t id, SequenceState state, std::shared_ptr<LeaderBackend::Link> link)
        : id(id), local(std::move(state)), link(std::move(link)) {}
    ~LeaderSequence() override {
        if (link->ended) return;
        try {
            link->send(message::Release{id});
        } catch (const std::exception&) {
            // A destructor cannot report it; the leader's next call fails on the same channel.
        }
    }

    uint64_t id;
    SequenceState local;
    std::shared_ptr<LeaderBackend::Link> link;
};

LeaderSequence* leader_sequence(const SequenceState& state) {
    return dynamic_cast<LeaderSequence*>(state.device.get());
}

SequenceState wrap(uint64_t id, SequenceState local, std::shared_ptr<LeaderBackend::Link> link) {
    SequenceState out;
    out.position = local.position;
    out.device = std::make_unique<LeaderSequence>(id, std::move(local), std::move(link));
    return out;
}

// Copies each local state's position back to the caller's state at the end of the scope, whether the call threw
// or not (a backend may have advanced a state before it threw).
class PositionsBack {
  public:
    void add(SequenceState& outer, const SequenceState& inner) { pairs_.push_back({&outer, &inner}); }
    ~PositionsBack() {
        for (auto [outer, inner] : pairs_) outer->position = inner->position;
    }

  private:
    std::vector<std::pair<SequenceState*, const SequenceState*>> pairs_;
};

}  // namespace

LeaderBackend::LeaderBackend(std::unique_ptr<Backend> local, ControlChannel& channel, ControlHandler on_control)
    : local_(std::move(local)), link_(std::make_shared<Link>(channel)), on_control_(std::move(on_control)) {
    DSV4_CHECK(local_ != nullptr, "LeaderBackend needs a local backend");
    DSV4_CHECK(channel.rank() == 0, "LeaderBackend runs on rank 0, not on rank {}", channel.rank());
}

LeaderBackend::~LeaderBackend() {
    link_->ended = true;
    try {
        link_->send(message::End{});
    } catch (const std::exception&) {
        // A follower is gone already: the others see the leader go when this process ends.
    }
}

SequenceState& LeaderBackend::local_state(const SequenceState& state) const {
    LeaderSequence* s = leader_sequence(state);
    DSV4_CHECK(s != nullptr && s->link == link_, "sequence state does not belong to this model");
    return s->local;
}

SequenceState LeaderBackend::new_sequence() const {
    const uint64_t id = link_->next_id++;
    link_->send(message::NewSequence{id});
    return wrap(id, local_->new_sequence(), link_);
}

SequenceState LeaderBackend::copy_sequence(const SequenceState& state) const {
    SequenceState& source = local_state(state);
    source.position = state.position;
    const uint64_t id = link_->next_id++;
    link_->send(message::CopySequence{id, leader_sequence(state)->id, state.position});
    return wrap(id, local_->copy_sequence(source), link_);
}

std::vector<float> LeaderBackend::forward(SequenceState& state, std::span<const int32_t> ids, bool all_logits) {
    SequenceState& inner = local_state(state);
    inner.position = state.position;
    link_->send(message::Forward{leader_sequence(state)->id, state.position, all_logits, {ids.begin(), ids.end()}});
    PositionsBack back;
    back.add(state, inner);
    return local_->forward(inner, ids, all_logits);
}

std::vector<std::vector<float>> LeaderBackend::forward_batch(std::span<const BatchItem> items) {
    std::vector<std::vector<float>> logits;
    forward_batch_into(items, logits);
    return logits;
}

void LeaderBackend::forward_batch_into(std::span<const BatchItem> items, std::vector<std::vector<float>>& logits) {
    message::ForwardBatch batch;
    std::vector<BatchItem> local_items;
    PositionsBack back;
    for (const BatchItem& item : items) {
        DSV4_CHECK(item.state != nullptr, "a batch item without a sequence state");
        SequenceState& s = local_state(*item.state);
        s.position = item.state->position;
        batch.items.push_back({leader_sequence(*item.state)->id, item.state->position, item.all_logits,
                               std::vector<int32_t>(item.ids.begin(), item.ids.end())});
        local_items.push_back({&s, item.ids, item.all_logits, item.draw});
        back.add(*item.state, s);
    }
    link_->send(batch);
    local_->forward_batch_into(local_items, logits);
}

std::vector<float> LeaderBackend::forward_block(SequenceState& state, int64_t layer, int64_t start_position,
                                                std::span<const int32_t> ids, const float* streams_in) {
    SequenceState& inner = local_state(state);
    inner.position = state.position;
    const ModelConfig& c = config();
    const size_t streams = ids.size() * size_t(c.hc_mult) * size_t(c.hidden_size);
    DSV4_CHECK(streams == 0 || streams_in != nullptr, "forward_block without input streams");
    message::ForwardBlock m{leader_sequence(state)->id,
                            state.position,
                            layer,
                            start_position,
                            std::vector<int32_t>(ids.begin(), ids.end()),
                            {}};
    if (streams > 0) m.streams_in.assign(streams_in, streams_in + streams);
    link_->send(m);
    PositionsBack back;
    back.add(state, inner);
    return local_->forward_block(inner, layer, start_position, ids, streams_in);
}

void LeaderBackend::control(const std::string& name, int64_t value) {
    DSV4_CHECK(on_control_ != nullptr, "control call '{}': this LeaderBackend was made without a control handler",
               name);
    link_->send(message::Control{name, value});
    on_control_(*local_, name, value);
}

}  // namespace dsv4::parallel
