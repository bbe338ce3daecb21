// The local supervisor of a run over several GPUs: validates the user's parallel options, starts one process
// (rank) per local GPU with environment variables telling each its place, and stops them all when one fails.
// A started process finds its place with rank_from_environment(). No CUDA here (the device count is a parameter).
// Tested in tests/parallel/launcher_test.cpp (real processes: /bin/sh) and options_test.cpp.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/parallel/parallel_options.h"

namespace dsv4::parallel {

// What the launcher sets in each child's environment (torchrun's RANK/WORLD_SIZE/... under our own prefix).
inline constexpr const char* kEnvRank = "DSV4_RANK";
inline constexpr const char* kEnvWorldSize = "DSV4_WORLD_SIZE";
inline constexpr const char* kEnvLocalRank = "DSV4_LOCAL_RANK";
inline constexpr const char* kEnvLocalWorldSize = "DSV4_LOCAL_WORLD_SIZE";
inline constexpr const char* kEnvDevice = "DSV4_DEVICE";
inline constexpr const char* kEnvMasterAddr = "DSV4_MASTER_ADDR";
inline constexpr const char* kEnvMasterPort = "DSV4_MASTER_PORT";
// Test mode for one-GPU machines: DSV4_SHARE_GPUS=1 lets --gpus name one GPU several times (`--gpus 0,0`). NCCL
// refuses two ranks on one GPU of one host, so each child then gets NCCL_HOSTID=dsv4-rank-<rank> (NCCL takes the
// ranks for separate hosts and talks over sockets) and NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1. Slow; for tests only.
inline constexpr const char* kEnvShareGpus = "DSV4_SHARE_GPUS";

// "0,1,3" -> {0, 1, 3}. Throws dsv4::Error for an empty list or item, a non-number, a negative id, an id a machine
// with `device_count` GPUs does not have (device_count < 0: not checked), and a GPU named twice unless allow_shared.
std::vector<int> parse_gpu_list(const std::string& text, int device_count, bool allow_shared = false);

// DSV4_SHARE_GPUS: unset, empty or "0" -> false, "1" -> true; anything else throws.
bool share_gpus_from_environment();

// Checks nnodes >= 1, 0 <= node_rank < nnodes, --gpus given when nnodes > 1, no GPU named twice (unless
// share_gpus), master_addr given when nnodes > 1, master_port in 0..65535 (0 only on one node), timeout_s > 0.
void validate_options(const ParallelOptions& options, bool share_gpus = false);

struct LaunchSettings {
    bool share_gpus = false;    // the test mode above (the caller reads share_gpus_from_environment())
    double stop_grace_s = 5.0;  // once a rank failed: SIGTERM to the others, SIGKILL to those left after this long
};

// Starts one child per entry of options.gpus, each executing argv (argv[0]: a path, or a name looked up in PATH;
// the CLI passes itself, e.g. /proc/self/exe and its own arguments) with the environment above added; waits for
// all. Global rank = node_rank * gpus.size() + local rank. On one node with master_port 0 it picks a free port on
// loopback. Global rank 0 keeps this process's stdout (the user's output); the other ranks' stdout goes to
// /dev/null; all keep stderr. The first SIGINT/SIGTERM received meanwhile is forwarded to global rank 0
// where it runs on this node (it ends the run in order; the followers end with it), else to every child; a second one
// to every child. When a child exits
// non-zero or by a signal, the others get SIGTERM, then SIGKILL after stop_grace_s; one line on stderr names the
// rank (`dsv4: rank 1 (GPU 1) was killed by signal 9 (Killed); stopped the other ranks`).
// Returns 0 when every child exited 0; otherwise the first failed child's exit code, or 128 + its signal.
// Throws dsv4::Error (before starting anything) for invalid options or an argv[0] that cannot be executed.
// Children die with SIGTERM if the thread that called this ends first (PR_SET_PDEATHSIG; Linux).
int launch_local_ranks(const ParallelOptions& options, const std::vector<std::string>& argv,
                       const LaunchSettings& settings = {});

// In a child of launch_local_ranks: its place (nullopt when DSV4_RANK is not set: not a rank, run normally).
// Throws dsv4::Error naming the variable when one is missing or inconsistent (e.g. DSV4_RANK=2 with
// DSV4_WORLD_SIZE=2). `variables` stands for the environment in tests.
std::optional<RankInfo> rank_from_environment();
std::optional<RankInfo> rank_from_variables(const std::map<std::string, std::string>& variables);

}  // namespace dsv4::parallel
