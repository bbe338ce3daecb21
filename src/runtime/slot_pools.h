// The host bookkeeping of the GPU state pools: which sequence slots are taken and which cache pages each sequence
// holds, for one GPU or, under data-parallel attention (docs/parallel.md), for every rank's GPU. Every rank keeps
// every rank's pools and makes the same calls in the same order (the leader's calls are mirrored), so every rank
// decides alike where a new sequence goes and whether a step's pages fit, and no rank enters a collective that
// another one skipped. Plain C++: the device state lives in CudaModel (runtime/cuda/); tested on the CPU in
// tests/runtime/slot_pools_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "model/backend.h"

namespace dsv4 {

// One GPU's slots and cache pages, shared with the handles of the sequences that hold them (a handle gives its slot
// back when its sequence goes, whichever thread that is on).
struct SlotPool {
    SlotPool(int64_t sequences, int64_t pages, int64_t max_pages);

    // A free slot, taken; -1 when every slot is in use.
    int take_slot();
    // The slot and its pages back to the pool; its page table row cleared.
    void release(int slot);
    int64_t slots_in_use() const;  // locks

    mutable std::mutex mutex;
    std::vector<bool> used;                   // per slot
    std::vector<int32_t> free_pages;          // page ids not held by any sequence (taken from the back)
    std::vector<std::vector<int32_t>> pages;  // per slot: the pages it holds, in position order
    std::vector<int32_t> table;               // [slots, max_pages] the page table (-1: none), uploaded with a piece
    int64_t max_pages = 0;                    // per slot
    int64_t total_pages = 0;                  // of the pool
};

// Every rank's pools (one without data-parallel attention), alike on every rank.
class RankSlotPools {
  public:
    // `ranks` pools of `sequences` slots and `pages` pages of `page_positions` positions each; a sequence holds at
    // most `max_pages`.
    RankSlotPools(int ranks, int64_t sequences, int64_t pages, int64_t page_positions, int64_t max_pages);

    int ranks() const { return int(pools_.size()); }
    const std::shared_ptr<SlotPool>& pool(int rank) const { return pools_[size_t(rank)]; }
    // Where a new sequence goes: the rank with the fewest sequences, the lowest of equals.
    int least_loaded() const;

    // Gives each sequence (its rank's pool, its slot) the pages that cover positions [0, end), or throws dsv4::Error
    // and gives none, on any rank, when a rank's pool has too few free pages.
    struct Need {
        int rank = 0, slot = 0;
        int64_t end = 0;
    };
    void reserve(std::span<const Need> needs);

    Backend::PoolUsage usage() const;  // summed over the ranks

  private:
    std::vector<std::shared_ptr<SlotPool>> pools_;
    int64_t page_positions_ = 0;
};

}  // namespace dsv4
