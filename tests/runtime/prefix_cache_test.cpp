// PrefixCache (runtime/prefix_cache.h) against a backend that only hands out states: the longest usable entry wins,
// a whole-prompt entry needs its logits, the used entry becomes the most recent, and, for a backend that places
// sequences on several devices (CudaModel under data-parallel attention), only entries where a new sequence would go
// are continued from, and a prompt is kept once per device. The engine's end-to-end use of the cache is tests/runtime/engine_test.cpp.
#include "runtime/prefix_cache.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"

namespace dsv4 {
namespace {

// States carry the device they live on; copies stay there. Nothing is computed.
class PlacedStates final : public Backend {
  public:
    struct Placed final : DeviceSequence {
        explicit Placed(int at) : at(at) {}
        int at;
    };

    const ModelConfig& config() const override { return config_; }
    Numerics numerics() const override { return Numerics::kModel; }
    SequenceState new_sequence() const override {
        SequenceState s;
        s.device = std::make_unique<Placed>(0);
        return s;
    }
    SequenceState copy_sequence(const SequenceState& state) const override {
        ++copies;
        SequenceState s;
        s.position = state.position;
        s.device = std::make_unique<Placed>(placement(state));
        return s;
    }
    std::vector<float> forward(SequenceState&, std::span<const int32_t>, bool) override { throw Error("unused"); }
    std::vector<float> forward_block(SequenceState&, int64_t, int64_t, std::span<const int32_t>,
                                     const float*) override {
        throw Error("unused");
    }
    void set_observer(ActivationObserver) override {}
    int placement(const SequenceState& state) const override { return static_cast<const Placed&>(*state.device).at; }
    std::vector<int64_t> sequences_per_placement() const override { return held; }

    SequenceState state_at(int at, int64_t position) const {
        SequenceState s;
        s.position = position;
        s.device = std::make_unique<Placed>(at);
        return s;
    }

    std::vector<int64_t> held;  // sequences each device holds (the cache's entries included); empty: one device
    mutable int copies = 0;

  private:
    ModelConfig config_;
};

std::vector<int32_t> ids(int n, int32_t first = 1) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) v[size_t(i)] = first + i;
    return v;
}

TEST(PrefixCache, TheLongestUsablePrefixWins) {
    PlacedStates backend;
    PrefixCache cache(8);
    cache.insert(backend, ids(4), backend.state_at(0, 4), {});
    cache.insert(backend, ids(10), backend.state_at(0, 10), {});
    cache.insert(backend, ids(6, 100), backend.state_at(0, 6), {});  // not a prefix
    auto hit = cache.find(backend, ids(12));
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->tokens, 10);
    EXPECT_EQ(hit->state.position, 10);
    EXPECT_TRUE(hit->logits.empty());
    // The whole prompt: usable only with its logits, else the next shorter entry.
    hit = cache.find(backend, ids(10));
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->tokens, 4);
    cache.insert(backend, ids(10), backend.state_at(0, 10), std::vector<float>{0.5f, 1.5f});
    hit = cache.find(backend, ids(10));
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->tokens, 10);
    EXPECT_EQ(hit->logits, (std::vector<float>{0.5f, 1.5f}));
    EXPECT_FALSE(cache.find(backend, ids(3, 50)));
}

// Over two devices an entry is used only where the fewest sequences run (held, less the cache's own entries):
// a shared prompt cached on device 0 does not draw a request while device 0 runs more than device 1 (that request
// computes its prompt on device 1, and its entries then serve device 1), but an idle device's entries serve.
TEST(PrefixCache, OnlyEntriesOnTheDevicesRunningTheFewest) {
    PlacedStates backend;
    PrefixCache cache(8);
    cache.insert(backend, ids(256), backend.state_at(0, 256), {});
    backend.held = {1, 0};  // the entry alone: nothing runs anywhere
    auto hit = cache.find(backend, ids(300));
    ASSERT_TRUE(hit) << "an entry is not a running sequence";
    EXPECT_EQ(hit->tokens, 256);
    backend.held = {1 + 3, 2};
    EXPECT_FALSE(cache.find(backend, ids(300))) << "device 0 runs 3, device 1 runs 2";
    EXPECT_EQ(backend.copies, 1);
    cache.insert(backend, ids(128), backend.state_at(1, 128), {});
    backend.held = {1 + 3, 1 + 2};
    hit = cache.find(backend, ids(300));
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->tokens, 128) << "the shorter entry on device 1, not the longer one on device 0";
    EXPECT_EQ(backend.placement(hit->state), 1);
    backend.held = {1 + 2, 1 + 2};
    hit = cache.find(backend, ids(300));
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->tokens, 256) << "both run 2: the longest entry";
    EXPECT_EQ(backend.placement(hit->state), 0);
}

// The same prompt computed on two devices is kept on both (each device's requests built it there), so whichever
// device runs the fewest continues from its own copy; the same ids on the same device replace the older entry.
TEST(PrefixCache, ASharedPromptIsKeptOnEveryDevice) {
    PlacedStates backend;
    PrefixCache cache(8);
    cache.insert(backend, ids(256), backend.state_at(0, 256), {});
    cache.insert(backend, ids(256), backend.state_at(1, 256), {});
    EXPECT_EQ(cache.entries(), 2);
    for (int busy : {0, 1}) {
        backend.held = {1 + (busy == 0 ? 3 : 2), 1 + (busy == 1 ? 3 : 2)};
        auto hit = cache.find(backend, ids(300));
        ASSERT_TRUE(hit) << "device " << busy << " busier";
        EXPECT_EQ(hit->tokens, 256);
        EXPECT_EQ(backend.placement(hit->state), 1 - busy) << "the copy on the device running fewer";
    }
    cache.insert(backend, ids(256), backend.state_at(0, 256), {});
    EXPECT_EQ(cache.entries(), 2) << "device 0's entry replaced, device 1's kept";
}

TEST(PrefixCache, EvictsTheLeastRecentlyUsedBeyondItsLimit) {
    PlacedStates backend;
    PrefixCache cache(2);
    cache.insert(backend, ids(4), backend.state_at(0, 4), {});
    cache.insert(backend, ids(5), backend.state_at(0, 5), {});
    ASSERT_TRUE(cache.find(backend, ids(6)));  // ids(5) is now the most recent; then ids(4)
    cache.insert(backend, ids(3, 40), backend.state_at(0, 3), {});
    EXPECT_EQ(cache.entries(), 2);
    auto hit = cache.find(backend, ids(6));
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->tokens, 5) << "ids(4), the least recently used, went";
    hit.reset();
    cache.insert(backend, ids(4), backend.state_at(0, 4), {});
    EXPECT_EQ(cache.entries(), 2);
    EXPECT_FALSE(cache.find(backend, ids(4, 40)));  // ids(3, 40) went when ids(4) came back
}

}  // namespace
}  // namespace dsv4
