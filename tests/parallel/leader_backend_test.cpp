// LeaderBackend and follow_leader on the CPU backend of the tiny fixture: a leader (this thread) runs a scripted
// session over a LocalChannel, each follower (its own thread) mirrors it; both local backends are RecordingBackends,
// and every follower's log of calls, inputs and logits must equal the leader's, bit for bit. Then the follower's
// side of the protocol: malformed messages, unknown or reused sequence ids, the leader gone, "end".
#include <gtest/gtest.h>

#include <cmath>
#include <exception>
#include <thread>

#include "recording_backend.h"
#include "runtime/parallel/control_protocol.h"
#include "runtime/parallel/leader_backend.h"
#include "runtime/parallel/local_channel.h"

using namespace dsv4;
using namespace dsv4::parallel;
using namespace dsv4::testing;

namespace {

void record_control(Backend& local, const std::string& name, int64_t value) {
    dynamic_cast<RecordingBackend&>(local).control(name, value);
}

int32_t argmax(const std::vector<float>& logits, int64_t vocab) {
    const float* last = logits.data() + logits.size() - size_t(vocab);
    return int32_t(std::max_element(last, last + vocab) - last);
}

int64_t count(const CallLog& log, const std::string& what) {
    return std::count_if(log.begin(), log.end(), [&](const Call& c) { return c.what == what; });
}

// A follower thread over `channel`; the error follow_leader threw, if any, in `error` once joined.
std::thread start_follower(ControlChannel& channel, CallLog& log, std::exception_ptr& error) {
    return std::thread([&channel, &log, &error] {
        try {
            RecordingBackend local(load_tiny_model(), log);
            follow_leader(local, channel, record_control);
        } catch (...) {
            error = std::current_exception();
        }
    });
}

std::string what(const std::exception_ptr& error) {
    try {
        std::rethrow_exception(error);
    } catch (const std::exception& e) {
        return e.what();
    }
}

// The session every follower must mirror. Returns the logits (block outputs) the leader's caller saw, in order.
std::vector<std::vector<float>> run_session(LeaderBackend& leader) {
    const int64_t vocab = leader.config().vocab_size;
    std::vector<std::vector<float>> seen;
    SequenceState a = leader.new_sequence(), c = leader.new_sequence();
    {
        SequenceState b = leader.new_sequence();
        seen.push_back(leader.forward(a, std::vector<int32_t>{0, 5, 17, 99, 3, 64, 2, 120, 41}, true));
        seen.push_back(leader.forward(b, std::vector<int32_t>{0, 7, 8, 9, 100}, false));
        std::vector<int32_t> next_a{argmax(seen[0], vocab)}, next_b{argmax(seen[1], vocab)};
        const std::vector<int32_t> prompt_c{0, 11, 22, 33, 44, 55};
        for (int step = 0; step < 3; ++step) {  // decode steps of a and b; c's prefill joins the first
            std::vector<BatchItem> items{{&a, next_a, false}, {&b, next_b, false}};
            if (step == 0) items.push_back({&c, prompt_c, true});
            std::vector<std::vector<float>> logits = leader.forward_batch(items);
            EXPECT_EQ(logits.size(), items.size());
            next_a = {argmax(logits[0], vocab)};
            next_b = {argmax(logits[1], vocab)};
            seen.insert(seen.end(), logits.begin(), logits.end());
        }
        EXPECT_EQ(a.position, 12);
        EXPECT_EQ(b.position, 8);
        EXPECT_EQ(c.position, 6);
    }  // b released

    SequenceState d = leader.copy_sequence(a);
    EXPECT_EQ(d.position, a.position);
    std::vector<std::vector<float>> twins =
        leader.forward_batch(std::vector<BatchItem>{{&a, std::vector<int32_t>{9}}, {&d, std::vector<int32_t>{9}}});
    EXPECT_EQ(bits(twins[0]), bits(twins[1])) << "a copy fed the same id gives the same logits";
    seen.insert(seen.end(), twins.begin(), twins.end());

    EXPECT_THROW(leader.forward(c, std::vector<int32_t>{int32_t(vocab) + 5}, false), Error);
    EXPECT_EQ(c.position, 6) << "a forward that threw does not advance the position";
    seen.push_back(leader.forward(c, std::vector<int32_t>{3}, false));  // the ranks go on after the error

    SequenceState e = leader.new_sequence();
    const ModelConfig& config = leader.config();
    const std::vector<int32_t> block_ids{0, 4, 8, 15};
    std::vector<float> streams(block_ids.size() * size_t(config.hc_mult * config.hidden_size));
    for (size_t i = 0; i < streams.size(); ++i) streams[i] = std::sin(0.37f * float(i));
    seen.push_back(leader.forward_block(e, 0, 0, block_ids, streams.data()));
    EXPECT_EQ(e.position, 0) << "forward_block does not advance the position";

    leader.control("stage_profiling", 1);
    EXPECT_THROW(leader.control("fail", 0), Error);
    seen.push_back(leader.forward(d, std::vector<int32_t>{7}, false));
    EXPECT_EQ(d.position, 14);
    return seen;
}  // a, c, d, e released

class Mirror : public ::testing::TestWithParam<int> {};

TEST_P(Mirror, FollowersSeeTheLeadersCallsAndLogitsBitForBit) {
    const int world = GetParam();
    auto channels = make_local_channels(world);
    std::vector<CallLog> follower_logs(size_t(world - 1));
    std::vector<std::exception_ptr> errors(size_t(world - 1));
    std::vector<std::thread> followers;
    for (int r = 1; r < world; ++r)
        followers.push_back(start_follower(*channels[size_t(r)], follower_logs[size_t(r - 1)], errors[size_t(r - 1)]));

    CallLog leader_log;
    std::vector<std::vector<float>> seen;
    {
        LeaderBackend leader(std::make_unique<RecordingBackend>(load_tiny_model(), leader_log), *channels[0],
                             record_control);
        seen = run_session(leader);
    }  // "end"
    for (std::thread& f : followers) f.join();

    // The leader's own log is the script: the calls, the two errors, the releases of all five sequences.
    EXPECT_EQ(count(leader_log, "new_sequence"), 4);
    EXPECT_EQ(count(leader_log, "copy_sequence"), 1);
    EXPECT_EQ(count(leader_log, "forward_batch"), 4);
    EXPECT_EQ(count(leader_log, "forward_block"), 1);
    EXPECT_EQ(count(leader_log, "control"), 2);
    EXPECT_EQ(count(leader_log, "release"), 5);
    EXPECT_EQ(std::count_if(leader_log.begin(), leader_log.end(), [](const Call& c) { return c.threw; }), 2);
    // What the caller saw is what the leader's backend returned.
    std::vector<std::vector<uint32_t>> returned;
    for (const Call& c : leader_log) returned.insert(returned.end(), c.out.begin(), c.out.end());
    ASSERT_EQ(returned.size(), seen.size());
    for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(returned[i], bits(seen[i])) << "output " << i;
    EXPECT_NE(bits(seen[0]), bits(seen[1])) << "different sequences give different logits";

    for (int r = 1; r < world; ++r) {
        const CallLog& log = follower_logs[size_t(r - 1)];
        ASSERT_FALSE(errors[size_t(r - 1)]) << "rank " << r << ": " << what(errors[size_t(r - 1)]);
        ASSERT_EQ(log.size(), leader_log.size()) << "rank " << r;
        for (size_t i = 0; i < log.size(); ++i)
            EXPECT_TRUE(log[i] == leader_log[i])
                << "rank " << r << " call " << i << ": " << log[i].what << " vs " << leader_log[i].what;
    }
}

INSTANTIATE_TEST_SUITE_P(Ranks, Mirror, ::testing::Values(2, 3));

TEST(LeaderBackend, RejectsAForeignStateBeforeSendingAnything) {
    auto channels = make_local_channels(2);
    CallLog log;
    std::exception_ptr error;
    std::thread follower = start_follower(*channels[1], log, error);
    {
        LeaderBackend leader(load_tiny_model(), *channels[0]);
        std::unique_ptr<Backend> other = load_tiny_model();
        SequenceState foreign = other->new_sequence();
        EXPECT_THROW(leader.forward(foreign, std::vector<int32_t>{1}, false), Error);
        EXPECT_THROW(leader.copy_sequence(foreign), Error);
        EXPECT_THROW(leader.control("stage_profiling", 1), Error) << "made without a control handler";
    }
    follower.join();
    EXPECT_FALSE(error) << what(error);
    EXPECT_TRUE(log.empty()) << log.size() << " calls reached the follower";
}

// Rank 0's channel, recording how many calls the leader's backend had made when each message went out.
class SpyChannel final : public ControlChannel {
  public:
    SpyChannel(ControlChannel& inner, const CallLog& log) : inner_(inner), log_(log) {}
    int rank() const override { return inner_.rank(); }
    int world() const override { return inner_.world(); }
    void broadcast(std::span<const uint8_t> message) override {
        sent.push_back({message_name(decode(message)), log_.size()});
        inner_.broadcast(message);
    }
    std::vector<uint8_t> receive() override { return inner_.receive(); }

