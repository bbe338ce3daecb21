// PrefixCache: see prefix_cache.h. A linear scan over the entries: there are few (tens), and a match is a
// comparison of ids, far cheaper than the forward it saves.
#include "runtime/prefix_cache.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4 {

std::optional<PrefixCache::Hit> PrefixCache::find(const Backend& backend, std::span<const int32_t> prompt) {
    if (!enabled()) return std::nullopt;
    // The sequences each device runs: those it holds less this cache's entries there.
    std::vector<int64_t> running = backend.sequences_per_placement();
    for (const Entry& e : entries_)
        if (e.placement >= 0 && size_t(e.placement) < running.size()) --running[size_t(e.placement)];
    const int64_t fewest = running.empty() ? 0 : *std::min_element(running.begin(), running.end());
    auto least_busy = [&](int at) {
        return running.empty() || (at >= 0 && size_t(at) < running.size() && running[size_t(at)] == fewest);
    };
    auto best = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        const size_t n = it->ids.size();
        const bool usable = (n < prompt.size() || (n == prompt.size() && !it->logits.empty())) && least_busy(it->placement);
        if (!usable || n == 0 || !std::equal(it->ids.begin(), it->ids.end(), prompt.begin())) continue;
        if (best == entries_.end() || n > best->ids.size()) best = it;
    }
    if (best == entries_.end()) return std::nullopt;
    entries_.splice(entries_.begin(), entries_, best);  // most recently used
    while (true) {
        try {
            Hit hit{backend.copy_sequence(entries_.front().state), int64_t(entries_.front().ids.size()), {}};
            if (hit.tokens == int64_t(prompt.size())) hit.logits = entries_.front().logits;
            return hit;
        } catch (const Error&) {
            // No room for the copy: make room from the other entries, least recently used first.
            if (entries_.size() < 2) return std::nullopt;
            entries_.pop_back();
        }
    }
}

void PrefixCache::insert(const Backend& backend, std::vector<int32_t> ids, SequenceState state,
                         std::vector<float> logits) {
    if (!enabled() || ids.empty()) return;
    const int at = backend.placement(state);
    entries_.remove_if([&](const Entry& e) { return e.placement == at && e.ids == ids; });
    entries_.push_front(Entry{std::move(ids), std::move(state), std::move(logits), at});
    while (int64_t(entries_.size()) > max_entries_) entries_.pop_back();
}

bool PrefixCache::evict_one() {
    if (entries_.empty()) return false;
    entries_.pop_back();
    return true;
}

}  // namespace dsv4
