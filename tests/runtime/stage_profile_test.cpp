// stage_table: recorded stage intervals summed by stage into ms per step (mean over steps), layer counts, ms per
// layer and shares; rows in forward order (kStages), stages no step recorded left out, unknown names kept after
// them; bad recordings are errors. format_stage_table: every row, the floors where bytes are counted, the check. The
// GPU side (events at stage boundaries) is tests/gpu/cuda_stage_profile_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/stage_profile.h"

using namespace dsv4;

namespace {

// One recorded step of a two-layer model: layer 0 has no indexer, layer 1 has one; `scale` multiplies every time.
std::vector<StageTime> two_layer_step(double scale) {
    std::vector<StageTime> step = {{"upload", -1, 0.01}, {"embed", -1, 0.02}};
    for (int64_t layer = 0; layer < 2; ++layer) {
        step.push_back({"attn_hc_pre", layer, 0.10});
        step.push_back({"q_proj", layer, 0.20});
        if (layer == 1) step.push_back({"indexer", layer, 0.40});
        step.push_back({"routed_experts", layer, 0.50 + 0.1 * double(layer)});
    }
    step.push_back({"head", -1, 1.00});
    step.push_back({"logits_copy", -1, 0.05});
    for (StageTime& t : step) t.ms *= scale;
    return step;
}

const StageRow& row(const StageTable& table, const std::string& stage) {
    for (const StageRow& r : table.rows)
        if (r.stage == stage) return r;
    throw std::runtime_error("no row " + stage);
}

}  // namespace

TEST(StageProfile, StageNamesAreDistinct) {
    const std::set<std::string_view> names(kStages.begin(), kStages.end());
    EXPECT_EQ(names.size(), kStages.size());
}

TEST(StageProfile, SumsByStageMeanOverStepsInForwardOrder) {
    const std::vector<std::vector<StageTime>> steps = {two_layer_step(1.0), two_layer_step(3.0)};  // mean: x2
    const StageTable table = stage_table(steps);
    EXPECT_EQ(table.steps, 2);

    // Recorded stages only, in kStages order.
    std::vector<std::string> names;
    for (const StageRow& r : table.rows) names.push_back(r.stage);
    EXPECT_EQ(names, (std::vector<std::string>{"upload", "embed", "attn_hc_pre", "q_proj", "indexer", "routed_experts",
                                               "head", "logits_copy"}));

    EXPECT_NEAR(row(table, "attn_hc_pre").ms, 2 * 0.20, 1e-12);  // two layers of 0.10, mean factor 2
    EXPECT_EQ(row(table, "attn_hc_pre").layers, 2);
    EXPECT_NEAR(row(table, "attn_hc_pre").ms_per_layer(), 0.20, 1e-12);
    EXPECT_EQ(row(table, "indexer").layers, 1);  // one layer has it: per layer is over that layer
    EXPECT_NEAR(row(table, "indexer").ms_per_layer(), 0.80, 1e-12);
    EXPECT_NEAR(row(table, "routed_experts").ms, 2 * (0.50 + 0.60), 1e-12);
    EXPECT_EQ(row(table, "head").layers, 0);  // a stage of the step
    EXPECT_NEAR(row(table, "head").ms_per_layer(), row(table, "head").ms, 1e-12);

    // The total is the mean step (sum of its intervals); shares add up to one.
    double step_one = 0;
    for (const StageTime& t : two_layer_step(1.0)) step_one += t.ms;
    EXPECT_NEAR(table.ms, 2 * step_one, 1e-12);
    double rows = 0, shares = 0;
    for (const StageRow& r : table.rows) rows += r.ms, shares += r.share;
    EXPECT_NEAR(rows, table.ms, 1e-12);
    EXPECT_NEAR(shares, 1.0, 1e-12);
    EXPECT_NEAR(row(table, "head").share, 2.0 / table.ms, 1e-12);
}

TEST(StageProfile, UnknownStagesFollowTheKnownOnes) {
    const std::vector<std::vector<StageTime>> steps = {
        {{"zeta", -1, 0.5}, {"embed", -1, 0.1}, {"alpha", 3, 0.25}, {"zeta", -1, 0.5}}};
    const StageTable table = stage_table(steps);
    ASSERT_EQ(table.rows.size(), 3u);
    EXPECT_EQ(table.rows[0].stage, "embed");
    EXPECT_EQ(table.rows[1].stage, "zeta");  // first seen first
    EXPECT_NEAR(table.rows[1].ms, 1.0, 1e-12);
    EXPECT_EQ(table.rows[2].stage, "alpha");
    EXPECT_EQ(table.rows[2].layers, 1);
}

TEST(StageProfile, ZeroLengthStageStillHasARow) {
    const std::vector<std::vector<StageTime>> steps = {{{"embed", -1, 0.0}, {"head", -1, 0.0}}};
    const StageTable table = stage_table(steps);
    ASSERT_EQ(table.rows.size(), 2u);
    EXPECT_EQ(table.ms, 0.0);
    EXPECT_EQ(table.rows[0].share, 0.0);
}

