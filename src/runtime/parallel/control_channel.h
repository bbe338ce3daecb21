// ControlChannel: the host-side messages of a run spread over several ranks (one process per GPU, possibly on
// several nodes). Rank 0 (the leader) runs the command (the CLI's loop, the server's scheduler) and sends every
// call it makes on its model to the other ranks (followers), which make the same call on theirs; the GPUs then
// meet in the collectives inside the forward (NCCL). Messages go one way, leader to followers, in order.
// Implemented over TCP by TcpGroup (tcp_group.h); tests use an in-process channel.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dsv4::parallel {

class ControlChannel {
  public:
    virtual ~ControlChannel() = default;
    virtual int rank() const = 0;
    virtual int world() const = 0;
    // Leader only: one message to every follower (returns once it is handed to the transport). Throws dsv4::Error
    // naming the rank when a follower is gone. A message is never empty: the empty message means "the end".
    virtual void broadcast(std::span<const uint8_t> message) = 0;
    // Followers only: the leader's next message, waiting as long as it takes. An empty message: the leader ended
    // the run in order (TcpGroup::close()); every later receive() returns empty too. Throws dsv4::Error when the
    // leader is gone (its process ended or the connection broke without that goodbye).
    virtual std::vector<uint8_t> receive() = 0;
};

}  // namespace dsv4::parallel