    std::vector<std::pair<std::string, size_t>> sent;  // message, calls made locally before it

  private:
    ControlChannel& inner_;
    const CallLog& log_;
};

TEST(LeaderBackend, SendsEachCallBeforeMakingItLocally) {
    auto channels = make_local_channels(2);
    CallLog leader_log, follower_log;
    std::exception_ptr error;
    std::thread follower = start_follower(*channels[1], follower_log, error);
    SpyChannel spy(*channels[0], leader_log);
    {
        LeaderBackend leader(std::make_unique<RecordingBackend>(load_tiny_model(), leader_log), spy, record_control);
        SequenceState a = leader.new_sequence();
        leader.forward(a, std::vector<int32_t>{0, 1, 2}, false);
        SequenceState b = leader.copy_sequence(a);
        leader.forward_batch(std::vector<BatchItem>{{&a, std::vector<int32_t>{3}}, {&b, std::vector<int32_t>{4}}});
        leader.control("stage_profiling", 0);
    }
    follower.join();
    EXPECT_FALSE(error) << what(error);
    const std::vector<std::pair<std::string, size_t>> expected{
        {"new_sequence", 0}, {"forward", 1}, {"copy_sequence", 2}, {"forward_batch", 3},
        {"control", 4},      {"release", 5}, {"release", 6},       {"end", 7}};
    EXPECT_EQ(spy.sent, expected);
    EXPECT_EQ(follower_log, leader_log);
}

// The follower's side alone: messages queued on rank 0's channel, then follow_leader on this thread.
class Follower : public ::testing::Test {
  protected:
    void send(const ControlMessage& message) { channels_[0]->broadcast(encode(message)); }
    void send_bytes(const std::vector<uint8_t>& bytes) { channels_[0]->broadcast(bytes); }
    // The leader goes (so a follower that does not stop where it should fails instead of waiting forever), then
    // follow_leader runs: the dsv4::Error it threw (empty when it returned).
    std::string follow(bool with_handler = true) {
        channels_[0].reset();
        RecordingBackend local(load_tiny_model(), log_);
        try {
            follow_leader(local, *channels_[1], with_handler ? ControlHandler(record_control) : ControlHandler());
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    }

    std::vector<std::unique_ptr<ControlChannel>> channels_ = make_local_channels(2);
    CallLog log_;
};

TEST_F(Follower, EndReturnsAndReleasesTheSequencesStillHeld) {
    send(message::NewSequence{1});
    send(message::NewSequence{2});
    send(message::Forward{2, 0, false, {0, 3}});
    send(message::End{});
    EXPECT_EQ(follow(), "");
    ASSERT_EQ(log_.size(), 5u);
    EXPECT_EQ(log_[2].what, "forward");
    EXPECT_EQ(log_[2].sequences, std::vector<int64_t>{1});  // the leader's id 2 is the follower's second sequence
    EXPECT_EQ(log_[3].what, "release");
    EXPECT_EQ(log_[4].what, "release");
}

TEST_F(Follower, GoesOnAfterAMirroredCallThrows) {
    send(message::NewSequence{1});
    send(message::Forward{1, 0, false, {100000}});  // outside the vocabulary: the leader threw the same
    send(message::Forward{1, 0, false, {4}});
    send(message::End{});
    EXPECT_EQ(follow(), "");
    ASSERT_EQ(log_.size(), 4u);
    EXPECT_TRUE(log_[1].threw);
    EXPECT_FALSE(log_[2].threw);
}

TEST_F(Follower, EndsOnItsOwnDeviceFailure) {
    // A CUDA or NCCL failure is this rank's alone: the leader may wait in a collective for it, so the follower must
    // not go on to the next message (it would wait for the leader, the leader for it). A plain Error goes on.
    const ControlHandler failing = [](Backend&, const std::string& name, int64_t) {
        if (name == "device") throw DeviceError("CUDA error cudaErrorIllegalAddress (an illegal memory access)");
        throw Error("a mirrored refusal");
    };
    send(message::Control{"request", 1});
    send(message::Control{"device", 1});
    send(message::End{});
    channels_[0].reset();
    RecordingBackend local(load_tiny_model(), log_);
    try {
        follow_leader(local, *channels_[1], failing);
        ADD_FAILURE() << "follow_leader went on after a device failure";
    } catch (const DeviceError& e) {
        EXPECT_NE(std::string(e.what()).find("illegal memory access"), std::string::npos);
    }
}

TEST_F(Follower, UnknownSequenceIdIsAProtocolError) {
    send(message::NewSequence{1});
    send(message::Forward{42, 0, false, {1}});
    EXPECT_NE(follow().find("names sequence 42, which this rank does not hold"), std::string::npos);
}

TEST_F(Follower, ReleasedSequenceIdIsAProtocolError) {
    send(message::NewSequence{1});
    send(message::Release{1});
    send(message::ForwardBatch{{{1, 0, false, {1}}}});
    EXPECT_NE(follow().find("forward_batch names sequence 1"), std::string::npos);
}

TEST_F(Follower, ReusedSequenceIdIsAProtocolError) {
    send(message::NewSequence{1});
    send(message::CopySequence{1, 1, 0});
    EXPECT_NE(follow().find("makes sequence 1, which this rank holds already"), std::string::npos);
}

TEST_F(Follower, TruncatedMessageIsAProtocolError) {
    std::vector<uint8_t> bytes = encode(message::Forward{1, 0, false, {1, 2, 3}});
    bytes.pop_back();
    send(message::NewSequence{1});
    send_bytes(bytes);
    EXPECT_NE(follow().find("malformed control message from the leader"), std::string::npos);
    EXPECT_EQ(log_.size(), 2u) << "the new sequence, then its release as follow_leader unwinds";
}

TEST_F(Follower, StreamsOfTheWrongSizeAreAProtocolError) {
    send(message::NewSequence{1});
    send(message::ForwardBlock{1, 0, 0, 0, {1, 2}, {0.5f}});
    EXPECT_NE(follow().find("carries 1 input stream values for 2 ids"), std::string::npos);
}

TEST_F(Follower, ControlCallWithoutAHandlerIsAProtocolError) {
    send(message::Control{"stage_profiling", 1});
    EXPECT_NE(follow(false).find("without a control handler"), std::string::npos);
}

TEST_F(Follower, LeaderGoneWithoutEndThrows) {
    send(message::NewSequence{1});
    send(message::Forward{1, 0, false, {1, 2}});
    EXPECT_NE(follow().find("the leader (rank 0) is gone"), std::string::npos);
    ASSERT_EQ(log_.size(), 3u) << "the messages sent before it went were still mirrored";
    EXPECT_EQ(log_[1].what, "forward");
}

}  // namespace
