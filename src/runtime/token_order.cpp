// Token order: see token_order.h. Each logit becomes a 32-bit key that sorts as the logit descends; with the id in
// the low 32 bits, one 64-bit integer per token orders exactly as the stable sort by logit does. Many tokens are put
// in that order by a radix sort on the key (they are packed in ascending id order, so equal keys keep it); a few by
// std::sort; the first few of a whole row by a bounded heap, or a histogram cut and a small sort.
#include "runtime/token_order.h"

#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <utility>

#include "core/error.h"
#include "runtime/lane_sums.h"

namespace dsv4 {
namespace {

// A float's place in descending order as an unsigned integer (larger values, smaller keys); -0.0 is +0.0.
uint32_t descending_key(float x) {
    uint32_t bits = std::bit_cast<uint32_t>(x);
    if (bits == 0x80000000u) bits = 0;
    const uint32_t ascending = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
    return ~ascending;
}

// A float's bits as a signed integer that orders as the float does (negative values' magnitude bits flipped): -inf
// lowest, -0.0 just below +0.0, NaNs beyond +-inf. Its own inverse.
int32_t order_key(int32_t bits) {
    return bits ^ ((bits >> 31) & 0x7FFFFFFF);
}

uint64_t packed(float x, int64_t id) {
    return (uint64_t(descending_key(x)) << 32) | uint32_t(id);
}

// The logit a packed entry was made from (-0.0 comes back as +0.0, which compares equal).
float key_logit(uint64_t key) {
    const uint32_t ascending = ~uint32_t(key >> 32);
    return std::bit_cast<float>((ascending & 0x80000000u) ? (ascending & 0x7FFFFFFFu) : ~ascending);
}

constexpr int kDigitBits = 11;
constexpr int kBuckets = 1 << kDigitBits;
constexpr uint32_t kDigitMask = kBuckets - 1;

// Stable LSD radix sort by the upper 32 bits, 11 bits a pass (3 passes). A pass whose digit is the same for every
// entry moves nothing and is skipped.
void radix_sort_by_key(std::vector<uint64_t>& keys, std::vector<uint64_t>& swap) {
    constexpr int kPasses = 3;
    constexpr std::array<int, kPasses> shifts = {32, 32 + kDigitBits, 32 + 2 * kDigitBits};
    std::array<std::array<uint32_t, kBuckets>, kPasses> counts{};
    for (uint64_t k : keys)
        for (int p = 0; p < kPasses; ++p) ++counts[size_t(p)][(k >> shifts[size_t(p)]) & kDigitMask];
    swap.resize(keys.size());
    for (int p = 0; p < kPasses; ++p) {
        auto& count = counts[size_t(p)];
        if (std::find(count.begin(), count.end(), uint32_t(keys.size())) != count.end()) continue;
        uint32_t offset = 0;
        for (uint32_t& c : count) offset += std::exchange(c, offset);  // exclusive prefix sums: each bucket's start
        const int shift = shifts[size_t(p)];
        for (uint64_t k : keys) swap[count[(k >> shift) & kDigitMask]++] = k;
        keys.swap(swap);
    }
}

// Sorts entries packed in ascending id order: by the radix sort when there are many (it keeps that order among
// equal keys), else by std::sort (the id in the low bits breaks ties).
void sort_packed(TokenOrderScratch& scratch) {
    constexpr size_t kRadixFrom = 4096;
    if (scratch.keys.size() >= kRadixFrom)
        radix_sort_by_key(scratch.keys, scratch.swap);
    else
        std::sort(scratch.keys.begin(), scratch.keys.end());
}

void unpack_ids(const std::vector<uint64_t>& keys, size_t count, std::vector<int32_t>& ids) {
    ids.resize(count);
    for (size_t i = 0; i < count; ++i) ids[i] = int32_t(keys[i] & 0xFFFFFFFFu);
}

// A block's largest order key (order_key) and whether it holds a NaN: integer reductions, which the compiler
// vectorizes (a float max written as a select does not vectorize without giving up NaN semantics: scalar, a block
// took ~1 ns an element, V4's row 146 us).
struct BlockScan {
    int32_t key_max;
    uint32_t nan;
};
[[gnu::always_inline]] inline BlockScan scan_block(const float* logits, int64_t n) {
    int32_t key_max = std::numeric_limits<int32_t>::min();
    uint32_t nan = 0;
    for (int64_t i = 0; i < n; ++i) {
        const int32_t bits = std::bit_cast<int32_t>(logits[i]);
        nan |= (uint32_t(bits) & 0x7FFFFFFFu) > 0x7F800000u;
        const int32_t key = order_key(bits);
        key_max = key > key_max ? key : key_max;
    }
    return {key_max, nan};
}

// The row in blocks; then the first index of the best block's maximum by comparison (==: -0.0 finds +0.0 too), so the
// first index of the row's maximum, as a scan with `>` finds it.
[[gnu::always_inline]] inline LogitScan scan_loop(const float* logits, int64_t vocab) {
    constexpr int64_t kBlock = 2048;
    LogitScan scan;
    float best = -std::numeric_limits<float>::infinity();
    bool found = false;
    for (int64_t begin = 0; begin < vocab; begin += kBlock) {
        const int64_t end = std::min(vocab, begin + kBlock);
        const BlockScan block = scan_block(logits + begin, end - begin);
        if (block.nan) return {true, 0};
        const float m = std::bit_cast<float>(order_key(block.key_max));  // order_key is its own inverse
        if (!found || m > best) {
            best = m;
            found = true;
            scan.argmax = std::find(logits + begin, logits + end, m) - logits;
        }
    }
    return scan;
}

LogitScan scan_baseline(const float* logits, int64_t vocab) {
    return scan_loop(logits, vocab);
}
DSV4_TARGET_AVX2 LogitScan scan_avx2(const float* logits, int64_t vocab) {
    return scan_loop(logits, vocab);
}

}  // namespace

LogitScan scan_logits(const float* logits, int64_t vocab, VectorIsa isa) {
    DSV4_CHECK(vocab >= 1, "an empty row of logits");
    // No AVX-512 build: it scanned V4's row in 22 us where AVX2 took 18 (baseline 41; 2-vCPU Xeon dev VM).
    return isa == VectorIsa::kBaseline ? scan_baseline(logits, vocab) : scan_avx2(logits, vocab);
}

LogitScan scan_logits(const float* logits, int64_t vocab) {
    return scan_logits(logits, vocab, host_vector_isa());
}

void most_likely(const float* logits, int64_t vocab, int64_t count, std::vector<int32_t>& ids,
                 TokenOrderScratch& scratch) {
    DSV4_CHECK(count >= 1 && count <= vocab && vocab <= int64_t(std::numeric_limits<int32_t>::max()),
               "most_likely: {} of {} ids", count, vocab);
    std::vector<uint64_t>& keys = scratch.keys;
    keys.clear();
    if (count <= 256 && count * 16 <= vocab) {
        // A handful: a max-heap of the best `count` keys so far (its top: the worst of them). Most tokens fail one
        // float comparison with the worst one's logit; only those at least as likely are packed and compared.
        for (int64_t i = 0; i < count; ++i) keys.push_back(packed(logits[i], i));
        std::make_heap(keys.begin(), keys.end());
        float worst_logit = key_logit(keys.front());
        for (int64_t i = count; i < vocab; ++i) {
            if (!(logits[i] >= worst_logit)) continue;
            const uint64_t k = packed(logits[i], i);
            if (k >= keys.front()) continue;
            std::pop_heap(keys.begin(), keys.end());
            keys.back() = k;
            std::push_heap(keys.begin(), keys.end());
            worst_logit = key_logit(keys.front());
        }
        std::sort(keys.begin(), keys.end());
    } else if (count * 16 <= vocab) {
        // A few ids: the histogram of the keys' top 11 bits says which buckets hold the `count` best; only their
        // entries are kept, and only the first `count` of those sorted.
        constexpr int kTopShift = 32 - kDigitBits;
        std::array<uint32_t, kBuckets> hist{};
        for (int64_t i = 0; i < vocab; ++i) ++hist[descending_key(logits[i]) >> kTopShift];
        uint32_t last = 0;
        for (int64_t seen = 0; (seen += hist[last]) < count;) ++last;
        for (int64_t i = 0; i < vocab; ++i)
            if ((descending_key(logits[i]) >> kTopShift) <= last) keys.push_back(packed(logits[i], i));
        std::nth_element(keys.begin(), keys.begin() + (count - 1), keys.end());
        std::sort(keys.begin(), keys.begin() + count);
    } else {
        keys.resize(size_t(vocab));
        for (int64_t i = 0; i < vocab; ++i) keys[size_t(i)] = packed(logits[i], i);
        sort_packed(scratch);
    }
    unpack_ids(keys, size_t(count), ids);
}

namespace {

// The weight of a row's tokens with logits >= trial, in any order of additions (the floor below needs it only to
// within its margin): eight interleaved partial sums (runtime/lane_sums.h).
[[gnu::always_inline]] inline double row_mass_from(const float* logits, const float* weights, int64_t vocab,
                                                   float trial) {
    return eight_lane_sum(vocab, [=](int64_t i) { return logits[i] >= trial ? double(weights[i]) : 0.0; });
}

// Appends the packed keys of the row's tokens with logits >= floor, in id order; runs of 64 without one are passed
// over by a vectorized test (the floor keeps a few hundred of V4's 129,280 ids).
[[gnu::always_inline]] inline void collect_row_from(const float* logits, int64_t vocab, float floor,
                                                    std::vector<uint64_t>& keys) {
    constexpr int64_t kRun = 64;
    for (int64_t begin = 0; begin < vocab; begin += kRun) {
        const int64_t end = std::min(vocab, begin + kRun);
        if (end - begin == kRun) {
            uint32_t any = 0;
            for (int64_t i = begin; i < end; ++i) any |= logits[i] >= floor;
            if (!any) continue;
        }
        for (int64_t i = begin; i < end; ++i)
            if (logits[i] >= floor) keys.push_back(packed(logits[i], i));
    }
}

// The two passes over a whole row, built for each vector set (the rest of ordered_to_mass is the same in every build).
double row_mass_baseline(const float* logits, const float* weights, int64_t vocab, float trial) {
    return row_mass_from(logits, weights, vocab, trial);
}
void collect_row_baseline(const float* logits, int64_t vocab, float floor, std::vector<uint64_t>& keys) {
    collect_row_from(logits, vocab, floor, keys);
}
DSV4_TARGET_AVX2 double row_mass_avx2(const float* logits, const float* weights, int64_t vocab, float trial) {
    return row_mass_from(logits, weights, vocab, trial);
}
DSV4_TARGET_AVX2 void collect_row_avx2(const float* logits, int64_t vocab, float floor, std::vector<uint64_t>& keys) {
    collect_row_from(logits, vocab, floor, keys);
}

struct RowPasses {
    double (*mass_from)(const float* logits, const float* weights, int64_t vocab, float trial);
    void (*collect_from)(const float* logits, int64_t vocab, float floor, std::vector<uint64_t>& keys);
};

RowPasses row_passes(VectorIsa isa) {
    if (isa == VectorIsa::kBaseline) return {row_mass_baseline, collect_row_baseline};
    return {row_mass_avx2, collect_row_avx2};
}

}  // namespace

void ordered_to_mass(const float* logits, const float* weights, int64_t vocab, const std::vector<int32_t>* candidates,
                     double mass, float max_logit, float logit_step, std::vector<int32_t>& ordered,
                     TokenOrderScratch& scratch) {
    ordered_to_mass(logits, weights, vocab, candidates, mass, max_logit, logit_step, ordered, scratch,
                    host_vector_isa());
}

void ordered_to_mass(const float* logits, const float* weights, int64_t vocab, const std::vector<int32_t>* candidates,
                     double mass, float max_logit, float logit_step, std::vector<int32_t>& ordered,
                     TokenOrderScratch& scratch, VectorIsa isa) {
    const RowPasses row = row_passes(isa);
    const int64_t n = candidates ? int64_t(candidates->size()) : vocab;
    // The candidates with logits >= floor are a prefix of their order (equal logits are in or out together). The
    // floor falls by logit_step until their weights (summed in any order) reach mass + margin: summed in the order
    // instead, the same weights differ by under n * 2^-53 of their sum, far below the margin, so the prefix that
    // reaches the mass lies inside. After four steps, every candidate.
    constexpr int64_t kSortAllBelow = 4096;
    float floor = -std::numeric_limits<float>::infinity();
    if (n >= kSortAllBelow) {
        const double goal = mass * (1.0 + 1e-9);
        for (int step = 1; step <= 4; ++step) {
            const float trial = max_logit - float(step) * logit_step;
            const int32_t* ids = candidates ? candidates->data() : nullptr;
            const double reached =
                ids ? eight_lane_sum(n,
                                     [&](int64_t j) { return logits[ids[j]] >= trial ? double(weights[ids[j]]) : 0.0; })
                    : row.mass_from(logits, weights, vocab, trial);
            if (reached >= goal) {
                floor = trial;
                break;
            }
        }
    }
    std::vector<uint64_t>& keys = scratch.keys;
    keys.clear();
    if (candidates) {
        for (const int32_t id : *candidates)
            if (logits[id] >= floor) keys.push_back(packed(logits[id], id));
    } else {
        row.collect_from(logits, vocab, floor, keys);
    }
    sort_packed(scratch);
    unpack_ids(keys, keys.size(), ordered);
}

}  // namespace dsv4
