// The ranks' rendezvous and control channel over TCP (plain POSIX sockets). Rank 0 listens on master_addr:
// master_port; every other rank connects and says who it is (rank, world size, build / model / options
// fingerprints); rank 0 checks they all agree, then hands each an opaque payload (the NCCL unique id). The
// connections then carry the leader's messages (ControlChannel) and a watchdog thread notices a peer that is gone.
// Tested in tests/parallel/tcp_group_test.cpp (ranks as threads of one process).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "runtime/parallel/control_channel.h"
#include "runtime/parallel/parallel_options.h"

namespace dsv4::parallel {

// What must be equal on every rank for them to run one model together; opaque strings made by the caller.
struct Identity {
    std::string build;    // e.g. the git commit and build flags of dsv4
    std::string model;    // a fingerprint of the checkpoint (config and tensor index)
    std::string options;  // a fingerprint of the options that change the computation (numerics, dtypes, ...)
};

// Called once, on the watchdog thread, when a peer's connection breaks without the leader's goodbye: on the
// leader for any follower, on a follower for the leader (rank 0). `reason`: "connection closed", or the socket error.
using PeerLostCallback = std::function<void(int rank, const std::string& reason)>;

// Prints `dsv4: rank K is gone (REASON); stopping` to stderr and ends the process with _exit(1): the collectives
// of a run that lost a rank never complete, so nothing can be unwound.
void exit_on_peer_lost(int rank, const std::string& reason);

struct RendezvousOptions {
    Identity identity;
    std::vector<uint8_t> payload;  // leader: sent to every follower; followers: unused
    double timeout_s = 300;        // the leader's wait for all followers; a follower's retries to reach the leader
    PeerLostCallback on_peer_lost = exit_on_peer_lost;
};

class TcpGroup final : public ControlChannel {
  public:
    // Every rank calls this with its place (rank, world, master_addr, master_port from RankInfo). Returns once all
    // world ranks have met and agreed; on a follower payload() is then the leader's payload. Throws dsv4::Error on
    // every rank that took part when they disagree (naming the rank and what differs), when the leader cannot
    // listen, when a follower cannot reach the leader within timeout_s, and when some ranks did not arrive within
    // timeout_s (naming them). A world of 1 returns at once.
    static std::unique_ptr<TcpGroup> rendezvous(const RankInfo& place, const RendezvousOptions& options);
    ~TcpGroup() override;  // close()

    int rank() const override { return rank_; }
    int world() const override { return world_; }
    const std::vector<uint8_t>& payload() const { return payload_; }

    // Leader only; one thread at a time. Frames are length-prefixed; a message may be of any size.
    void broadcast(std::span<const uint8_t> message) override;
    // Followers only; one thread at a time. Empty: the leader closed in order (control_channel.h).
    std::vector<uint8_t> receive() override;

    // Replaces the watchdog's callback (e.g. once an NCCL communicator exists, to abort it before exiting).
    void set_on_peer_lost(PeerLostCallback callback);

    // Leader: stops its watchdog, sends every follower a goodbye and waits (at most timeout_s) until each has
    // read it and hung up, so no follower's watchdog sees the leader's hangup as a failure. Follower: stops its
    // watchdog and hangs up (the leader counts that as a failure unless it is closing). Idempotent.
    void close();

  private:
    TcpGroup(int rank, int world, double timeout_s, PeerLostCallback callback);
    void start_watchdog();
    void stop_watchdog();
    void watch();

    int rank_, world_;
    double timeout_s_;
    std::vector<int> peers_;  // leader: the followers' sockets, peers_[r - 1] for rank r; follower: {the leader's}
    std::vector<uint8_t> payload_;
    bool ended_ = false;   // follower: the goodbye was read
    bool closed_ = false;  // close() ran

    std::mutex callback_mutex_;
    PeerLostCallback on_peer_lost_;
    int wake_[2] = {-1, -1};  // a pipe that wakes the watchdog's poll to stop it
    std::thread watchdog_;
};

// A TCP port on `addr` that was free a moment ago (bound to port 0, then released): the launcher's choice of
// master_port on one node. Another process may take it in between; the rendezvous then fails with a clear error.
int pick_free_port(const std::string& addr = "127.0.0.1");

}  // namespace dsv4::parallel
