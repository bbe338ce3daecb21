// The control messages' wire format: every message type survives encode/decode unchanged, and every malformed byte
// string (each truncation of each message, another version, an unknown type, a bad flag, bytes left over, a count
// larger than the message) is rejected with a clear dsv4::Error, never read out of bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "runtime/parallel/control_protocol.h"

using namespace dsv4;
using namespace dsv4::parallel;

namespace {

// One of each type, with values that catch byte-order, sign and width mistakes.
std::vector<ControlMessage> samples() {
    return {
        message::NewSequence{0x0102030405060708ull},
        message::CopySequence{7, 3, 1234567},
        message::Release{std::numeric_limits<uint64_t>::max()},
        message::Forward{5, 42, true, {0, -1, 129280, std::numeric_limits<int32_t>::min()}},
        message::ForwardBatch{{{1, 0, false, {3}}, {2, 17, true, {4, 5, 6}}, {9, 1, false, {}}}},
        message::ForwardBlock{4, -3, 2, 16, {8, 9}, {1.5f, -0.0f, std::numeric_limits<float>::infinity(), 1e-40f}},
        message::Control{"stage_profiling", -9},
        message::End{},
    };
}

std::string decode_error(std::span<const uint8_t> bytes) {
    try {
        decode(bytes);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(ControlProtocol, EveryMessageRoundTrips) {
    for (const ControlMessage& m : samples()) {
        const std::vector<uint8_t> bytes = encode(m);
        EXPECT_EQ(bytes[0], kControlProtocolVersion);
        const ControlMessage back = decode(bytes);
        EXPECT_EQ(encode(back), bytes) << message_name(m);
        EXPECT_EQ(back.index(), m.index()) << message_name(m);
    }
    const auto forward = std::get<message::Forward>(decode(encode(samples()[3])));
    EXPECT_EQ(forward.id, 5u);
    EXPECT_EQ(forward.position, 42);
    EXPECT_TRUE(forward.all_logits);
    EXPECT_EQ(forward.ids, (std::vector<int32_t>{0, -1, 129280, std::numeric_limits<int32_t>::min()}));
    const auto block = std::get<message::ForwardBlock>(decode(encode(samples()[5])));
    EXPECT_EQ(block.position, -3);
    EXPECT_EQ(block.start_position, 16);
    EXPECT_TRUE(std::signbit(block.streams_in[1]));
    EXPECT_EQ(block.streams_in[3], 1e-40f);
    const auto batch = std::get<message::ForwardBatch>(decode(encode(samples()[4])));
    ASSERT_EQ(batch.items.size(), 3u);
    EXPECT_EQ(batch.items[1].ids, (std::vector<int32_t>{4, 5, 6}));
    EXPECT_TRUE(batch.items[2].ids.empty());
    EXPECT_EQ(std::get<message::Control>(decode(encode(samples()[6]))).name, "stage_profiling");
}

TEST(ControlProtocol, LittleEndianOnTheWire) {
    const std::vector<uint8_t> bytes = encode(message::Release{0x0102030405060708ull});
    EXPECT_EQ(bytes, (std::vector<uint8_t>{kControlProtocolVersion, 3, 8, 7, 6, 5, 4, 3, 2, 1}));
}

TEST(ControlProtocol, EveryTruncationIsRejected) {
    for (const ControlMessage& m : samples()) {
        const std::vector<uint8_t> bytes = encode(m);
        for (size_t n = 0; n < bytes.size(); ++n) {
            const std::string error = decode_error(std::span(bytes).first(n));
            EXPECT_NE(error.find("truncated"), std::string::npos)
                << message_name(m) << " cut to " << n << ": " << error;
        }
    }
}

TEST(ControlProtocol, MalformedMessagesAreRejected) {
    std::vector<uint8_t> other_version = encode(message::End{});
    other_version[0] = kControlProtocolVersion + 1;
    EXPECT_NE(decode_error(other_version).find("run the same dsv4 build on every rank"), std::string::npos);

    EXPECT_NE(decode_error(std::vector<uint8_t>{kControlProtocolVersion, 0}).find("unknown message type 0"),
              std::string::npos);
    EXPECT_NE(decode_error(std::vector<uint8_t>{kControlProtocolVersion, 200}).find("unknown message type 200"),
              std::string::npos);

    std::vector<uint8_t> bad_flag = encode(message::Forward{1, 0, true, {1}});
    bad_flag[2 + 16] = 2;  // after version, type, id, position
    EXPECT_NE(decode_error(bad_flag).find("a flag holds 2"), std::string::npos);

    std::vector<uint8_t> left_over = encode(message::NewSequence{1});
    left_over.push_back(0);
    EXPECT_NE(decode_error(left_over).find("1 bytes left over after a new_sequence message"), std::string::npos);

    // A count of 2^32-1 ids in a short message: rejected before anything is allocated.
    std::vector<uint8_t> huge = encode(message::Forward{1, 0, false, {}});
    for (size_t i = huge.size() - 4; i < huge.size(); ++i) huge[i] = 0xff;
    EXPECT_NE(decode_error(huge).find("a vector of 4294967295 elements"), std::string::npos);
    std::vector<uint8_t> huge_batch = encode(message::ForwardBatch{});
    for (size_t i = huge_batch.size() - 4; i < huge_batch.size(); ++i) huge_batch[i] = 0xff;
    EXPECT_NE(decode_error(huge_batch).find("a vector of 4294967295 elements"), std::string::npos);
}

}  // namespace