TEST(StageProfile, BadRecordingsAreErrors) {
    EXPECT_THROW(stage_table({}), Error);
    const std::vector<std::vector<StageTime>> empty_step = {two_layer_step(1.0), {}};
    EXPECT_THROW(stage_table(empty_step), Error);
    const std::vector<std::vector<StageTime>> negative = {{{"embed", -1, -0.001}}};
    EXPECT_THROW(stage_table(negative), Error);
    const std::vector<std::vector<StageTime>> nan = {{{"embed", -1, std::numeric_limits<double>::quiet_NaN()}}};
    EXPECT_THROW(stage_table(nan), Error);
}

TEST(StageProfile, TextHasEveryRowItsFloorAndTheCheck) {
    const std::vector<std::vector<StageTime>> steps = {two_layer_step(1.0)};
    const StageTable table = stage_table(steps);
    // head: 1 ms against 1e6 B at 1 GB/s = 1 ms floor; q_proj: 0.4 ms against 2e5 B = 0.2 ms; nothing else counted.
    StageYardstick against{{{"head", 1e6}, {"q_proj", 2e5}}, 1.0, table.ms / 0.98, table.ms / 0.98 * 1.03};
    const std::string text = format_stage_table(table, against);
    std::printf("%s", text.c_str());
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    ASSERT_EQ(lines.size(), table.rows.size() + 3);  // header, rows, total, check
    auto line = [&](const std::string& stage) {
        for (const std::string& l : lines)
            if (l.rfind("  " + stage + " ", 0) == 0) return l;
        return std::string("(no line for " + stage + ")");
    };
    EXPECT_NE(line("head").find("1.00x"), std::string::npos) << line("head");
    EXPECT_NE(line("head").find(" -      -"), std::string::npos) << "a stage of the step has no per-layer time";
    EXPECT_NE(line("q_proj").find("0.2000      2"), std::string::npos) << line("q_proj");  // per layer, 2 layers
    EXPECT_NE(line("q_proj").find("2.00x"), std::string::npos) << line("q_proj");
    EXPECT_NE(line("embed").find("-         -        -"), std::string::npos) << "no bytes counted: " << line("embed");
    EXPECT_NE(line("total").find("1.20"), std::string::npos) << "1.2 MB in all: " << line("total");
    EXPECT_NE(lines.back().find("98.0%"), std::string::npos) << lines.back();
    EXPECT_NE(lines.back().find(": within 5%"), std::string::npos) << lines.back();
    EXPECT_NE(lines.back().find("(+3.0%)"), std::string::npos) << lines.back();

    against.step_ms = table.ms / 0.9;
    EXPECT_NE(format_stage_table(table, against).find("NOT within 5%"), std::string::npos);
    EXPECT_EQ(text.find("communication"), std::string::npos) << "one GPU: no exchange, no communication line";
}

TEST(StageProfile, TextGivesTheExchangeShareOverSeveralGpus) {
    std::vector<StageTime> step = two_layer_step(1.0);  // 0.03 + 0.8 + 1.3 + 1.05 = 3.18 ms
    step.push_back({"expert_exchange", 0, 0.02});
    step.push_back({"expert_exchange", 1, 0.03});
    const std::vector<std::vector<StageTime>> steps = {step};
    const StageTable table = stage_table(steps);
    const std::string text = format_stage_table(table, {{}, 1.0, table.ms, table.ms});
    std::printf("%s", text.c_str());
    // 0.05 of 3.23 ms: 1.548 %.
    EXPECT_NE(text.find("communication: the expert exchange takes 0.0500 ms of the stages' 3.2300 ms = 1.5%"),
              std::string::npos);
}

TEST(StageProfile, TextCountsTheGathersOfDataParallelAttentionAsCommunication) {
    std::vector<StageTime> step = two_layer_step(1.0);  // 3.18 ms
    step.push_back({"expert_gather", 0, 0.01});
    step.push_back({"expert_exchange", 0, 0.02});
    step.push_back({"expert_gather", 1, 0.01});
    step.push_back({"expert_exchange", 1, 0.03});
    step.push_back({"logits_gather", -1, 0.05});
    const std::vector<std::vector<StageTime>> steps = {step};
    const StageTable table = stage_table(steps);
    const std::string text = format_stage_table(table, {{}, 1.0, table.ms, table.ms});
    std::printf("%s", text.c_str());
    // exchange 0.05, gathers 0.07: 0.12 of 3.30 ms = 3.6 %.
    EXPECT_NE(text.find("communication: the expert exchange (0.0500 ms) and the gathers of the experts' input and the "
                        "logits (0.0700 ms) take 0.1200 ms of the stages' 3.3000 ms = 3.6%"),
              std::string::npos)
        << text;
}
