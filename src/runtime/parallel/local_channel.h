// LocalChannel: a ControlChannel between threads of one process (tests, and any run whose ranks are threads). Each
// follower has a queue (mutex + condition variable) the leader's broadcast appends to. A rank's channel going away
// is its process ending: the followers' receive() then throws once their queue is drained, and the leader's
// broadcast throws naming the first follower gone. Tested in tests/parallel/local_channel_test.cpp.
#pragma once

#include <memory>
#include <vector>

#include "runtime/parallel/control_channel.h"

namespace dsv4::parallel {

// The channels of a group of `world` ranks, rank r at [r]; each may be handed to its own thread.
std::vector<std::unique_ptr<ControlChannel>> make_local_channels(int world);

}  // namespace dsv4::parallel
