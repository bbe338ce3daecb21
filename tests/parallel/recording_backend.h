// RecordingBackend: a Backend decorator for the mirroring tests. It makes every call on the backend it wraps and
// records the call, its inputs and what it returned (bit patterns), and the release of every sequence, in a CallLog
// the test owns. Sequences are named by the order they were made, so the logs of two ranks that saw the same calls
// are equal. Also the tiny CPU model the tests run (the smallest fixture).
#pragma once

#include <bit>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "fixture_paths.h"
#include "io/checkpoint.h"
#include "model/backend.h"
#include "model/cpu_model.h"

namespace dsv4::testing {

struct Call {
    std::string what;                        // "new_sequence", "forward", ..., "release", "control"
    std::vector<int64_t> sequences;          // names of the sequences involved (copy_sequence: copy, source)
    std::vector<int64_t> positions;          // their position at the call
    std::vector<std::vector<int32_t>> ids;   // per sequence
    std::vector<bool> all_logits;            // per sequence
    std::vector<int64_t> args;               // forward_block: layer, start_position; control: value
    std::string name;                        // control
    std::vector<uint32_t> streams_in;        // forward_block, bits
    std::vector<std::vector<uint32_t>> out;  // the logits (streams) returned, per sequence, bits
    bool threw = false;
    bool operator==(const Call&) const = default;

    explicit Call(std::string w = "") : what(std::move(w)) {}
};
using CallLog = std::vector<Call>;

inline std::vector<uint32_t> bits(const float* data, size_t n) {
    std::vector<uint32_t> b(n);
    for (size_t i = 0; i < n; ++i) b[i] = std::bit_cast<uint32_t>(data[i]);
    return b;
}
inline std::vector<uint32_t> bits(const std::vector<float>& v) {
    return bits(v.data(), v.size());
}

class RecordingBackend final : public Backend {
    struct Recorded final : DeviceSequence {
        Recorded(int64_t name, SequenceState inner, CallLog& log) : name(name), inner(std::move(inner)), log(log) {}
        ~Recorded() override {
            Call call("release");
            call.sequences = {name};
            log.push_back(call);
        }
        int64_t name;
        SequenceState inner;
        CallLog& log;
    };

    static Recorded& recorded(const SequenceState& state) {
        auto* r = dynamic_cast<Recorded*>(state.device.get());
        DSV4_CHECK(r != nullptr, "sequence state does not belong to this recording backend");
        return *r;
    }
    SequenceState wrap(SequenceState inner, Call& call) const {
        const int64_t name = next_name_++;
        call.sequences.push_back(name);
        SequenceState out;
        out.position = inner.position;
        out.device = std::make_unique<Recorded>(name, std::move(inner), log_);
        return out;
    }
    // Runs `body`; the call goes to the log whether it returned or threw.
    template <typename Body>
    auto record(Call& call, Body&& body) const {
        try {
            auto result = body();
            log_.push_back(call);
            return result;
        } catch (const Error&) {
            call.threw = true;
            log_.push_back(call);
            throw;
        }
    }

  public:
    RecordingBackend(std::unique_ptr<Backend> inner, CallLog& log) : inner_(std::move(inner)), log_(log) {}

    const ModelConfig& config() const override { return inner_->config(); }
    Numerics numerics() const override { return inner_->numerics(); }

    SequenceState new_sequence() const override {
        Call call("new_sequence");
        return record(call, [&] { return wrap(inner_->new_sequence(), call); });
    }
    SequenceState copy_sequence(const SequenceState& state) const override {
        Recorded& source = recorded(state);
        Call call("copy_sequence");
        call.positions = {state.position};
        source.inner.position = state.position;
        return record(call, [&] {
            SequenceState copy = wrap(inner_->copy_sequence(source.inner), call);
            call.sequences.push_back(source.name);
            return copy;
        });
    }
    std::vector<float> forward(SequenceState& state, std::span<const int32_t> ids, bool all_logits) override {
        Recorded& s = recorded(state);
        Call call("forward");
        call.sequences = {s.name};
        call.positions = {state.position};
        call.ids = {{ids.begin(), ids.end()}};
        call.all_logits = {all_logits};
        s.inner.position = state.position;
        return record(call, [&] {
            std::vector<float> logits = inner_->forward(s.inner, ids, all_logits);
            state.position = s.inner.position;
            call.out.push_back(bits(logits));
            return logits;
        });
    }
    std::vector<std::vector<float>> forward_batch(std::span<const BatchItem> items) override {
        Call call("forward_batch");
        std::vector<BatchItem> inner_items;
        for (const BatchItem& item : items) {
            Recorded& s = recorded(*item.state);
            call.sequences.push_back(s.name);
            call.positions.push_back(item.state->position);
            call.ids.emplace_back(item.ids.begin(), item.ids.end());
            call.all_logits.push_back(item.all_logits);
            s.inner.position = item.state->position;
            inner_items.push_back({&s.inner, item.ids, item.all_logits, item.draw});
        }
        return record(call, [&] {
            std::vector<std::vector<float>> logits = inner_->forward_batch(inner_items);
            for (size_t i = 0; i < items.size(); ++i) items[i].state->position = inner_items[i].state->position;
            for (const std::vector<float>& l : logits) call.out.push_back(bits(l));
            return logits;
        });
    }
    std::vector<float> forward_block(SequenceState& state, int64_t layer, int64_t start_position,
                                     std::span<const int32_t> ids, const float* streams_in) override {
        Recorded& s = recorded(state);
        const size_t n = ids.size() * size_t(config().hc_mult * config().hidden_size);
        Call call("forward_block");
        call.sequences = {s.name};
        call.positions = {state.position};
        call.ids = {{ids.begin(), ids.end()}};
        call.args = {layer, start_position};
        call.streams_in = bits(streams_in, n);
        s.inner.position = state.position;
        return record(call, [&] {
            std::vector<float> streams = inner_->forward_block(s.inner, layer, start_position, ids, streams_in);
            call.out.push_back(bits(streams));
            return streams;
        });
    }
    void set_observer(ActivationObserver observer) override { inner_->set_observer(std::move(observer)); }

    // What a control handler calls (leader_backend.h's ControlHandler): "fail" throws like an unknown name would.
    void control(const std::string& name, int64_t value) {
        Call call("control");
        call.args = {value};
        call.name = name;
        record(call, [&] {
            DSV4_CHECK(name != "fail", "no control call named '{}'", name);
            return 0;
        });
    }

  private:
    std::unique_ptr<Backend> inner_;
    CallLog& log_;
    mutable int64_t next_name_ = 0;
};

// The smallest fixture (hf-edge-all-rope: vocab 128, D 64, hc 1, 3 layers) on the CPU, one thread.
inline std::unique_ptr<Backend> load_tiny_model() {
    auto checkpoint = Checkpoint::open(test_fixtures::dir("hf-edge-all-rope"));
    return std::make_unique<CpuModel>(checkpoint->config(), load_model_weights(checkpoint, checkpoint->config()),
                                      Numerics::kReference, 1);
}

}  // namespace dsv4::testing
