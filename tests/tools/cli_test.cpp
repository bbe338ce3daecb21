// The dsv4 command end to end: logits and generate on the official-numerics fixture (their output checked against
// DeepSeek's reference), inspect, and the error paths a user hits (exit code 1 and a sentence naming the problem).
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "../model/golden_io.h"
#include "core/thread_pool.h"
#include "fixture_paths.h"
#include "model/bench_weights.h"
#include "model/cpu_model.h"
#include "model/synthetic_checkpoint.h"
#include "runtime/sampler.h"
#include "tool_test_util.h"

using namespace dsv4;
using namespace dsv4::testing;

namespace {

const std::string kFixture = test_fixtures::official_numerics_a();

std::string ids_text(const std::vector<int64_t>& ids) {
    std::ostringstream s;
    for (size_t i = 0; i < ids.size(); ++i) s << (i ? (i % 20 ? " " : "\n") : "") << ids[i];
    return s.str();
}

}  // namespace

TEST(Cli, VersionAndHelp) {
    Result r = run("--version");
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_NE(r.output.find("dsv4 "), std::string::npos);
    r = run("logits --help");
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_NE(r.output.find("--ids-file"), std::string::npos);
}

TEST(Cli, LogitsMatchDeepSeekReferenceInChunks) {
    Golden golden(kFixture + "/golden.safetensors");
    std::vector<int64_t> ids = golden.ints("input_ids");
    std::string ids_file = write_text("prompt.txt", ids_text(ids));
    std::string out = temp_path("logits.safetensors");
    Result r = run("logits -m " + kFixture + " --ids-file " + ids_file + " --chunks 100,1,1,200,73 --out " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    Golden written(out);
    const TensorRef& t = written.tensor("logits");
    ASSERT_EQ(t.shape, (std::vector<int64_t>{int64_t(ids.size()), 512}));
    std::vector<float> logits = written.floats("logits");
    std::vector<float> ref = golden.floats("prefill_last_logits");
    Comparison c = compare(logits.data() + (ids.size() - 1) * 512, ref.data(), 512);
    EXPECT_GE(c.cosine, 0.99);  // the numerics bound is OfficialNumerics' business; this checks the plumbing
}

TEST(Cli, GenerateGreedyPrintsDeepSeekTokens) {
    Golden golden(kFixture + "/golden.safetensors");
    std::string ids_file = write_text("prompt2.txt", ids_text(golden.ints("input_ids")));
    Result r = run("generate -q -m " + kFixture + " --ids-file " + ids_file + " -n 6 --greedy --print-ids");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::vector<int64_t> greedy = golden.ints("greedy_tokens");
    std::string expected = ids_text({greedy.begin(), greedy.begin() + 6}) + "\n";
    EXPECT_EQ(r.output, expected);
}

TEST(Cli, InspectShowsScheduleAndFormats) {
    Result r = run("inspect -m " + kFixture);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("CSA"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("HCA"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("hash-routed"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("FP4"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("per token"), std::string::npos) << r.output;
}

// --random-weights instead of -m: the logits of the named preset's random weights (BenchWeights, the routed experts
// generated on the host for the CPU backend), the same bits as that model built here; a different seed gives other
// logits; -m and --random-weights together, or neither, are one clear error.
TEST(Cli, RandomWeightsRunWithoutACheckpoint) {
    const std::string ids_file = write_text("random_ids.txt", "0 17 4093 129279 7 7");
    const std::vector<int32_t> ids = {0, 17, 4093, 129279, 7, 7};
    auto logits_of = [&](const std::string& flags, const std::string& name) {
        const std::string out = temp_path(name);
        Result r = run("logits --random-weights tiny --random-layers 2 --backend cpu --ids-file " + ids_file +
                       " --out " + out + " " + flags);
        EXPECT_EQ(r.exit_code, 0) << r.output;
        return r.exit_code == 0 ? Golden(out).floats("logits") : std::vector<float>{};
    };
    const std::vector<float> got = logits_of("--random-seed 3", "random3.safetensors");
    ModelConfig config = synthetic_preset("tiny", 2);
    config.num_mtp_layers = 0;
    config.mtp_compress_ratios.clear();
    ThreadPool pool(2);
    BenchWeights bench(3, pool);
    CpuModel model(config, bench.build(config, {0, config.n_routed_experts}, ExpertBytes::kHost), Numerics::kModel, 2);
    SequenceState state = model.new_sequence();
    const std::vector<float> want = model.forward(state, ids, true);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << "the CLI's logits differ";
    EXPECT_NE(logits_of("--random-seed 4", "random4.safetensors"), got) << "another seed, other weights";

    for (const std::string& args : {"logits -m " + kFixture + " --random-weights tiny", std::string("logits")}) {
        Result r = run(args + " --ids-file " + ids_file + " --out " + temp_path("none.st"));
        EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
        EXPECT_NE(r.output.find("--random-weights PRESET"), std::string::npos) << r.output;
    }
}

TEST(Cli, BadInputGivesOneClearError) {
    std::string good_ids = write_text("ok.txt", "1 2 3");
    struct Case {
        std::string args, expected;
    };
    std::vector<Case> cases = {
        {"logits -m /nonexistent/model --ids-file " + good_ids + " --out " + temp_path("x.st"), "/nonexistent/model"},
        {"logits -m " + kFixture + " --ids-file " + write_text("bad.txt", "1 2 x3") + " --out " + temp_path("x.st"),
         "'x3'"},
        {"logits -m " + kFixture + " --ids-file " + write_text("empty.txt", " \n") + " --out " + temp_path("x.st"),
         "no token ids"},
        {"logits -m " + kFixture + " --ids-file " + good_ids + " --chunks 1,1 --out " + temp_path("x.st"),
         "add up to 2"},
        {"logits -m " + kFixture + " --ids-file " + good_ids + " --chunks 1,0,2 --out " + temp_path("x.st"), "'0'"},
        {"generate -m " + kFixture + " --ids-file " + write_text("big.txt", "1 99999") + " -n 2",
         "outside the vocabulary"},
        {"generate -m " + kFixture + " --ids-file " + good_ids + " --temp 0", "--temp"},
    };
    for (const auto& c : cases) {
        Result r = run(c.args);
        EXPECT_EQ(r.exit_code, 1) << c.args << "\n" << r.output;
        EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.args << "\n" << r.output;
        EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
    }
    Result r = run("logits -m " + kFixture + " --ids-file " + good_ids + " --numerics fast --out x");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("--numerics"), std::string::npos) << r.output;
    // A GPU piece holds at most 65,535 tokens (CudaOptions): refused when parsed, before any model is loaded.
    r = run("generate -m " + kFixture + " --ids-file " + good_ids + " -n 1 --max-chunk-tokens 65536");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("--max-chunk-tokens"), std::string::npos) << r.output;
}

// On a machine without a GPU (or a build without CUDA) `--backend cuda` is one clear error; with a GPU it runs (GPU
// numerics are tested in tests/gpu/). Either way the process never crashes.
TEST(Cli, CudaBackendRunsOrSaysWhyNot) {
    std::string ids = write_text("cuda_ids.txt", "1 2 3");
    Result r = run("generate -q -m " + kFixture + " --ids-file " + ids + " --backend cuda -n 2 --greedy --print-ids");
    if (r.exit_code == 0) {
        std::istringstream words(r.output);
        int count = 0;
        for (std::string w; words >> w;) ++count;
        EXPECT_EQ(count, 2) << r.output;
        // The piece size: on one GPU with room, generate takes 2048-token pieces; --max-chunk-tokens sets it, and
        // the ids are the same (the forward is chunk-invariant).
        Result auto_plan =
            run_split("generate -m " + kFixture + " --ids-file " + ids + " --backend cuda -n 2 --greedy --print-ids");
        EXPECT_NE(auto_plan.errors.find("(pieces of 2048 tokens)"), std::string::npos) << auto_plan.errors;
        Result set = run_split("generate -m " + kFixture + " --ids-file " + ids +
                               " --backend cuda -n 2 --greedy --print-ids --max-chunk-tokens 2");
        EXPECT_NE(set.errors.find("(pieces of 2 tokens)"), std::string::npos) << set.errors;
        EXPECT_EQ(set.output, r.output);
        EXPECT_EQ(auto_plan.output, r.output);
    } else {
        EXPECT_EQ(r.exit_code, 1) << r.output;
        EXPECT_TRUE(r.output.find("no CUDA device") != std::string::npos ||
                    r.output.find("built without CUDA") != std::string::npos)  // a -DDSV4_CUDA=OFF build
            << r.output;
        EXPECT_NE(r.output.find("--backend cpu"), std::string::npos) << r.output;
    }
}
