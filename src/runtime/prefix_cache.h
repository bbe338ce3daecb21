// Prefix cache of the serving engine: sequence states of prompts (and finished conversations) already computed,
// keyed by the token ids they consumed. A new request whose prompt starts with such ids continues from a copy of
// that state (Backend::copy_sequence) and computes only the rest, with the same logits bit for bit as a full
// prefill (the forward is chunk-invariant). Least recently used entries go first when the cache is over its entry
// limit or the backend needs their room. Used only by the engine thread (not thread-safe). Tested in
// tests/runtime/prefix_cache_test.cpp and, end to end, tests/runtime/engine_test.cpp.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <vector>

#include "model/backend.h"

namespace dsv4 {

class PrefixCache {
  public:
    // max_entries 0 disables the cache.
    explicit PrefixCache(int64_t max_entries) : max_entries_(max_entries) {}

    struct Hit {
        SequenceState state;         // a copy: the caller owns and advances it
        int64_t tokens = 0;          // how many leading prompt ids it has consumed
        std::vector<float> logits;   // [vocab] after its last id when tokens == the prompt's length, else empty
    };

    // The longest entry whose ids are a prefix of `prompt`, copied. Over several devices (Backend::
    // sequences_per_placement) a copy runs where its entry is, so only entries on the devices running the fewest
    // sequences (those held less this cache's entries) are used: a device that holds a shared system prompt does
    // not draw every request that shares it while the others idle, and each device builds its own copy of it from
    // the requests that a miss sends there (the least loaded). An entry covering the whole prompt is used
    // only if it kept the logits of its last id (else the prompt's last id must still be fed: an entry one shorter
    // or less is looked for). nullopt when none, or when the copy does not fit the backend (then the least recently
    // used entries are evicted and the copy retried once per eviction, as long as entries are left).
    std::optional<Hit> find(const Backend& backend, std::span<const int32_t> prompt);

    // Keeps `state` (made by `backend`), which has consumed exactly `ids`; `logits` ([vocab] after the last id) may
    // be empty. An entry with the same ids on the same device is replaced; one on another device stays, so a shared
    // prompt is held where each device's requests built it. Evicts the least recently used entries beyond
    // max_entries.
    void insert(const Backend& backend, std::vector<int32_t> ids, SequenceState state, std::vector<float> logits);

    // Drops the least recently used entry (to free backend room); false when empty.
    bool evict_one();

    int64_t entries() const { return int64_t(entries_.size()); }
    bool enabled() const { return max_entries_ > 0; }

  private:
    struct Entry {
        std::vector<int32_t> ids;
        SequenceState state;
        std::vector<float> logits;
        int placement = 0;  // Backend::placement(state)
    };
    int64_t max_entries_;
    std::list<Entry> entries_;  // most recently used first
};

}  // namespace dsv4
