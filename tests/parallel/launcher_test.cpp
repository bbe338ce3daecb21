// launch_local_ranks with real processes (/bin/sh): exit codes, stopping the other ranks when one fails (and
// SIGKILL for one that ignores SIGTERM), the environment each rank sees, whose stdout reaches the user, the
// shared-GPU test mode, and signals forwarded to the ranks.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "runtime/parallel/launcher.h"

using namespace dsv4;
using namespace dsv4::parallel;
namespace fs = std::filesystem;

namespace {

// A fresh directory for one test's files, removed afterwards.
struct TempDir {
    fs::path path;
    TempDir() {
        std::string pattern = (fs::temp_directory_path() / "dsv4-launcher-XXXXXX").string();
        EXPECT_NE(mkdtemp(pattern.data()), nullptr);
        path = pattern;
    }
    ~TempDir() { fs::remove_all(path); }
    std::string operator/(const std::string& name) const { return (path / name).string(); }
};

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

std::map<std::string, std::string> read_env(const std::string& path) {
    std::map<std::string, std::string> vars;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
        const size_t eq = line.find('=');
        if (eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return vars;
}

ParallelOptions gpus(std::vector<int> ids) {
    ParallelOptions o;
    o.gpus = std::move(ids);
    return o;
}

std::vector<std::string> sh(const std::string& script) {
    return {"/bin/sh", "-c", script};
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool process_exists(pid_t pid) {
    return kill(pid, 0) == 0 || errno != ESRCH;
}

}  // namespace

TEST(Launcher, AllRanksExitZero) {
    EXPECT_EQ(launch_local_ranks(gpus({0, 1, 2}), sh("exit 0")), 0);
}

TEST(Launcher, OneRankFailsTheOthersAreStopped) {
    TempDir dir;
    // Rank 0 sleeps (recording its pid); rank 1 fails once rank 0 is surely running.
    const std::string script = "if [ \"$DSV4_RANK\" = 0 ]; then echo $$ > " + dir / "pid" + "; exec sleep 60; fi; " +
                               "while [ ! -s " + dir / "pid" + " ]; do sleep 0.01; done; exit 3";
    testing::internal::CaptureStderr();
    const auto start = std::chrono::steady_clock::now();
    const int code = launch_local_ranks(gpus({0, 1}), sh(script));
    const double elapsed = seconds_since(start);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(code, 3);
    EXPECT_LT(elapsed, 5.0);
    EXPECT_NE(err.find("dsv4: rank 1 (GPU 1) exited with code 3; stopped the other ranks"), std::string::npos) << err;
    const pid_t sleeper = std::atoi(read_file(dir / "pid").c_str());
    ASSERT_GT(sleeper, 0);
    EXPECT_FALSE(process_exists(sleeper)) << "rank 0 (pid " << sleeper << ") still runs";
}

TEST(Launcher, RankIgnoringSigtermIsKilled) {
    TempDir dir;
    const std::string script = "if [ \"$DSV4_RANK\" = 1 ]; then trap '' TERM; echo $$ > " + dir / "pid" +
                               "; exec sleep 60; fi; while [ ! -s " + dir / "pid" + " ]; do sleep 0.01; done; exit 4";
    LaunchSettings settings;
    settings.stop_grace_s = 0.3;
    testing::internal::CaptureStderr();
    const auto start = std::chrono::steady_clock::now();
    const int code = launch_local_ranks(gpus({0, 1}), sh(script), settings);
    const double elapsed = seconds_since(start);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(code, 4);
    EXPECT_GE(elapsed, 0.3);  // it had its grace period
    EXPECT_LT(elapsed, 3.0);
    EXPECT_NE(err.find("dsv4: rank 0 (GPU 0) exited with code 4"), std::string::npos) << err;
    EXPECT_FALSE(process_exists(std::atoi(read_file(dir / "pid").c_str())));
}

TEST(Launcher, RankKilledBySignalIsNamed) {
    testing::internal::CaptureStderr();
    const int code = launch_local_ranks(gpus({4, 6}), sh("[ \"$DSV4_RANK\" = 1 ] && kill -9 $$; exit 0"));
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(code, 128 + 9);
    EXPECT_NE(err.find("dsv4: rank 1 (GPU 6) was killed by signal 9"), std::string::npos) << err;
}

TEST(Launcher, RanksSeeTheirPlace) {
    TempDir dir;
    ParallelOptions o = gpus({2, 5});
    o.nnodes = 2, o.node_rank = 1, o.master_addr = "10.1.2.3", o.master_port = 29511;
    ::setenv("NCCL_P2P_DISABLE", "1", 1);  // the user's own NCCL setting, kept outside the shared-GPU mode
    const int launched = launch_local_ranks(o, sh("env > " + dir / "env.$DSV4_RANK"));
    ::unsetenv("NCCL_P2P_DISABLE");
    ASSERT_EQ(launched, 0);
    for (int local = 0; local < 2; ++local) {
        const int rank = 2 + local;
        std::map<std::string, std::string> env = read_env(dir / ("env." + std::to_string(rank)));
        EXPECT_EQ(env["DSV4_RANK"], std::to_string(rank));
        EXPECT_EQ(env["DSV4_WORLD_SIZE"], "4");
        EXPECT_EQ(env["DSV4_LOCAL_RANK"], std::to_string(local));
        EXPECT_EQ(env["DSV4_LOCAL_WORLD_SIZE"], "2");
        EXPECT_EQ(env["DSV4_DEVICE"], local == 0 ? "2" : "5");
        EXPECT_EQ(env["DSV4_MASTER_ADDR"], "10.1.2.3");
        EXPECT_EQ(env["DSV4_MASTER_PORT"], "29511");
        EXPECT_EQ(env.count("NCCL_HOSTID"), 0u);
        EXPECT_EQ(env["NCCL_P2P_DISABLE"], "1");
        EXPECT_EQ(env["PATH"], std::getenv("PATH")) << "the rest of the environment is passed on";
        const std::optional<RankInfo> info = rank_from_variables(env);  // what the child reads
        ASSERT_TRUE(info.has_value());
        EXPECT_EQ(info->rank, rank);
        EXPECT_EQ(info->device, local == 0 ? 2 : 5);
    }
}

TEST(Launcher, OneNodePicksALoopbackPort) {
    TempDir dir;
    ASSERT_EQ(launch_local_ranks(gpus({0, 1}), sh("env > " + dir / "env.$DSV4_RANK")), 0);
    std::map<std::string, std::string> env0 = read_env(dir / "env.0"), env1 = read_env(dir / "env.1");
    EXPECT_EQ(env0["DSV4_MASTER_ADDR"], "127.0.0.1");
    const int port = std::atoi(env0["DSV4_MASTER_PORT"].c_str());
    EXPECT_GT(port, 0);
    EXPECT_LE(port, 65535);
    EXPECT_EQ(env1["DSV4_MASTER_PORT"], env0["DSV4_MASTER_PORT"]);
}

TEST(Launcher, OnlyRankZeroWritesToStdout) {
    TempDir dir;
    std::fflush(stdout);
    const int saved = dup(STDOUT_FILENO);
    FILE* captured = std::fopen((dir / "stdout").c_str(), "w");
    ASSERT_NE(captured, nullptr);
    dup2(fileno(captured), STDOUT_FILENO);
    testing::internal::CaptureStderr();
    const int code = launch_local_ranks(gpus({0, 1, 2}), sh("echo out-$DSV4_RANK; echo err-$DSV4_RANK >&2"));
    const std::string err = testing::internal::GetCapturedStderr();
    dup2(saved, STDOUT_FILENO);
    close(saved);
    std::fclose(captured);
    EXPECT_EQ(code, 0);
    EXPECT_EQ(read_file(dir / "stdout"), "out-0\n");
    for (const char* line : {"err-0", "err-1", "err-2"}) EXPECT_NE(err.find(line), std::string::npos) << err;
}

TEST(Launcher, SharedGpusGetDistinctNcclHosts) {
    TempDir dir;
    EXPECT_THROW(launch_local_ranks(gpus({0, 0}), sh("exit 0")), Error);
    LaunchSettings settings;
    settings.share_gpus = true;
    ASSERT_EQ(launch_local_ranks(gpus({0, 0}), sh("env > " + dir / "env.$DSV4_RANK"), settings), 0);
    for (int rank = 0; rank < 2; ++rank) {
        std::map<std::string, std::string> env = read_env(dir / ("env." + std::to_string(rank)));
        EXPECT_EQ(env["NCCL_HOSTID"], "dsv4-rank-" + std::to_string(rank));
        EXPECT_EQ(env["NCCL_P2P_DISABLE"], "1");
        EXPECT_EQ(env["NCCL_SHM_DISABLE"], "1");
        EXPECT_EQ(env["DSV4_DEVICE"], "0");
    }
}

TEST(Launcher, ForwardsSigtermToTheRanks) {
    TempDir dir;
    const std::string script = "echo $$ > " + dir / "pid.$DSV4_RANK" + "; exec sleep 60";
    std::thread sender([&] {  // once both ranks run (so the supervisor's handler is installed), signal it
        const auto start = std::chrono::steady_clock::now();
        while (!(fs::exists(dir / "pid.0") && fs::exists(dir / "pid.1")) && seconds_since(start) < 10) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        kill(getpid(), SIGTERM);
    });
    testing::internal::CaptureStderr();
    const auto start = std::chrono::steady_clock::now();
    const int code = launch_local_ranks(gpus({0, 1}), sh(script));
    const std::string err = testing::internal::GetCapturedStderr();
    sender.join();
    EXPECT_EQ(code, 128 + SIGTERM);
    EXPECT_LT(seconds_since(start), 5.0);
    EXPECT_NE(err.find("dsv4: received signal 15"), std::string::npos) << err;
}

TEST(Launcher, RejectsACommandThatCannotRun) {
    EXPECT_THROW(launch_local_ranks(gpus({0, 1}), {"dsv4-no-such-command"}), Error);
    EXPECT_THROW(launch_local_ranks(gpus({0, 1}), {"/nonexistent/dsv4"}), Error);
    EXPECT_THROW(launch_local_ranks(gpus({0, 1}), {}), Error);
}
