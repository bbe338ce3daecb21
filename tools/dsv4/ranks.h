// Running a dsv4 command on several GPUs (docs/parallel.md): the --gpus / --nnodes / --node-rank / --master-addr /
// --master-port options every command that runs a model takes, the launch of one process per local GPU, and a
// rank's side: rendezvous, NCCL, the model holding its share of the routed experts, and the leader/follower split
// (rank 0 runs the command on a LeaderBackend; every other rank mirrors its calls and ends when it ends).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "model/backend.h"
#include "runtime/parallel/parallel_options.h"

namespace dsv4 {
class CudaModel;
struct ExpertParallel;
}  // namespace dsv4

namespace dsv4::cli {

struct ParallelFlags {
    std::string gpus;  // --gpus as given (not given: GPU 0, one process)
    CLI::Option* gpus_option = nullptr;
    parallel::ParallelOptions options;  // the other flags; options.gpus is filled from `gpus` by start_ranks
};

void add_parallel_options(CLI::App* command, ParallelFlags& flags);

// main's arguments, for the launching process to start its ranks with the same command line.
void set_command_line(int argc, char** argv);

// Call first thing in a command that runs a model on GPUs. In the process the user started, for a run over several
// ranks: starts them (this command line, one process per local GPU), waits for them and returns their exit code:
// the command is then over. Otherwise nullopt: a run on one GPU (`device` set from --gpus) or a rank (its place in
// `rank`, `device` its GPU).
std::optional<int> start_ranks(ParallelFlags& flags, std::optional<parallel::RankInfo>& rank, int& device);

// What every rank must agree on besides the build: a fingerprint of the model and of the options that change the
// computation (the rendezvous compares them and names the rank that differs).
struct RunIdentity {
    std::string model, options;
};

// A rank's model: the rendezvous with the other ranks, the NCCL communicator, then make(ep) for this rank's share
// of the experts. On rank 0 returns the Backend the command drives (each call mirrored to the followers; it owns
// the model, the communicator and the channel; destroying it ends the followers' part). On any other rank it makes
// rank 0's calls on its model until rank 0's backend goes, then returns nullptr (the command has nothing more to
// do there); throws dsv4::Error when rank 0 is gone or the messages make no sense.
// `on_control` handles backend-specific calls mirrored to every rank (LeaderBackend::control), e.g. the stage
// profiler of dsv4 bench.
using ControlHandler = std::function<void(Backend& local, const std::string& name, int64_t value)>;
std::unique_ptr<Backend> model_on_ranks(const parallel::RankInfo& rank, const parallel::ParallelOptions& options,
                                        const RunIdentity& identity,
                                        const std::function<std::unique_ptr<Backend>(const ExpertParallel&)>& make,
                                        const ControlHandler& on_control = {});

// The leader's LeaderBackend::control, or a direct call on a model of one process: on_control(model, name, value).
void control(Backend& model, const ControlHandler& on_control, const std::string& name, int64_t value);

// The local model behind `model` (model itself, or the leader's own behind a LeaderBackend).
Backend& local_model(Backend& model);

}  // namespace dsv4::cli
