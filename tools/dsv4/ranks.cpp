// Running a dsv4 command on several GPUs: see ranks.h.
#include "ranks.h"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "runtime/parallel/launcher.h"
#include "runtime/parallel/leader_backend.h"
#include "runtime/parallel/step_watchdog.h"
#include "runtime/parallel/tcp_group.h"
#ifdef DSV4_WITH_CUDA
#include "kernels/cuda/smoke/device_info.h"
#include "runtime/cuda/cuda_model.h"
#include "runtime/cuda/nccl_group.h"
#endif

namespace dsv4::cli {

namespace {

std::vector<std::string>& command_line() {
    static std::vector<std::string> args;
    return args;
}

// FNV-1a over the bytes of this executable: ranks running different builds must not meet (their kernels and
// message formats may differ), and a build's version string does not tell two builds of one version apart.
std::string executable_fingerprint() {
    const int fd = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    DSV4_CHECK(fd >= 0, "cannot read /proc/self/exe to fingerprint this dsv4 build");
    uint64_t h = 0xcbf29ce484222325ull;
    std::vector<unsigned char> buffer(size_t(1) << 20);
    for (ssize_t n; (n = ::read(fd, buffer.data(), buffer.size())) > 0;)
        for (ssize_t i = 0; i < n; ++i) h = (h ^ buffer[size_t(i)]) * 0x100000001b3ull;
    ::close(fd);
    char text[64];
    std::snprintf(text, sizeof text, "dsv4 %s, executable %016llx", DSV4_VERSION, (unsigned long long)h);
    return text;
}

#ifdef DSV4_WITH_CUDA
// The model under a rank's step watchdog (model_on_ranks).
Backend& unwatched(Backend& model) {
    if (auto* watched = dynamic_cast<parallel::WatchedBackend*>(&model)) return watched->inner();
    return model;
}

// Owns what a rank's model needs besides itself: the channel, the communicator. Declared before the model so that
// they go after it.
struct RankResources {
    std::unique_ptr<parallel::TcpGroup> group;
    std::unique_ptr<cuda::NcclGroup> nccl;
};

// The leader's backend together with the resources it runs on.
class RankLeader final : public Backend {
  public:
    RankLeader(std::unique_ptr<RankResources> resources, std::unique_ptr<parallel::LeaderBackend> leader)
        : resources_(std::move(resources)), leader_(std::move(leader)) {}
    ~RankLeader() override {
        leader_.reset();             // "end" to the followers, then the model goes
        resources_->group->close();  // goodbye: the followers' hangups are not failures
    }
    const ModelConfig& config() const override { return leader_->config(); }
    Numerics numerics() const override { return leader_->numerics(); }
    SequenceState new_sequence() const override { return leader_->new_sequence(); }
    SequenceState copy_sequence(const SequenceState& s) const override { return leader_->copy_sequence(s); }
    std::vector<float> forward(SequenceState& s, std::span<const int32_t> ids, bool all_logits) override {
        return leader_->forward(s, ids, all_logits);
    }
    std::vector<std::vector<float>> forward_batch(std::span<const BatchItem> items) override {
        return leader_->forward_batch(items);
    }
    void forward_batch_into(std::span<const BatchItem> items, std::vector<std::vector<float>>& logits) override {
        leader_->forward_batch_into(items, logits);
    }
    std::vector<float> forward_block(SequenceState& s, int64_t layer, int64_t start, std::span<const int32_t> ids,
                                     const float* streams_in) override {
        return leader_->forward_block(s, layer, start, ids, streams_in);
    }
    bool draws_tokens() const override { return leader_->draws_tokens(); }
    PoolUsage pool_usage() const override { return leader_->pool_usage(); }
    int placement(const SequenceState& s) const override { return leader_->placement(s); }
    std::vector<int64_t> sequences_per_placement() const override { return leader_->sequences_per_placement(); }
    void set_observer(ActivationObserver observer) override { leader_->set_observer(std::move(observer)); }
    parallel::LeaderBackend& leader() { return *leader_; }

