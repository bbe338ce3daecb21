// The multi-GPU flags of the model commands, on any machine: lists that name no usable set of GPUs, contradicting
// flags and bad multi-node settings end with one clear line and exit code 1, before anything is loaded or started.
// The runs themselves are tested on the GPU machine (tests/gpu/multi_process_test.cpp).
#include <gtest/gtest.h>

#include <string>

#include "tool_test_util.h"

namespace dsv4::testing {
namespace {

void expect_error(const std::string& flags, const std::string& message, const std::string& env = "") {
    const std::string ids = write_text("parallel.ids", "1 2 3");
    Result r = run("generate -q -m " + tiny_model() + " --ids-file " + ids + " -n 2 --print-ids " + flags, env);
    EXPECT_EQ(r.exit_code, 1) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << flags << "\n" << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;
}

TEST(ParallelCli, BadGpuListsAreClearErrors) {
    expect_error("--gpus ''", "--gpus is empty");
    expect_error("--gpus 0,,1", "empty item");
    expect_error("--gpus 0,x", "'x' is not a GPU id");
    expect_error("--gpus -1", "negative");
    expect_error("--gpus 0 --backend cpu", "drop --backend cpu");
}

TEST(ParallelCli, BadNodeSettingsAreClearErrors) {
    expect_error("--gpus 0 --nnodes 2 --node-rank 2", "--node-rank");
    expect_error("--gpus 0 --nnodes 2 --node-rank 1", "--master-addr");
}

}  // namespace
}  // namespace dsv4::testing
