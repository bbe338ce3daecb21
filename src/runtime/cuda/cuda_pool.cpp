// The per-sequence state pool of CudaModel: its layout (window rings, paged compressed entries and indexer keys,
// compressor states; see PoolLayout in cuda_model_impl.h), sequence slots and the cache pages they hold.
#include <algorithm>
#include <mutex>
#include <numeric>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/compressor/kv_entry_layout.h"
#include "runtime/cuda/cuda_model_impl.h"

namespace dsv4 {
namespace {

// Positions per cache page: a multiple of every compress ratio (so a page holds whole entries of every layer), at
// least 256 so a page table stays short.
int64_t page_positions(const ModelConfig& c) {
    int64_t lcm = 1;
    for (int64_t r : c.compress_ratios)
        if (r > 0) lcm = std::lcm(lcm, r);
    return (std::max<int64_t>(256, lcm) + lcm - 1) / lcm * lcm;
}

}  // namespace

CudaSequence::~CudaSequence() {
    if (slot >= 0) pool->release(slot);  // else new_sequence failed before a slot was taken
}

PoolLayout plan_pool(const ModelConfig& c, const CudaOptions& o) {
    PoolLayout p;
    p.sequences = o.max_sequences;
    p.context = o.max_context;
    p.chunk = o.max_chunk_tokens;
    p.entry_bytes = cuda::main_entry_layout(c.head_dim, c.rope_head_dim).bytes();
    p.index_entry_bytes = c.index_head_dim > 0 ? cuda::IndexEntryLayout{c.index_head_dim}.bytes() : 0;
    p.page_positions = page_positions(c);
    p.max_pages = (p.context + p.page_positions - 1) / p.page_positions;
    // Default: every sequence can reach max_context at once (a sequence holds whole pages).
    const int64_t pool_positions =
        o.pool_positions > 0 ? o.pool_positions : o.max_sequences * p.max_pages * p.page_positions;
    p.pages = (pool_positions + p.page_positions - 1) / p.page_positions;
    const int64_t L = c.num_layers, S = p.sequences, W = c.sliding_window;
    p.ring_row = 0;
    p.chunk_row = L * S * W;
    int64_t row = p.chunk_row + p.chunk, index_row = 0, floats = 0;
    for (int64_t l = 0; l < L; ++l) {
        const int64_t ratio = c.compress_ratios[size_t(l)];
        const int64_t per_page = ratio > 0 ? p.page_positions / ratio : 0;
        p.page_entries.push_back(per_page);
        p.compressed_row.push_back(ratio > 0 ? row : -1);
        row += p.pages * per_page;
        p.index_row.push_back(ratio == 4 ? index_row : -1);
        index_row += ratio == 4 ? p.pages * per_page : 0;
        auto state = [&](int64_t head_dim) {
            const int64_t width = (ratio == 4 ? 2 : 1) * head_dim, slots = (ratio == 4 ? 2 : 1) * ratio;
            const int64_t at = floats;
            floats += 2 * S * slots * width;  // kv then score
            return at;
        };
        p.state_offset.push_back(ratio > 0 ? state(c.head_dim) : -1);
        p.index_state_offset.push_back(ratio == 4 ? state(c.index_head_dim) : -1);
    }
    p.rows = row;
    p.index_rows = index_row;
    p.state_floats = floats;
    DSV4_CHECK(p.rows < (int64_t(1) << 31) && p.index_rows < (int64_t(1) << 31),
               "the GPU state pool of {} positions has more entries than int32 rows can address", pool_positions);
    return p;
}

int64_t PoolLayout::attention_slots(const ModelConfig& c, int64_t layer) const {
    const int64_t ratio = c.compress_ratios[size_t(layer)];
    if (ratio == 0) return c.sliding_window;
    return c.sliding_window + (ratio == 4 ? c.index_topk : context / ratio);
}

size_t PoolLayout::bytes() const {
    return size_t(rows * entry_bytes) + size_t(index_rows * index_entry_bytes) + size_t(state_floats) * 4 + 3 * kArenaAlign;
}

int64_t CudaModel::Impl::entry_row(int64_t layer, int slot, int64_t e, bool index) const {
    const int64_t per_page = pool.page_entries[size_t(layer)];
    const int64_t page = slots->table[size_t(slot * pool.max_pages + e / per_page)];
    return (index ? pool.index_row : pool.compressed_row)[size_t(layer)] + page * per_page + e % per_page;
}

Backend::PoolUsage CudaModel::pool_usage() const {  // every rank's under data-parallel attention
    return impl_->pools->usage();
}

int CudaModel::placement(const SequenceState& state) const {
    const auto* seq = dynamic_cast<const CudaSequence*>(state.device.get());
    DSV4_CHECK(seq && seq->owner == impl_.get(), "sequence state does not belong to this model");
    return seq->rank;
}

std::vector<int64_t> CudaModel::sequences_per_placement() const {
    if (!impl_->data_parallel()) return {};
    std::vector<int64_t> held;
    for (int r = 0; r < impl_->pools->ranks(); ++r) held.push_back(impl_->pools->pool(r)->slots_in_use());
    return held;
}

SequenceState CudaModel::copy_sequence(const SequenceState& state) const {
    Impl& m = *impl_;
    const auto* from_seq = dynamic_cast<const CudaSequence*>(state.device.get());
    DSV4_CHECK(from_seq && from_seq->owner == &m && state.layers.empty(), "sequence state does not belong to this model");
    DSV4_CUDA_CHECK(cudaSetDevice(m.options.device));
    SequenceState copy = m.new_sequence_on(from_seq->rank);  // the copy stays on its source's rank
    const int from = from_seq->slot, to = static_cast<const CudaSequence*>(copy.device.get())->slot;
    const RankSlotPools::Need need{from_seq->rank, to, state.position};
    m.pools->reserve(std::span(&need, 1));  // throws when the pool is full; `copy` then gives its slot back
    if (from_seq->rank != m.dp_rank) {  // another GPU copies the state
        copy.position = state.position;
        return copy;
    }

    cudaStream_t stream = m.stream->get();
    auto copy_bytes = [&](uint8_t* base, int64_t from_offset, int64_t to_offset, int64_t bytes) {
        DSV4_CUDA_CHECK(cudaMemcpyAsync(base + to_offset, base + from_offset, size_t(bytes), cudaMemcpyDeviceToDevice,
                                        stream));
    };
    const PoolLayout& p = m.pool;
    const int64_t S = p.sequences, W = m.config.sliding_window;
    const int64_t pages = (state.position + p.page_positions - 1) / p.page_positions;
    std::vector<int32_t> from_pages, to_pages;
    {
        std::lock_guard lock(m.slots->mutex);
        from_pages = m.slots->pages[size_t(from)];
        to_pages = m.slots->pages[size_t(to)];
    }
    DSV4_ASSERT(int64_t(from_pages.size()) >= pages && int64_t(to_pages.size()) >= pages, "pages of a copied sequence");
    auto* entries = m.entries;
    auto* state_bytes = reinterpret_cast<uint8_t*>(m.comp_state);
    for (int64_t l = 0; l < m.config.num_layers; ++l) {
        const int64_t ring = p.ring_row + l * S * W;
        copy_bytes(entries, (ring + from * W) * p.entry_bytes, (ring + to * W) * p.entry_bytes, W * p.entry_bytes);
        const int64_t ratio = m.config.compress_ratios[size_t(l)];
        // Compressor states: kv [S, slots, width] then score [S, slots, width] (plan_pool).
        auto copy_state = [&](int64_t offset, int64_t head_dim) {
            const int64_t width = (ratio == 4 ? 2 : 1) * head_dim, slots = (ratio == 4 ? 2 : 1) * ratio;
            const int64_t n = slots * width * int64_t(sizeof(float));
            for (int64_t half = 0; half < 2; ++half) {
                const int64_t at = offset * int64_t(sizeof(float)) + half * S * n;
                copy_bytes(state_bytes, at + from * n, at + to * n, n);
            }
        };
        if (p.state_offset[size_t(l)] >= 0) copy_state(p.state_offset[size_t(l)], m.config.head_dim);
        if (p.index_state_offset[size_t(l)] >= 0) copy_state(p.index_state_offset[size_t(l)], m.config.index_head_dim);
        // Compressed entries and indexer keys, page by page (a partly written last page is copied whole: its
        // unwritten rows are never read before the copy writes them).
        const int64_t per_page = p.page_entries[size_t(l)];
        for (int64_t g = 0; g < pages && per_page > 0; ++g) {
            const int64_t src = from_pages[size_t(g)] * per_page, dst = to_pages[size_t(g)] * per_page;
            const int64_t row = p.compressed_row[size_t(l)];
            copy_bytes(entries, (row + src) * p.entry_bytes, (row + dst) * p.entry_bytes, per_page * p.entry_bytes);
            if (p.index_row[size_t(l)] >= 0) {
                const int64_t index_row = p.index_row[size_t(l)];
                copy_bytes(m.index_keys, (index_row + src) * p.index_entry_bytes, (index_row + dst) * p.index_entry_bytes,
                           per_page * p.index_entry_bytes);
            }
        }
    }
    copy.position = state.position;
    return copy;
}

}  // namespace dsv4
