// The user's parallel options (parse_gpu_list, validate_options) and a rank's environment (rank_from_variables):
// what is accepted, and that every rejection is a sentence naming the problem.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>

#include "core/error.h"
#include "runtime/parallel/launcher.h"

using namespace dsv4;
using namespace dsv4::parallel;

namespace {

// Runs `f`, which must throw dsv4::Error with `expected` in its message.
void expect_error(const std::function<void()>& f, const std::string& expected) {
    try {
        f();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
            << "message: " << e.what() << "\nexpected to contain: " << expected;
        return;
    }
    ADD_FAILURE() << "no dsv4::Error; expected one containing: " << expected;
}

ParallelOptions two_nodes() {
    ParallelOptions o;
    o.gpus = {0, 1};
    o.nnodes = 2;
    o.node_rank = 1;
    o.master_addr = "10.0.0.1";
    o.master_port = 29500;
    return o;
}

std::map<std::string, std::string> rank_variables() {
    return {{"DSV4_RANK", "3"},           {"DSV4_WORLD_SIZE", "4"},
            {"DSV4_LOCAL_RANK", "1"},     {"DSV4_LOCAL_WORLD_SIZE", "2"},
            {"DSV4_DEVICE", "5"},         {"DSV4_MASTER_ADDR", "node0"},
            {"DSV4_MASTER_PORT", "29500"}};
}

}  // namespace

TEST(GpuList, Parses) {
    EXPECT_EQ(parse_gpu_list("0,1", 2), (std::vector<int>{0, 1}));
    EXPECT_EQ(parse_gpu_list(" 3 , 0 ", 4), (std::vector<int>{3, 0}));
    EXPECT_EQ(parse_gpu_list("7", -1), (std::vector<int>{7}));  // device count unknown: no range check
    EXPECT_EQ(parse_gpu_list("0,0", 1, /*allow_shared=*/true), (std::vector<int>{0, 0}));
}

TEST(GpuList, RejectsWithASentence) {
    expect_error([] { parse_gpu_list("", 2); }, "--gpus is empty");
    expect_error([] { parse_gpu_list(" ", 2); }, "--gpus is empty");
    expect_error([] { parse_gpu_list("0,,1", 2); }, "has an empty item");
    expect_error([] { parse_gpu_list("0,", 2); }, "has an empty item");
    expect_error([] { parse_gpu_list("0,a", 2); }, "'a' is not a GPU id");
    expect_error([] { parse_gpu_list("1x", 2); }, "'1x' is not a GPU id");
    expect_error([] { parse_gpu_list("0,-1", 2); }, "GPU id -1 is negative");
    expect_error([] { parse_gpu_list("0,1,0", 2); }, "names GPU 0 twice");
    expect_error([] { parse_gpu_list("0,1,0", 2); }, "DSV4_SHARE_GPUS=1");
    expect_error([] { parse_gpu_list("0,4", 2); }, "names GPU 4 but this machine has 2 GPUs (ids 0 to 1)");
    expect_error([] { parse_gpu_list("1", 1); }, "has 1 GPU (ids 0 to 0)");
    expect_error([] { parse_gpu_list("0,3", 2, /*allow_shared=*/true); }, "names GPU 3");
}

TEST(ParallelOptions, AcceptsValid) {
    EXPECT_NO_THROW(validate_options(two_nodes()));
    ParallelOptions one;
    one.gpus = {0, 1};
    EXPECT_NO_THROW(validate_options(one));  // one node: address and port may be left to the launcher
    EXPECT_NO_THROW(validate_options(ParallelOptions{}));
    one.gpus = {0, 0};
    EXPECT_NO_THROW(validate_options(one, /*share_gpus=*/true));
}