  private:
    std::unique_ptr<RankResources> resources_;
    std::unique_ptr<parallel::LeaderBackend> leader_;
};
#endif

}  // namespace

void add_parallel_options(CLI::App* command, ParallelFlags& f) {
    f.gpus_option =
        command->add_option("--gpus", f.gpus,
                            "GPUs of this node, one process (rank) each, e.g. 0,1: the routed experts are split among "
                            "them (expert parallel); one id: that GPU alone (default 0)");
    command->add_option("--nnodes", f.options.nnodes, "Nodes of the run (each runs this command with its --gpus)")
        ->check(CLI::PositiveNumber);
    command->add_option("--node-rank", f.options.node_rank, "This node's index, 0 .. nnodes - 1")
        ->check(CLI::NonNegativeNumber);
    command->add_option("--master-addr", f.options.master_addr,
                        "Address where rank 0 (node 0) listens for the other ranks (needed with --nnodes > 1)");
    command->add_option("--master-port", f.options.master_port, "Port of that address (0 on one node: any free)")
        ->check(CLI::Range(0, 65535));
    command
        ->add_option("--rank-timeout", f.options.timeout_s,
                     "Seconds the ranks wait for each other to start (default 300)")
        ->check(CLI::PositiveNumber);
    command
        ->add_option("--step-timeout", f.options.step_timeout_s,
                     "Seconds one step (a forward, a prefill piece) may take on a rank before the run is stopped as "
                     "stuck, e.g. a GPU or a peer that stopped without exiting (default 600; 0: no limit)")
        ->check(CLI::Range(0.0, parallel::kMaxStepTimeout_s));
    command
        ->add_option(
            "--attention", f.options.attention,
            "Over several GPUs, where each sequence's attention runs: replicated (every GPU computes every "
            "sequence's; the lowest latency for few sequences) or data-parallel (each sequence on one GPU, "
            "which alone holds its cache: the attention of a batch split over the GPUs, and each GPU's cache "
            "holds only its sequences). Default: data-parallel for serve (many users), replicated for the other "
            "commands")
        ->check(CLI::IsMember({"replicated", "data-parallel"}));
}

void set_command_line(int argc, char** argv) {
    command_line().assign(argv, argv + argc);
    if (!command_line().empty()) command_line()[0] = "/proc/self/exe";
}

std::optional<int> start_ranks(ParallelFlags& f, std::optional<parallel::RankInfo>& rank, int& device) {
    rank = parallel::rank_from_environment();
    if (rank) {
        device = rank->device;
        return std::nullopt;
    }
    const bool share = parallel::share_gpus_from_environment();
    const bool given = f.gpus_option && f.gpus_option->count() > 0;
    // The list's form and the other flags first, then whether this machine (and this build) has the GPUs it names.
    if (given) f.options.gpus = parallel::parse_gpu_list(f.gpus, -1, share);
    parallel::validate_options(f.options, share);
#ifdef DSV4_WITH_CUDA
    const int devices = cuda::device_count();
#else
    DSV4_CHECK(!given && f.options.nnodes == 1, "--gpus: this dsv4 was built without CUDA");
    const int devices = 0;
#endif
    if (given) f.options.gpus = parallel::parse_gpu_list(f.gpus, devices, share);
    if (!f.options.parallel()) {
        device = f.options.gpus.empty() ? 0 : f.options.gpus.front();
        return std::nullopt;
    }
    DSV4_CHECK(!command_line().empty(), "start_ranks: set_command_line was not called");
    parallel::LaunchSettings settings;
    settings.share_gpus = share;
    return parallel::launch_local_ranks(f.options, command_line(), settings);
}

#ifdef DSV4_WITH_CUDA
std::unique_ptr<Backend> model_on_ranks(const parallel::RankInfo& rank, const parallel::ParallelOptions& options,
                                        const RunIdentity& identity,
                                        const std::function<std::unique_ptr<Backend>(const ExpertParallel&)>& make,
                                        const ControlHandler& on_control) {
    auto resources = std::make_unique<RankResources>();
    parallel::RendezvousOptions rendezvous;
    rendezvous.identity = {executable_fingerprint(), identity.model,
                           identity.options + ", attention " + options.attention};
    if (rank.leader()) rendezvous.payload = cuda::NcclGroup::unique_id();
    rendezvous.timeout_s = options.timeout_s;
    resources->group = parallel::TcpGroup::rendezvous(rank, rendezvous);
    resources->nccl =
        std::make_unique<cuda::NcclGroup>(rank.rank, rank.world, resources->group->payload(), rank.device);
    // A peer gone mid-run leaves this rank's collectives waiting forever: abort them, say so, and end.
    cuda::NcclGroup* nccl = resources->nccl.get();
    resources->group->set_on_peer_lost([nccl](int peer, const std::string& reason) {
        nccl->abort();
        parallel::exit_on_peer_lost(peer, reason);
    });
    const AttentionLayout attention =
        options.attention == "data-parallel" ? AttentionLayout::kDataParallel : AttentionLayout::kReplicated;
    // Only rank 0's logits are read (it answers every call): the others copy none to the host.
    std::unique_ptr<Backend> local = make(ExpertParallel{rank.rank, rank.world, nccl, attention, rank.leader()});
    if (options.step_timeout_s > 0)  // a stuck GPU or peer would otherwise hold every rank in a collective forever
        local = std::make_unique<parallel::WatchedBackend>(
            std::move(local), options.step_timeout_s, [r = rank.rank](const std::string& call, double seconds) {
                parallel::exit_on_stall(r, call, seconds);
            });
    // The control calls act on the model itself, not on the watchdog's wrapper around it.
    ControlHandler control_model;
    if (on_control)
        control_model = [on_control](Backend& b, const std::string& name, int64_t value) {
            on_control(unwatched(b), name, value);
        };
    if (rank.leader()) {
        auto leader = std::make_unique<parallel::LeaderBackend>(std::move(local), *resources->group, control_model);
        return std::make_unique<RankLeader>(std::move(resources), std::move(leader));
    }
    // Ctrl-C reaches every process of the terminal's group; rank 0 alone acts on it (the run ends with rank 0).
    std::signal(SIGINT, SIG_IGN);
    try {
        parallel::follow_leader(*local, *resources->group, control_model);
    } catch (const DeviceError&) {
        nccl->abort();  // its collectives may wait for ranks that go on: nothing may wait for them while unwinding
        throw;
    }
    local.reset();
    // Rank 0 says goodbye once its own model is gone (RankLeader's destructor); hanging up before that would look
    // like a failure to its watchdog.
    DSV4_CHECK(resources->group->receive().empty(), "rank 0 sent another message after it ended the run");
    resources->group->close();
    return nullptr;
}

void control(Backend& model, const ControlHandler& on_control, const std::string& name, int64_t value) {
    if (auto* leader = dynamic_cast<RankLeader*>(&model)) return leader->leader().control(name, value);
    on_control(model, name, value);
}

Backend& local_model(Backend& model) {
    if (auto* leader = dynamic_cast<RankLeader*>(&model)) return unwatched(leader->leader().local());
    return model;
}
#else
std::unique_ptr<Backend> model_on_ranks(const parallel::RankInfo&, const parallel::ParallelOptions&, const RunIdentity&,
                                        const std::function<std::unique_ptr<Backend>(const ExpertParallel&)>&,
                                        const ControlHandler&) {
    throw Error("running on several GPUs needs a dsv4 built with CUDA");
}
void control(Backend& model, const ControlHandler& on_control, const std::string& name, int64_t value) {
    on_control(model, name, value);
}
Backend& local_model(Backend& model) {
    return model;
}
#endif

}  // namespace dsv4::cli
