// Aggregation of recorded stage intervals into the per-step table, and its text (stage_profile.h).
#include "runtime/stage_profile.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "core/error.h"

namespace dsv4 {

StageTable stage_table(std::span<const std::vector<StageTime>> steps) {
    DSV4_CHECK(!steps.empty(), "stage table: no recorded steps");
    // One slot per kStages name, in that order; other names after them as they come. A slot no step recorded (a
    // stage this model does not have) gives no row.
    struct Slot {
        StageRow row;
        std::set<int64_t> layers;
        bool seen = false;
    };
    std::vector<Slot> slots;
    auto add = [&](std::string_view name) {
        slots.emplace_back();
        slots.back().row.stage = std::string(name);
        return slots.end() - 1;
    };
    for (std::string_view name : kStages) add(name);
    for (size_t s = 0; s < steps.size(); ++s) {
        DSV4_CHECK(!steps[s].empty(), "stage table: step {} recorded no stage", s);
        for (const StageTime& t : steps[s]) {
            DSV4_CHECK(std::isfinite(t.ms) && t.ms >= 0, "stage table: step {}, stage {} (layer {}) took {} ms", s,
                       t.stage, t.layer, t.ms);
            auto slot = std::find_if(slots.begin(), slots.end(), [&](const Slot& x) { return x.row.stage == t.stage; });
            if (slot == slots.end()) slot = add(t.stage);
            slot->seen = true;
            slot->row.ms += t.ms;
            if (t.layer >= 0) slot->layers.insert(t.layer);
        }
    }
    StageTable table;
    table.steps = int64_t(steps.size());
    for (Slot& slot : slots) {
        if (!slot.seen) continue;
        slot.row.ms /= double(steps.size());
        slot.row.layers = int64_t(slot.layers.size());
        table.rows.push_back(slot.row);
        table.ms += slot.row.ms;
    }
    for (StageRow& row : table.rows) row.share = table.ms > 0 ? row.ms / table.ms : 0;
    return table;
}

std::string format_stage_table(const StageTable& table, const StageYardstick& against) {
    auto floor_ms = [&](double bytes) { return bytes / (against.gbs * 1e9) * 1e3; };
    std::string out = fmt::format("  {:<15} {:>9} {:>9} {:>6} {:>7} {:>10} {:>9} {:>8}\n", "stage", "ms/step",
                                  "ms/layer", "layers", "share", "MB/step", "floor ms", "x floor");
    double total_bytes = 0;
    for (const StageRow& r : table.rows) {
        const auto counted = against.floor_bytes.find(r.stage);
        const double bytes = counted == against.floor_bytes.end() ? 0 : counted->second;
        total_bytes += bytes;
        out += fmt::format("  {:<15} {:>9.4f} ", r.stage, r.ms);
        out += r.layers > 0 ? fmt::format("{:>9.4f} {:>6} ", r.ms_per_layer(), r.layers)
                            : fmt::format("{:>9} {:>6} ", "-", "-");
        out += fmt::format("{:>6.1f}% ", 100.0 * r.share);
        out += bytes > 0
                   ? fmt::format("{:>10.2f} {:>9.4f} {:>7.2f}x\n", bytes / 1e6, floor_ms(bytes), r.ms / floor_ms(bytes))
                   : fmt::format("{:>10} {:>9} {:>8}\n", "-", "-", "-");
    }
    out += fmt::format("  {:<15} {:>9.4f} {:>9} {:>6} {:>6.1f}% ", "total", table.ms, "", "", 100.0);
    out += total_bytes > 0 ? fmt::format("{:>10.2f} {:>9.4f} {:>7.2f}x\n", total_bytes / 1e6, floor_ms(total_bytes),
                                         table.ms / floor_ms(total_bytes))
                           : fmt::format("{:>10} {:>9} {:>8}\n", "-", "-", "-");
    const double covered = table.ms / against.step_ms;
    const bool close = std::fabs(1.0 - covered) <= kStageSumTolerance;
    out += fmt::format(
        "  check: the stages sum to {:.4f} ms = {:.1f}% of the step timed without the profiler ({:.4f} ms): {}within "
        "{:.0f}%; the profiled step takes {:.4f} ms ({:+.1f}%), {:.1f}% of it in the stages (the rest is host time "
        "before the first and after the last event)\n",
        table.ms, 100.0 * covered, against.step_ms, close ? "" : "NOT ", 100.0 * kStageSumTolerance,
        against.profiled_ms, 100.0 * (against.profiled_ms / against.step_ms - 1.0),
        100.0 * table.ms / against.profiled_ms);
    // Communication: the expert exchange, and under data-parallel attention the gathers of the experts' input and
    // of the logits.
    double exchange = 0, gathers = 0;
    bool any = false;
    for (const StageRow& r : table.rows) {
        if (r.stage == "expert_exchange") exchange += r.ms, any = true;
        if (r.stage == "expert_gather" || r.stage == "logits_gather") gathers += r.ms, any = true;
    }
    if (any && gathers == 0)
        out += fmt::format("  communication: the expert exchange takes {:.4f} ms of the stages' {:.4f} ms = {:.1f}%\n",
                           exchange, table.ms, 100.0 * exchange / table.ms);
    else if (any)
        out += fmt::format(
            "  communication: the expert exchange ({:.4f} ms) and the gathers of the experts' input and the logits "
            "({:.4f} ms) take {:.4f} ms of the stages' {:.4f} ms = {:.1f}%\n",
            exchange, gathers, exchange + gathers, table.ms, 100.0 * (exchange + gathers) / table.ms);
    return out;
}

}  // namespace dsv4
