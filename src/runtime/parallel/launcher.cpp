// The local supervisor (launcher.h): option checks, fork/exec of one rank per GPU, and the wait that stops all
// ranks when one fails. Tested in tests/parallel/launcher_test.cpp and options_test.cpp.
#include "runtime/parallel/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <set>
#include <thread>

#include "core/error.h"
#include "runtime/parallel/tcp_group.h"

extern char** environ;

namespace dsv4::parallel {
namespace {

std::string trim(const std::string& s) {
    const size_t first = s.find_first_not_of(" \t");
    if (first == std::string::npos) return "";
    return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// The whole of `text` as an int, or nullopt.
std::optional<long long> parse_integer(const std::string& text) {
    long long value = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
    return value;
}

// A name without '/' is looked up in PATH as execvp would, but before fork (after it only async-signal-safe calls
// are allowed, and the caller may have threads).
std::string resolve_executable(const std::string& name) {
    DSV4_CHECK(!name.empty(), "the command to start on each rank is empty");
    if (name.find('/') != std::string::npos) {
        DSV4_CHECK(access(name.c_str(), X_OK) == 0, "cannot execute '{}' on each rank: {}", name, std::strerror(errno));
        return name;
    }
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
    size_t begin = 0;
    while (begin <= dirs.size()) {
        size_t end = dirs.find(':', begin);
        if (end == std::string::npos) end = dirs.size();
        std::string dir = dirs.substr(begin, end - begin);
        std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
        if (access(candidate.c_str(), X_OK) == 0) return candidate;
        begin = end + 1;
    }
    fail("cannot find '{}' in PATH to start it on each rank", name);
}

std::string describe_status(int status) {
    if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
    return fmt::format("ended with wait status {}", status);
}

int exit_code_of(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status) != 0 ? WEXITSTATUS(status) : 1;
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

// The last SIGINT/SIGTERM the supervisor received, for its wait loop to forward. Process-global because a signal
// handler can reach nothing else; it is only set while launch_local_ranks waits.
volatile sig_atomic_t g_received_signal = 0;
void record_signal(int signal_number) {
    g_received_signal = signal_number;
}

// Installs record_signal for SIGINT and SIGTERM; restores the previous handlers when destroyed.
class ForwardedSignals {
  public:
    ForwardedSignals() {
        g_received_signal = 0;
        struct sigaction action = {};
        action.sa_handler = record_signal;
        sigemptyset(&action.sa_mask);
        sigaction(SIGINT, &action, &old_int_);
        sigaction(SIGTERM, &action, &old_term_);
    }
    ~ForwardedSignals() {
        sigaction(SIGINT, &old_int_, nullptr);
        sigaction(SIGTERM, &old_term_, nullptr);
    }
    ForwardedSignals(const ForwardedSignals&) = delete;
    ForwardedSignals& operator=(const ForwardedSignals&) = delete;

  private:
    struct sigaction old_int_ = {}, old_term_ = {};
};

struct Child {
    int rank = 0, gpu = 0;
    pid_t pid = -1;
    bool running = false;
    int status = 0;
};

// Everything one child's execve needs, built before fork.
struct ExecImage {
    std::vector<std::string> environment;
    std::vector<char*> envp;
    void seal() {
        envp.clear();
        for (std::string& entry : environment) envp.push_back(entry.data());
        envp.push_back(nullptr);
    }
};

const char* const kSetByLauncher[] = {kEnvRank,   kEnvWorldSize,  kEnvLocalRank, kEnvLocalWorldSize,
                                      kEnvDevice, kEnvMasterAddr, kEnvMasterPort};
// Set for the shared-GPU test mode only; otherwise the user's own (e.g. NCCL_P2P_DISABLE=1 to rule out NVLink)
// reach the ranks.
const char* const kSetWhenSharing[] = {"NCCL_HOSTID", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"};

bool set_by_launcher(const char* entry, bool share_gpus) {
    auto named = [entry](const char* name) {
        const size_t n = std::strlen(name);
        return std::strncmp(entry, name, n) == 0 && entry[n] == '=';
    };
    return std::any_of(std::begin(kSetByLauncher), std::end(kSetByLauncher), named) ||
           (share_gpus && std::any_of(std::begin(kSetWhenSharing), std::end(kSetWhenSharing), named));
}

// Async-signal-safe: only write() and _exit() after fork.
[[noreturn]] void exec_child(const char* path, char* const* argv, char* const* envp, int stdout_fd, pid_t parent) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the supervisor died before prctl
    if (stdout_fd >= 0) dup2(stdout_fd, STDOUT_FILENO);
    execve(path, argv, envp);
    const char* what = strerror(errno);  // glibc's strerror of a known errno reads a static table
    const char prefix[] = "dsv4: a rank could not execute ";
    (void)!write(STDERR_FILENO, prefix, sizeof(prefix) - 1);
    (void)!write(STDERR_FILENO, path, std::strlen(path));
    (void)!write(STDERR_FILENO, ": ", 2);
    (void)!write(STDERR_FILENO, what, std::strlen(what));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(127);
}

}  // namespace

std::vector<int> parse_gpu_list(const std::string& text, int device_count, bool allow_shared) {
    DSV4_CHECK(!trim(text).empty(), "--gpus is empty; give the GPU ids to use, separated by commas (e.g. --gpus 0,1)");
    std::vector<int> gpus;
    std::set<int> seen;
    size_t begin = 0;
    while (true) {
        size_t end = text.find(',', begin);
        const std::string item = trim(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
        DSV4_CHECK(!item.empty(), "--gpus '{}' has an empty item; write GPU ids separated by single commas (e.g. 0,1)",
                   text);
        const std::optional<long long> id = parse_integer(item);
        DSV4_CHECK(id.has_value(), "--gpus '{}': '{}' is not a GPU id; GPU ids are non-negative integers (e.g. 0,1)",
                   text, item);
        DSV4_CHECK(*id >= 0, "--gpus '{}': GPU id {} is negative; GPU ids count from 0", text, *id);
        if (device_count >= 0) {
            DSV4_CHECK(device_count > 0, "--gpus '{}': this machine has no CUDA GPU", text);
            DSV4_CHECK(*id < device_count, "--gpus '{}' names GPU {} but this machine has {} GPU{} (ids 0 to {})", text,
                       *id, device_count, device_count == 1 ? "" : "s", device_count - 1);
        }
        DSV4_CHECK(allow_shared || seen.insert(int(*id)).second,
                   "--gpus '{}' names GPU {} twice; every rank needs a GPU of its own (DSV4_SHARE_GPUS=1 lets ranks "
                   "share a GPU, as a test mode for one-GPU machines)",
                   text, *id);
        gpus.push_back(int(*id));
        if (end == std::string::npos) break;
        begin = end + 1;
    }
    return gpus;
}

bool share_gpus_from_environment() {
    const char* value = std::getenv(kEnvShareGpus);
    if (!value || !*value || std::strcmp(value, "0") == 0) return false;
    DSV4_CHECK(std::strcmp(value, "1") == 0,
               "{}='{}' is not understood; set it to 1 (ranks may share a GPU: a test mode) "
               "or leave it unset",
               kEnvShareGpus, value);
    return true;
}

void validate_options(const ParallelOptions& options, bool share_gpus) {
    DSV4_CHECK(options.nnodes >= 1, "--nnodes {} is not a number of nodes; give 1 or more", options.nnodes);
    DSV4_CHECK(options.node_rank >= 0 && options.node_rank < options.nnodes,
               "--node-rank {} is outside 0..{} (--nnodes {}); number the nodes from 0", options.node_rank,
               options.nnodes - 1, options.nnodes);
    DSV4_CHECK(options.nnodes == 1 || !options.gpus.empty(),
               "--nnodes {} needs --gpus on every node (the GPUs of this node, e.g. --gpus 0,1,2,3)", options.nnodes);
    if (!share_gpus) {
        std::set<int> seen;
        for (int gpu : options.gpus) {
            DSV4_CHECK(seen.insert(gpu).second,
                       "GPU {} is given to two ranks; every rank needs a GPU of its own (DSV4_SHARE_GPUS=1 lets ranks "
                       "share a GPU, as a test mode)",
                       gpu);
        }
    }
    DSV4_CHECK(options.nnodes == 1 || !options.master_addr.empty(),
               "--nnodes {} needs --master-addr: the address of node 0, where rank 0 listens (the same on every node)",
               options.nnodes);
    DSV4_CHECK(options.master_port >= 0 && options.master_port <= 65535,
               "--master-port {} is not a TCP port; give one in 1..65535", options.master_port);
    DSV4_CHECK(options.nnodes == 1 || options.master_port != 0,
               "--nnodes {} needs --master-port: a free TCP port on node 0 (the same on every node, e.g. 29500)",
               options.nnodes);
    DSV4_CHECK(options.timeout_s > 0, "the parallel timeout must be positive (got {} s)", options.timeout_s);
}

int launch_local_ranks(const ParallelOptions& options, const std::vector<std::string>& argv,
                       const LaunchSettings& settings) {
    validate_options(options, settings.share_gpus);
    DSV4_CHECK(!options.gpus.empty(), "no GPUs were given to start ranks on (--gpus)");
    DSV4_CHECK(!argv.empty(), "the command to start on each rank is empty");
    const std::string path = resolve_executable(argv[0]);
    const std::string master_addr = options.master_addr.empty() ? "127.0.0.1" : options.master_addr;
    const int master_port = options.master_port != 0 ? options.master_port : pick_free_port(master_addr);
    const int local_world = int(options.gpus.size()), world = options.nnodes * local_world;

    std::vector<std::string> arguments = argv;
    std::vector<char*> child_argv;
    for (std::string& a : arguments) child_argv.push_back(a.data());
    child_argv.push_back(nullptr);

    std::vector<Child> children(local_world);
    std::vector<ExecImage> images(local_world);
    for (int local = 0; local < local_world; ++local) {
        Child& child = children[local];
        child.rank = options.node_rank * local_world + local;
        child.gpu = options.gpus[local];
        std::vector<std::string>& env = images[local].environment;
        for (char** entry = environ; *entry; ++entry) {
            if (!set_by_launcher(*entry, settings.share_gpus)) env.emplace_back(*entry);
        }
        env.push_back(fmt::format("{}={}", kEnvRank, child.rank));
        env.push_back(fmt::format("{}={}", kEnvWorldSize, world));
        env.push_back(fmt::format("{}={}", kEnvLocalRank, local));
        env.push_back(fmt::format("{}={}", kEnvLocalWorldSize, local_world));
        env.push_back(fmt::format("{}={}", kEnvDevice, child.gpu));
        env.push_back(fmt::format("{}={}", kEnvMasterAddr, master_addr));
        env.push_back(fmt::format("{}={}", kEnvMasterPort, master_port));
        if (settings.share_gpus) {
            env.push_back(fmt::format("NCCL_HOSTID=dsv4-rank-{}", child.rank));
            env.push_back("NCCL_P2P_DISABLE=1");
            env.push_back("NCCL_SHM_DISABLE=1");
        }
        images[local].seal();
    }

    const int dev_null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    DSV4_CHECK(dev_null >= 0, "cannot open /dev/null for the ranks' output: {}", std::strerror(errno));
    ForwardedSignals forwarded;
    const pid_t self = getpid();
    std::fflush(nullptr);  // or the children would inherit and flush our buffered output again
    for (int local = 0; local < local_world; ++local) {
        Child& child = children[local];
        child.pid = fork();
        if (child.pid == 0) {
            exec_child(path.c_str(), child_argv.data(), images[local].envp.data(), child.rank == 0 ? -1 : dev_null,
                       self);
        }
        if (child.pid < 0) {
            const int error = errno;
            for (Child& started : children) {
                if (started.running) kill(started.pid, SIGKILL), waitpid(started.pid, nullptr, 0);
            }
            ::close(dev_null);
            fail("cannot start rank {} (GPU {}): fork failed: {}", child.rank, child.gpu, std::strerror(error));
        }
        child.running = true;
    }
    ::close(dev_null);

    // Poll every 20 ms rather than block on SIGCHLD: the caller may have threads (tests do), which would take the
    // signal, and 50 wake-ups a second cost nothing next to a model.
    using Clock = std::chrono::steady_clock;
    const Child* failed = nullptr;
    int interrupted_by = 0;
    std::optional<Clock::time_point> kill_at;
    bool killed = false;
    for (int running = local_world; running > 0;) {
        for (Child& child : children) {
            if (!child.running) continue;
            const pid_t r = waitpid(child.pid, &child.status, WNOHANG);
            if (r != child.pid) continue;
            child.running = false;
            --running;
            const bool clean = WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0;
            if (!clean && !failed) {
                failed = &child;
                for (Child& other : children) {
                    if (other.running) kill(other.pid, SIGTERM);
                }
                kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(settings.stop_grace_s));
            }
        }
        if (const int signal_number = g_received_signal) {
            g_received_signal = 0;
            // The first signal goes to rank 0 alone where it runs here: it ends the run in order (a server stops
            // serving, the leader's goodbye ends the followers). A second one, or a node without rank 0, signals all.
            const bool leader_here = !interrupted_by && children.front().rank == 0 && children.front().running;
            interrupted_by = signal_number;
            for (Child& child : children) {
                if (child.running && (!leader_here || child.rank == 0)) kill(child.pid, signal_number);
            }
        }
        if (kill_at && !killed && Clock::now() >= *kill_at) {
            killed = true;
            for (Child& child : children) {
                if (child.running) kill(child.pid, SIGKILL);
            }
        }
        if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }

    if (!failed) return 0;
    const std::string others = local_world > 1 ? "; stopped the other ranks" : "";
    if (interrupted_by) {
        fmt::print(stderr, "dsv4: received signal {} ({}); rank {} (GPU {}) {}{}\n", interrupted_by,
                   strsignal(interrupted_by), failed->rank, failed->gpu, describe_status(failed->status), others);
    } else {
        fmt::print(stderr, "dsv4: rank {} (GPU {}) {}{}\n", failed->rank, failed->gpu, describe_status(failed->status),
                   others);
    }
    std::fflush(stderr);
    return exit_code_of(failed->status);
}

std::optional<RankInfo> rank_from_variables(const std::map<std::string, std::string>& variables) {
    if (!variables.count(kEnvRank)) {
        for (const char* name : {kEnvWorldSize, kEnvLocalRank, kEnvLocalWorldSize, kEnvDevice}) {
            DSV4_CHECK(!variables.count(name),
                       "{} is set but {} is not; both are set by the dsv4 launcher (unset {} "
                       "to run as a single process)",
                       name, kEnvRank, name);
        }
        return std::nullopt;
    }
    auto integer = [&](const char* name, long long low, long long high) {
        auto it = variables.find(name);
        DSV4_CHECK(it != variables.end(), "{} is set but {} is not; a rank's variables are set by the dsv4 launcher",
                   kEnvRank, name);
        const std::optional<long long> value = parse_integer(trim(it->second));
        DSV4_CHECK(value && *value >= low && *value <= high, "{}='{}' is not an integer in {}..{}", name, it->second,
                   low, high);
        return int(*value);
    };
    RankInfo info;
    info.world = integer(kEnvWorldSize, 1, 1 << 20);
    info.rank = integer(kEnvRank, 0, info.world - 1);
    info.local_world = integer(kEnvLocalWorldSize, 1, info.world);
    info.local_rank = integer(kEnvLocalRank, 0, info.local_world - 1);
    info.device = integer(kEnvDevice, 0, 1 << 20);
    info.master_port = integer(kEnvMasterPort, 1, 65535);
    auto addr = variables.find(kEnvMasterAddr);
    DSV4_CHECK(addr != variables.end() && !addr->second.empty(),
               "{} is set but {} is not; a rank's variables are set "
               "by the dsv4 launcher",
               kEnvRank, kEnvMasterAddr);
    info.master_addr = addr->second;
    DSV4_CHECK(info.world % info.local_world == 0, "{}={} is not a multiple of {}={}; every node runs as many ranks",
               kEnvWorldSize, info.world, kEnvLocalWorldSize, info.local_world);
    DSV4_CHECK(info.rank % info.local_world == info.local_rank, "{}={} does not match {}={} with {}={}", kEnvRank,
               info.rank, kEnvLocalRank, info.local_rank, kEnvLocalWorldSize, info.local_world);
    return info;
}

std::optional<RankInfo> rank_from_environment() {
    std::map<std::string, std::string> variables;
    for (const char* name :
         {kEnvRank, kEnvWorldSize, kEnvLocalRank, kEnvLocalWorldSize, kEnvDevice, kEnvMasterAddr, kEnvMasterPort}) {
        if (const char* value = std::getenv(name)) variables[name] = value;
    }
    return rank_from_variables(variables);
}

}  // namespace dsv4::parallel
