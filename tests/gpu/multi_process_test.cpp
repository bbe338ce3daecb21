// The multi-process path through the dsv4 binary (docs/parallel.md): `--gpus 0,1,...` starts one process per GPU,
// joined by the TCP rendezvous and NCCL, the routed experts split between them, rank 0 driving and the others
// mirroring. Every GPU of the machine gets a rank (up to 8, the fixtures' expert count); on a machine with one GPU two
// ranks share it (DSV4_SHARE_GPUS=1: NCCL over sockets).
//  * logits over a mixed chunk schedule and greedy tokens equal one GPU's, bit for bit, on an MXFP4 fixture, the
//    trained one and a transformers fixture (dense experts);
//  * the last rank killed mid-decode ends the run within seconds with an error naming it, instead of a hang; the last
//    rank stopped mid-decode (alive, stuck) ends it once rank 0's step watchdog expires;
//  * a share that does not fit its GPU ends the run with the memory plan's error.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../tools/tool_test_util.h"
#include "cuda_fixtures.h"
#include "gpu_test_util.h"
#include "kernels/cuda/smoke/device_info.h"
#include "model/golden_io.h"

extern char** environ;

namespace dsv4 {
namespace {

using namespace dsv4::testing;

// The ranks of a run: one per GPU where there are two or more (at most 8, the fewest routed experts of the fixtures
// used here), else two on GPU 0 (the shared-GPU test mode).
struct Ranks {
    int count = 2;
    std::string gpus;  // the --gpus option
    std::string env;   // environment the run needs
};
Ranks machine_ranks() {
    const int gpus = std::min(cuda::device_count(), 8);
    if (gpus < 2) return {2, "--gpus 0,0", "DSV4_SHARE_GPUS=1"};
    Ranks r{gpus, "--gpus 0", ""};
    for (int g = 1; g < gpus; ++g) r.gpus += "," + std::to_string(g);
    return r;
}

std::string ids_file(const cuda_fixtures::ModelInputs& in, const std::string& name) {
    std::vector<int64_t> ids(in.ids.begin(), in.ids.end());
    return write_text(name + ".ids", join_ids(ids));
}

std::string chunks_of(const std::vector<int64_t>& schedule, size_t ids) {
    std::string s;
    size_t total = 0;
    for (int64_t c : schedule) {
        const size_t n = std::min(size_t(c), ids - total);
        if (n == 0) break;
        s += (s.empty() ? "" : ",") + std::to_string(n);
        total += n;
    }
    return s;
}

class MultiProcess : public ::testing::TestWithParam<std::string> {
  protected:
    void expect_ranks_equal_one_gpu(const std::string& attention);
};

TEST_P(MultiProcess, RanksEqualOneGpu) {
    expect_ranks_equal_one_gpu("replicated");
}

// The sequence lives on rank 0: the other processes compute no attention, only their experts over its gathered rows.
TEST_P(MultiProcess, DataParallelAttentionRanksEqualOneGpu) {
    expect_ranks_equal_one_gpu("data-parallel");
}

void MultiProcess::expect_ranks_equal_one_gpu(const std::string& attention) {
    DSV4_REQUIRE_GPU();
    const cuda_fixtures::ModelInputs in = cuda_fixtures::model_inputs(GetParam());
    if (!in.found) GTEST_SKIP() << "fixture " << GetParam() << " absent";
    const auto [ranks, machine_gpus, env] = machine_ranks();
    const std::string gpus = machine_gpus + " --attention " + attention;
    const std::string many = std::to_string(ranks) + " ranks";
    const std::string ids = ids_file(in, GetParam());
    const std::string common = "-q --numerics model -m " + in.dir + " --ids-file " + ids;

    const std::string one = temp_path(GetParam() + ".one.safetensors"),
                      several = temp_path(GetParam() + ".ranks.safetensors");
    const std::string logits = "logits " + common + " --chunks " + chunks_of(in.schedule, in.ids.size());
    Result r1 = run(logits + " --backend cuda --out " + one);
    ASSERT_EQ(r1.exit_code, 0) << r1.output;
    Result r2 = run(logits + " " + gpus + " --out " + several, env);
    ASSERT_EQ(r2.exit_code, 0) << r2.output;
    gpu_test::expect_bitwise_f32(GetParam() + ": logits of " + many + " vs one GPU", Golden(several).floats("logits"),
                                 Golden(one).floats("logits"));

    const std::string generate = "generate " + common + " --greedy -n 24 --print-ids";
    Result g1 = run_split(generate + " --backend cuda");
    ASSERT_EQ(g1.exit_code, 0) << g1.errors;
    Result g2 = run_split(generate + " " + gpus, env);
    ASSERT_EQ(g2.exit_code, 0) << g2.errors;
    EXPECT_EQ(g2.output, g1.output) << "greedy tokens of " << many << " vs one GPU";
    EXPECT_EQ(parse_ids(g1.output).size(), 24u) << g1.output;
    std::printf("[ bitwise  ] %s: %d processes (%s%s) equal one GPU: logits of %zu ids, 24 greedy tokens\n",
                GetParam().c_str(), ranks, gpus.c_str(), env.empty() ? "" : ", shared", in.ids.size());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MultiProcess,
                         ::testing::Values("native-mxfp4-mtp", "official-trained-bytes", "hf-tiny-hc2-hca16"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                             return cuda_fixtures::test_name(info.param);
                         });

// The pid of the supervisor's child whose environment says DSV4_RANK=rank, or -1.
pid_t rank_pid(pid_t supervisor, int rank) {
    std::ifstream children("/proc/" + std::to_string(supervisor) + "/task/" + std::to_string(supervisor) + "/children");
    for (pid_t child; children >> child;) {
        std::ifstream environ_file("/proc/" + std::to_string(child) + "/environ", std::ios::binary);
        std::string var;
        while (std::getline(environ_file, var, '\0'))
            if (var == "DSV4_RANK=" + std::to_string(rank)) return child;
    }
    return -1;
}

// A long greedy decode over the machine's ranks (thousands of steps, past any EOS), started by a shell so the test can
// signal one rank mid-run; `extra` flags go to dsv4 generate. Waits until every rank has printed its memory plan (its
// model exists) and a moment more, so the signal lands in the decode loop.
struct LongDecode {
    Ranks ranks = machine_ranks();
    std::string out, err;
    pid_t supervisor = -1;

