// The messages LeaderBackend sends its followers (leader_backend.h): one per Backend call that changes state or runs
// the forward, in a compact binary format of our own. Layout: u8 version, u8 type, then the fields in order, all
// little-endian: integers as u64/i64 (u8 for flags, 0 or 1), vectors as a u32 count then the elements, a string as
// a u32 length then its bytes. Sequences are named by ids the leader assigns (never reused). decode() rejects
// anything malformed with a dsv4::Error. Tested in tests/parallel/control_protocol_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace dsv4::parallel {

// Raised with every change to the format: ranks built from different sources refuse each other's messages.
constexpr uint8_t kControlProtocolVersion = 1;

namespace message {

struct NewSequence {
    uint64_t id = 0;
};
struct CopySequence {
    uint64_t id = 0;       // the copy's
    uint64_t source = 0;   // the sequence copied
    int64_t position = 0;  // the caller's state.position of the source at the call
};
struct Release {
    uint64_t id = 0;
};
// One sequence's forward (Backend::forward), also one item of a ForwardBatch.
struct Forward {
    uint64_t id = 0;
    int64_t position = 0;  // the caller's state.position at the call
    bool all_logits = false;
    std::vector<int32_t> ids;
};
struct ForwardBatch {
    std::vector<Forward> items;
};
struct ForwardBlock {
    uint64_t id = 0;
    int64_t position = 0;  // the caller's state.position at the call (forward_block does not advance it)
    int64_t layer = 0, start_position = 0;
    std::vector<int32_t> ids;
    std::vector<float> streams_in;  // [ids.size(), n_hc, D]
};
// A backend-specific call (LeaderBackend::control), e.g. CudaModel's stage profiler on or off.
struct Control {
    std::string name;
    int64_t value = 0;
};
// The leader is done: followers return from follow_leader.
struct End {};

}  // namespace message

using ControlMessage = std::variant<message::NewSequence, message::CopySequence, message::Release, message::Forward,
                                    message::ForwardBatch, message::ForwardBlock, message::Control, message::End>;

std::vector<uint8_t> encode(const ControlMessage& message);

// Throws dsv4::Error saying what is wrong: another protocol version, an unknown type, a truncated message, a flag
// other than 0/1, or bytes left over.
ControlMessage decode(std::span<const uint8_t> bytes);

// "forward", "copy_sequence", ...: for error messages.
const char* message_name(const ControlMessage& message);

}  // namespace dsv4::parallel
