#include "runtime/slot_pools.h"

#include <algorithm>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "core/error.h"

namespace dsv4 {

SlotPool::SlotPool(int64_t sequences, int64_t pages, int64_t max_pages_per_sequence)
    : used(size_t(sequences), false),
      pages(size_t(sequences)),
      table(size_t(sequences * max_pages_per_sequence), -1),
      max_pages(max_pages_per_sequence),
      total_pages(pages) {
    for (int64_t g = pages - 1; g >= 0; --g) free_pages.push_back(int32_t(g));  // page 0 is handed out first
}

int SlotPool::take_slot() {
    std::lock_guard lock(mutex);
    auto free = std::find(used.begin(), used.end(), false);
    if (free == used.end()) return -1;
    *free = true;
    return int(free - used.begin());
}

void SlotPool::release(int slot) {
    std::lock_guard lock(mutex);
    auto& held = pages[size_t(slot)];
    free_pages.insert(free_pages.end(), held.begin(), held.end());
    held.clear();
    std::fill_n(table.begin() + slot * max_pages, max_pages, -1);
    used[size_t(slot)] = false;
}

int64_t SlotPool::slots_in_use() const {
    std::lock_guard lock(mutex);
    return std::count(used.begin(), used.end(), true);
}

RankSlotPools::RankSlotPools(int ranks, int64_t sequences, int64_t pages, int64_t page_positions, int64_t max_pages)
    : page_positions_(page_positions) {
    DSV4_CHECK(ranks >= 1 && sequences >= 1 && pages >= 0 && page_positions >= 1 && max_pages >= 0,
               "slot pools: {} ranks of {} sequences and {} pages of {} positions", ranks, sequences, pages,
               page_positions);
    for (int r = 0; r < ranks; ++r) pools_.push_back(std::make_shared<SlotPool>(sequences, pages, max_pages));
}

int RankSlotPools::least_loaded() const {
    int rank = 0;
    int64_t fewest = std::numeric_limits<int64_t>::max();
    for (int r = 0; r < ranks(); ++r) {
        const int64_t used = pools_[size_t(r)]->slots_in_use();
        if (used < fewest) fewest = used, rank = r;
    }
    return rank;
}

void RankSlotPools::reserve(std::span<const Need> needs) {
    // Every pool at once (in rank order): a step gets all its pages or none.
    std::vector<std::unique_lock<std::mutex>> locks;
    for (const auto& p : pools_) locks.emplace_back(p->mutex);
    std::vector<int64_t> wanted(pools_.size(), 0);
    for (const Need& n : needs) {
        const SlotPool& p = *pools_[size_t(n.rank)];
        const int64_t pages = (n.end + page_positions_ - 1) / page_positions_;
        DSV4_CHECK(pages <= p.max_pages, "a sequence of {} positions needs {} pages; a slot holds at most {}", n.end,
                   pages, p.max_pages);
        wanted[size_t(n.rank)] += std::max<int64_t>(0, pages - int64_t(p.pages[size_t(n.slot)].size()));
    }
    for (size_t r = 0; r < pools_.size(); ++r) {
        const SlotPool& p = *pools_[r];
        DSV4_CHECK(wanted[r] <= int64_t(p.free_pages.size()),
                   "the GPU cache pool{} is full: this step needs {} more pages of {} positions, {} of {} are free; "
                   "finish or release sequences, or give the pool more positions",
                   pools_.size() > 1 ? fmt::format(" of GPU rank {}", r) : std::string(), wanted[r], page_positions_,
                   p.free_pages.size(), p.total_pages);
    }
    for (const Need& n : needs) {
        SlotPool& p = *pools_[size_t(n.rank)];
        auto& held = p.pages[size_t(n.slot)];
        while (int64_t(held.size()) * page_positions_ < n.end) {
            p.table[size_t(n.slot * p.max_pages) + held.size()] = p.free_pages.back();
            held.push_back(p.free_pages.back());
            p.free_pages.pop_back();
        }
    }
}

Backend::PoolUsage RankSlotPools::usage() const {
    Backend::PoolUsage u;
    for (const auto& p : pools_) {
        std::lock_guard lock(p->mutex);
        u.pages_total += p->total_pages;
        u.pages_used += p->total_pages - int64_t(p->free_pages.size());
        u.sequences_total += int64_t(p->used.size());
        u.sequences_used += std::count(p->used.begin(), p->used.end(), true);
    }
    return u;
}

}  // namespace dsv4
