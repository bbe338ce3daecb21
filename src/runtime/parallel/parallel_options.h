// How a run spreads over GPUs and nodes: one process (rank) per GPU; on one host a single command starts all
// local ranks (`--gpus 0,1`), across nodes the same command runs on every node with --nnodes/--node-rank/
// --master-addr/--master-port (torchrun's convention). Global rank = node_rank * local GPUs + local rank; every
// node has the same number of GPUs. Rank 0 is the leader (control_channel.h).
#pragma once

#include <string>
#include <vector>

namespace dsv4::parallel {

struct ParallelOptions {
    std::vector<int> gpus;  // this node's GPUs, one rank each, in local-rank order; empty: one GPU, no ranks
    int nnodes = 1, node_rank = 0;
    std::string master_addr;  // where rank 0 listens for the rendezvous; empty: 127.0.0.1 (required when nnodes > 1)
    int master_port = 0;      // 0 on one node: the launcher picks a free port on loopback
    double timeout_s = 300;   // how long the ranks wait for each other at the rendezvous
    double step_timeout_s = 600;  // how long one call on a rank's model may run (step_watchdog.h); 0: no limit
    // Where each token's attention runs (CudaOptions' AttentionLayout): on every rank, or only on the rank that owns
    // its sequence ("replicated" | "data-parallel").
    std::string attention = "replicated";
    bool parallel() const { return nnodes > 1 || gpus.size() > 1; }
};

// This process's place in the run.
struct RankInfo {
    int rank = 0, world = 1;
    int local_rank = 0, local_world = 1;
    int device = 0;                         // CUDA device ordinal
    std::string master_addr = "127.0.0.1";  // the rendezvous (tcp_group.h): where rank 0 listens
    int master_port = 0;
    bool leader() const { return rank == 0; }
};

}  // namespace dsv4::parallel