TEST(ParallelOptions, RejectsWithASentence) {
    auto with = [](const std::function<void(ParallelOptions&)>& change) {
        ParallelOptions o = two_nodes();
        change(o);
        return [o] { validate_options(o); };
    };
    expect_error(with([](auto& o) { o.nnodes = 0, o.node_rank = 0; }), "--nnodes 0 is not a number of nodes");
    expect_error(with([](auto& o) { o.node_rank = 2; }), "--node-rank 2 is outside 0..1 (--nnodes 2)");
    expect_error(with([](auto& o) { o.node_rank = -1; }), "--node-rank -1 is outside");
    expect_error(with([](auto& o) { o.gpus.clear(); }), "--nnodes 2 needs --gpus");
    expect_error(with([](auto& o) { o.master_addr.clear(); }), "--nnodes 2 needs --master-addr");
    expect_error(with([](auto& o) { o.master_port = 0; }), "--nnodes 2 needs --master-port");
    expect_error(with([](auto& o) { o.master_port = 70000; }), "--master-port 70000 is not a TCP port");
    expect_error(with([](auto& o) { o.master_port = -5; }), "--master-port -5 is not a TCP port");
    expect_error(with([](auto& o) { o.timeout_s = 0; }), "timeout must be positive");
    expect_error(with([](auto& o) { o.gpus = {1, 1}; }), "GPU 1 is given to two ranks");
}

TEST(ShareGpus, ReadsTheEnvironment) {
    unsetenv(kEnvShareGpus);
    EXPECT_FALSE(share_gpus_from_environment());
    setenv(kEnvShareGpus, "0", 1);
    EXPECT_FALSE(share_gpus_from_environment());
    setenv(kEnvShareGpus, "1", 1);
    EXPECT_TRUE(share_gpus_from_environment());
    setenv(kEnvShareGpus, "yes", 1);
    expect_error([] { share_gpus_from_environment(); }, "DSV4_SHARE_GPUS='yes' is not understood");
    unsetenv(kEnvShareGpus);
}

TEST(RankEnvironment, NotARank) {
    EXPECT_FALSE(rank_from_variables({}).has_value());
}

TEST(RankEnvironment, ReadsAPlace) {
    const std::optional<RankInfo> info = rank_from_variables(rank_variables());
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->rank, 3);
    EXPECT_EQ(info->world, 4);
    EXPECT_EQ(info->local_rank, 1);
    EXPECT_EQ(info->local_world, 2);
    EXPECT_EQ(info->device, 5);
    EXPECT_EQ(info->master_addr, "node0");
    EXPECT_EQ(info->master_port, 29500);
    EXPECT_FALSE(info->leader());
}

TEST(RankEnvironment, RejectsWithASentence) {
    auto with = [](const std::string& name, const std::optional<std::string>& value) {
        std::map<std::string, std::string> v = rank_variables();
        if (value) {
            v[name] = *value;
        } else {
            v.erase(name);
        }
        return [v] { rank_from_variables(v); };
    };
    expect_error(with("DSV4_RANK", "4"), "DSV4_RANK='4' is not an integer in 0..3");
    expect_error(with("DSV4_RANK", "one"), "DSV4_RANK='one' is not an integer");
    expect_error(with("DSV4_WORLD_SIZE", std::nullopt), "DSV4_RANK is set but DSV4_WORLD_SIZE is not");
    expect_error(with("DSV4_MASTER_ADDR", std::nullopt), "DSV4_RANK is set but DSV4_MASTER_ADDR is not");
    expect_error(with("DSV4_MASTER_PORT", "0"), "DSV4_MASTER_PORT='0' is not an integer in 1..65535");
    expect_error(with("DSV4_DEVICE", "-1"), "DSV4_DEVICE='-1'");
    expect_error(with("DSV4_LOCAL_RANK", "0"), "DSV4_RANK=3 does not match DSV4_LOCAL_RANK=0");
    expect_error(with("DSV4_LOCAL_WORLD_SIZE", "3"), "DSV4_WORLD_SIZE=4 is not a multiple of DSV4_LOCAL_WORLD_SIZE=3");
    expect_error([] { rank_from_variables({{"DSV4_DEVICE", "0"}}); }, "DSV4_DEVICE is set but DSV4_RANK is not");
}