    explicit LongDecode(const std::string& name, const std::string& extra = "") {
        const cuda_fixtures::ModelInputs in = cuda_fixtures::model_inputs("native-mxfp4-mtp");
        EXPECT_TRUE(in.found);
        const auto& [count, gpus, env] = ranks;
        out = temp_path(name + ".stdout"), err = temp_path(name + ".stderr");
        const std::string command = (env.empty() ? "" : "export " + env + "; ") + "exec " + kBinary +
                                    " generate --numerics model -m " + in.dir + " --ids-file " + ids_file(in, name) +
                                    " --greedy -n 12000 --ignore-eos --print-ids " + gpus + " " + extra + " >" + out +
                                    " 2>" + err;
        const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
        EXPECT_EQ(posix_spawn(&supervisor, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
    }
    bool every_rank_started() const {
        const std::string text = read_text(err);
        for (int r = 0; r < ranks.count; ++r)
            if (text.find("rank " + std::to_string(r) + " of " + std::to_string(ranks.count)) == std::string::npos)
                return false;
        return true;
    }
    // False (with a test failure) when the run ended before every rank ran, or never got there.
    bool wait_until_running() {
        const auto start = std::chrono::steady_clock::now();
        while (!every_rank_started()) {
            int status = 0;
            if (std::chrono::steady_clock::now() - start > std::chrono::seconds(120) ||
                waitpid(supervisor, &status, WNOHANG) != 0) {
                ADD_FAILURE() << "the ranks did not all start, or the run ended early:\n" << read_text(err);
                return false;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        // Short: over NVLink the whole 12,000-step decode takes a few seconds (over sockets, on one GPU, far longer).
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        return true;
    }
    // The supervisor's wait status once it exits, or nullopt (with a test failure) after `limit`.
    std::optional<int> wait_end(std::chrono::seconds limit) {
        const auto start = std::chrono::steady_clock::now();
        int status = 0;
        while (waitpid(supervisor, &status, WNOHANG) == 0) {
            if (std::chrono::steady_clock::now() - start > limit) {
                ADD_FAILURE() << "the run did not end within " << limit.count() << " s:\n" << read_text(err);
                ::kill(supervisor, SIGKILL);
                return std::nullopt;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return status;
    }
};

// Sends `signal` to the last rank of a running LongDecode and checks how the run ended: within `limit`, not with
// success, before the decode could finish, with `expected` in its stderr (`{rank}`: the victim's number). Prints the
// outcome; returns seconds to the end.
double signal_last_rank(LongDecode& run, int signal, std::chrono::seconds limit, std::string expected) {
    const int rank = run.ranks.count - 1;
    const size_t at = expected.find("{rank}");
    if (at != std::string::npos) expected.replace(at, 6, std::to_string(rank));
    const pid_t victim = rank_pid(run.supervisor, rank);
    EXPECT_GT(victim, 0) << "no rank " << rank << " among the supervisor's children";
    if (victim <= 0) return 0.0;
    EXPECT_EQ(kill(victim, signal), 0);
    const auto sent = std::chrono::steady_clock::now();
    const std::optional<int> status = run.wait_end(limit);
    if (!status) {
        ::kill(victim, SIGKILL);
        return 0.0;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
    EXPECT_TRUE(!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) << "exit status " << *status;
    const std::string errors = read_text(run.err);
    EXPECT_NE(errors.find(expected), std::string::npos) << errors;
    EXPECT_EQ(read_text(run.out), "") << "the decode finished first: the test did not test a fault mid-run";
    std::printf("[ fault    ] rank %d of %d got %s mid-decode: the run ended %.2f s later, exit status %d; stderr's "
                "last line: %s",
                rank, run.ranks.count, strsignal(signal), seconds,
                WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status),
                errors.substr(errors.rfind('\n', errors.size() - 2) + 1).c_str());
    return seconds;
}

TEST(MultiProcessFault, KilledRankEndsTheRunWithAClearError) {
    DSV4_REQUIRE_GPU();
    LongDecode run("fault_kill");
    ASSERT_TRUE(run.wait_until_running());
    EXPECT_LT(signal_last_rank(run, SIGKILL, std::chrono::seconds(20), "rank {rank}"), 10.0);
}

// A rank that stops without exiting (SIGSTOP: as a hung GPU or a deadlocked process looks from outside) leaves rank 0
// waiting in a collective; no process exits, so only rank 0's step watchdog (--step-timeout) can end the run: after
// 3 s, then the supervisor's SIGTERM and, 5 s later, SIGKILL to the stopped rank.
TEST(MultiProcessFault, StoppedRankEndsTheRunAfterTheStepTimeout) {
    DSV4_REQUIRE_GPU();
    LongDecode run("fault_stop", "--step-timeout 3");
    ASSERT_TRUE(run.wait_until_running());
    EXPECT_GE(
        signal_last_rank(run, SIGSTOP, std::chrono::seconds(30), "(--step-timeout): a GPU or another rank is stuck"),
        3.0);
}

// A plan that does not fit a rank's GPU (dsv4 bench's state pool for 1024 sequences of a million positions: ~170 GB
// on 4 V4-Flash layers) fails on every rank before anything is allocated, with the memory plan's sentence, and the
// run ends with an error instead of waiting for the ranks that failed.
TEST(MultiProcessFault, AShareThatDoesNotFitIsAClearError) {
    DSV4_REQUIRE_GPU();
    const Ranks ranks = machine_ranks();
    const auto start = std::chrono::steady_clock::now();
    const Result r = run_split(
        "bench --layers 4 --context 1000000 --batch 1024 --steps 1 --warmup 0 --threads 4 " + ranks.gpus, ranks.env);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(r.exit_code, 0) << r.errors;
    EXPECT_NE(r.errors.find("does not fit on GPU"), std::string::npos) << r.errors;
    EXPECT_NE(r.errors.find("rank "), std::string::npos) << "the supervisor names the rank that failed:\n" << r.errors;
    EXPECT_LT(seconds, 120.0);
    std::printf("[ fault    ] a share that does not fit: the run ended after %.1f s, exit %d\n", seconds, r.exit_code);
}

}  // namespace
}  // namespace dsv4
