// LocalChannel: every follower receives the leader's messages in order; a follower whose leader is gone gets the
// messages already sent, then an error; a leader whose follower is gone gets an error naming the rank.
#include <gtest/gtest.h>

#include <thread>

#include "core/error.h"
#include "runtime/parallel/local_channel.h"

using namespace dsv4;
using namespace dsv4::parallel;

namespace {

std::vector<uint8_t> bytes(uint8_t a, uint8_t b) {
    return {a, b};
}

TEST(LocalChannel, EveryFollowerReceivesEveryMessageInOrder) {
    auto channels = make_local_channels(3);
    EXPECT_EQ(channels[2]->rank(), 2);
    EXPECT_EQ(channels[0]->world(), 3);
    std::vector<std::vector<std::vector<uint8_t>>> received(3);
    std::vector<std::thread> followers;
    for (int r = 1; r < 3; ++r)
        followers.emplace_back([&, r] {
            for (int i = 0; i < 100; ++i) received[size_t(r)].push_back(channels[size_t(r)]->receive());
        });
    for (int i = 0; i < 100; ++i) channels[0]->broadcast(bytes(uint8_t(i), uint8_t(255 - i)));
    for (std::thread& f : followers) f.join();
    for (int r = 1; r < 3; ++r) {
        ASSERT_EQ(received[size_t(r)].size(), 100u);
        for (int i = 0; i < 100; ++i) EXPECT_EQ(received[size_t(r)][size_t(i)], bytes(uint8_t(i), uint8_t(255 - i)));
    }
}

TEST(LocalChannel, LeaderGoneAfterItsMessages) {
    auto channels = make_local_channels(2);
    channels[0]->broadcast(bytes(1, 2));
    channels[0].reset();
    EXPECT_EQ(channels[1]->receive(), bytes(1, 2));
    EXPECT_THROW(channels[1]->receive(), Error);
}

TEST(LocalChannel, LeaderGoneWakesAWaitingFollower) {
    auto channels = make_local_channels(2);
    std::string error;
    std::thread follower([&] {
        try {
            channels[1]->receive();
        } catch (const Error& e) {
            error = e.what();
        }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    channels[0].reset();
    follower.join();
    EXPECT_NE(error.find("the leader (rank 0) is gone"), std::string::npos) << error;
}

TEST(LocalChannel, FollowerGoneFailsTheBroadcast) {
    auto channels = make_local_channels(3);
    channels[2].reset();
    try {
        channels[0]->broadcast(bytes(1, 2));
        FAIL() << "the broadcast did not throw";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("rank 2 is gone"), std::string::npos) << e.what();
    }
    EXPECT_THROW(channels[1]->broadcast(bytes(1, 2)), Error) << "only rank 0 sends";
    EXPECT_THROW(channels[0]->receive(), Error) << "rank 0 never receives";
}

}  // namespace
