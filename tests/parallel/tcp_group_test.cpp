// TcpGroup on loopback: ranks as threads of this process (or, where a rank must die abruptly, a forked process).
// Rendezvous (payload, identity checks, missing ranks), messages in order and intact, the leader's goodbye, and
// the watchdog when a peer's process ends without it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "core/error.h"
#include "runtime/parallel/tcp_group.h"

using namespace dsv4;
using namespace dsv4::parallel;

namespace {

RankInfo place(int rank, int world, int port) {
    RankInfo p;
    p.rank = rank, p.world = world, p.master_addr = "127.0.0.1", p.master_port = port;
    return p;
}

RendezvousOptions options_for(const Identity& identity = {"build-1", "model-1", "opts-1"}, double timeout_s = 10) {
    RendezvousOptions o;
    o.identity = identity;
    o.timeout_s = timeout_s;
    o.payload = {1, 2, 3};
    o.on_peer_lost = [](int rank, const std::string& reason) {
        ADD_FAILURE() << "peer lost: rank " << rank << " (" << reason << ")";
    };
    return o;
}

// Runs body(rank) for every rank on its own thread; returns each rank's dsv4::Error message ("" if none).
std::vector<std::string> run_ranks(int count, const std::function<void(int)>& body) {
    std::vector<std::string> errors(count);
    std::vector<std::thread> threads;
    for (int r = 0; r < count; ++r) {
        threads.emplace_back([&, r] {
            try {
                body(r);
            } catch (const Error& e) {
                errors[r] = e.what();
            }
        });
    }
    for (std::thread& t : threads) t.join();
    return errors;
}

std::vector<uint8_t> pattern(size_t size, uint32_t seed) {
    std::vector<uint8_t> bytes(size);
    std::mt19937 rng(seed);
    for (uint8_t& b : bytes) b = uint8_t(rng());
    return bytes;
}

// A one-shot flag another thread sets; wait() gives up after `seconds`.
struct Signal {
    std::mutex m;
    std::condition_variable cv;
    bool set = false;
    int rank = -1;
    std::string reason;
    void fire(int r, const std::string& why) {
        std::lock_guard<std::mutex> lock(m);
        set = true, rank = r, reason = why;
        cv.notify_all();
    }
    bool wait(double seconds) {
        std::unique_lock<std::mutex> lock(m);
        return cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return set; });
    }
};

// Runs a world of 3 where rank `odd` rendezvouses with `odd_place`/`odd_identity`; returns every rank's error.
std::vector<std::string> mismatched(const std::function<void(int, RankInfo&, Identity&)>& change) {
    const int port = pick_free_port();
    return run_ranks(3, [&](int r) {
        RankInfo p = place(r, 3, port);
        Identity id = {"build-1", "model-1", "opts-1"};
        change(r, p, id);
        TcpGroup::rendezvous(p, options_for(id));
        ADD_FAILURE() << "rank " << r << " joined a run that should have been refused";
    });
}

void expect_all_contain(const std::vector<std::string>& errors, const std::string& expected) {
    for (size_t r = 0; r < errors.size(); ++r) {
        EXPECT_NE(errors[r].find(expected), std::string::npos)
            << "rank " << r << " error: '" << errors[r] << "'\nexpected to contain: " << expected;
    }
}

}  // namespace

TEST(TcpGroup, MessagesInOrderAndIntactThenGoodbye) {
    const int port = pick_free_port();
    const std::vector<uint8_t> nccl_id = pattern(128, 7);
    // 100 messages, made before the ranks start: mostly a decode step's few hundred bytes, some 64 KiB, and two
    // of 10 MiB (larger than any socket buffer, so they cross in many pieces).
    std::vector<std::vector<uint8_t>> messages;
    for (int i = 0; i < 100; ++i) {
        const size_t size = i == 2 || i == 60 ? 10 << 20 : i % 7 == 0 ? 64 << 10 : size_t(i * 37 % 500 + 1);
        messages.push_back(pattern(size, uint32_t(i)));
    }
    std::mutex m;
    int ended = 0;
    const std::vector<std::string> errors = run_ranks(3, [&](int r) {
        RendezvousOptions o = options_for();
        if (r == 0) o.payload = nccl_id;
        std::unique_ptr<TcpGroup> group = TcpGroup::rendezvous(place(r, 3, port), o);
        EXPECT_EQ(group->rank(), r);
        EXPECT_EQ(group->world(), 3);
        EXPECT_EQ(group->payload(), nccl_id) << "rank " << r;
        for (size_t i = 0; i < messages.size(); ++i) {
            if (r == 0) {
                group->broadcast(messages[i]);
            } else {
                ASSERT_EQ(group->receive(), messages[i]) << "rank " << r << " message " << i;
            }
        }
        if (r == 0) {
            group->close();
            EXPECT_THROW(group->broadcast(pattern(1, 0)), Error);
        } else {
            EXPECT_TRUE(group->receive().empty()) << "rank " << r << ": the goodbye is an empty message";
            EXPECT_TRUE(group->receive().empty()) << "rank " << r << ": and stays so";
            std::lock_guard<std::mutex> lock(m);
            ++ended;
        }
    });
    for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(ended, 2);
}

TEST(TcpGroup, RejectsAnEmptyMessage) {
    const int port = pick_free_port();
    const std::vector<std::string> errors = run_ranks(2, [&](int r) {
        std::unique_ptr<TcpGroup> group = TcpGroup::rendezvous(place(r, 2, port), options_for());
        if (r == 0) {
            EXPECT_THROW(group->broadcast({}), Error);
        } else {
            EXPECT_TRUE(group->receive().empty());  // the goodbye of the leader's destructor
        }
    });
    EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
}

TEST(TcpGroup, OneRankNeedsNoNetwork) {
    std::unique_ptr<TcpGroup> group = TcpGroup::rendezvous(place(0, 1, 1), options_for());
    EXPECT_EQ(group->payload(), (std::vector<uint8_t>{1, 2, 3}));
    group->broadcast(pattern(10, 1));  // nobody to send to
}

TEST(TcpGroup, DifferentBuildFailsEveryRank) {
    const auto errors = mismatched([](int r, RankInfo&, Identity& id) {
        if (r == 1) id.build = "build-2";
    });
    expect_all_contain(errors, "rank 1 runs a different dsv4 build (build-2 vs build-1 on rank 0)");
}

TEST(TcpGroup, DifferentCheckpointFailsEveryRank) {
    const auto errors = mismatched([](int r, RankInfo&, Identity& id) {
        if (r == 2) id.model = "model-2";
    });
    expect_all_contain(errors, "rank 2 loaded a different checkpoint (model-2 vs model-1 on rank 0)");
}

TEST(TcpGroup, DifferentOptionsFailEveryRank) {
    const auto errors = mismatched([](int r, RankInfo&, Identity& id) {
        if (r == 1) id.options = "opts-2";
    });
    expect_all_contain(errors, "rank 1 was started with different options (opts-2 vs opts-1 on rank 0)");
}

TEST(TcpGroup, DifferentWorldSizeFailsEveryRank) {
    // Rank 1 believes in a world of 2 (e.g. another --nnodes): it must not join a world of 3.
    const auto errors = mismatched([](int r, RankInfo& p, Identity&) {
        if (r == 1) p.world = 2;
    });
    expect_all_contain(errors, "rank 1 was started for 2 ranks but rank 0 for 3");
}

TEST(TcpGroup, DuplicateRankFailsEveryRank) {
    const auto errors = mismatched([](int r, RankInfo& p, Identity&) {
        if (r == 2) p.rank = 1;  // two nodes with the same --node-rank
    });
    expect_all_contain(errors, "two processes claim rank 1");
}

TEST(TcpGroup, MissingRankIsNamedAfterTheTimeout) {
    const int port = pick_free_port();
    const auto start = std::chrono::steady_clock::now();
    const auto errors = run_ranks(2, [&](int r) {  // ranks 0 and 1 of 3: rank 2 never comes
        TcpGroup::rendezvous(place(r, 3, port), options_for({"build-1", "model-1", "opts-1"}, 0.5));
    });
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    expect_all_contain(errors,
                       "rank 0 waited 0.5 s at 127.0.0.1:" + std::to_string(port) + " for rank 2, which never arrived");
    EXPECT_LT(elapsed, 3.0);
}

TEST(TcpGroup, UnreachableLeaderIsNamed) {
    const int port = pick_free_port();  // nobody listens there
    const auto errors = run_ranks(1, [&](int) {
        TcpGroup::rendezvous(place(1, 2, port), options_for({"build-1", "model-1", "opts-1"}, 0.3));
    });
    expect_all_contain(errors, "rank 1 could not reach rank 0 at 127.0.0.1:" + std::to_string(port) + " within 0.3 s");
}

TEST(TcpGroup, IgnoresAStrayConnection) {
    const int port = pick_free_port();
    std::string leader_error;
    std::thread leader([&] {
        try {
            TcpGroup::rendezvous(place(0, 2, port), options_for());
        } catch (const Error& e) {
            leader_error = e.what();
        }
    });
    // Not a rank: connects once the leader listens, sends an HTTP request, hangs up. Rank 1 comes after it.
    int fd = -1;
    for (int attempt = 0; attempt < 500 && fd < 0; ++attempt) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a = {};
        a.sin_family = AF_INET, a.sin_port = htons(uint16_t(port)), a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
            close(fd), fd = -1;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    ASSERT_GE(fd, 0);
    EXPECT_EQ(write(fd, "GET / HTTP/1.0\r\n\r\n", 18), 18);
    close(fd);
    std::unique_ptr<TcpGroup> follower = TcpGroup::rendezvous(place(1, 2, port), options_for());
    EXPECT_TRUE(follower->receive().empty());  // the leader's destructor says goodbye
    leader.join();
    EXPECT_EQ(leader_error, "");
}

// The leader's process ends without the goodbye (a crash): the follower's receive() throws and its watchdog fires.
TEST(TcpGroup, LeaderGoneWithoutGoodbye) {
    const int port = pick_free_port();
    const pid_t leader = fork();
    ASSERT_GE(leader, 0);
    if (leader == 0) {
        RendezvousOptions o = options_for();
        o.on_peer_lost = [](int, const std::string&) {};
        try {
            TcpGroup* group = TcpGroup::rendezvous(place(0, 2, port), o).release();  // never closed
            group->broadcast(pattern(100, 1));
        } catch (...) {
            _exit(2);
        }
        _exit(0);  // no close(), no goodbye: the sockets close as the process ends
    }
    Signal lost;
    RendezvousOptions o = options_for();
    o.on_peer_lost = [&](int rank, const std::string& reason) { lost.fire(rank, reason); };
    std::unique_ptr<TcpGroup> group = TcpGroup::rendezvous(place(1, 2, port), o);
    EXPECT_EQ(group->receive(), pattern(100, 1));
    try {
        group->receive();
        ADD_FAILURE() << "receive() returned after the leader died";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("rank 1: the leader (rank 0) is gone (connection closed)"),
                  std::string::npos)
            << e.what();
    }
    ASSERT_TRUE(lost.wait(5.0)) << "the watchdog did not fire";
    EXPECT_EQ(lost.rank, 0);
    EXPECT_EQ(lost.reason, "connection closed");
    int status = 0;
    ASSERT_EQ(waitpid(leader, &status, 0), leader);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// A follower's process ends: the leader's watchdog names it, and broadcast() soon throws naming it.
TEST(TcpGroup, FollowerGoneIsNamed) {
    const int port = pick_free_port();
    const pid_t follower = fork();
    ASSERT_GE(follower, 0);
    if (follower == 0) {
        RendezvousOptions o = options_for();
        o.on_peer_lost = [](int, const std::string&) {};
        try {
            TcpGroup::rendezvous(place(2, 3, port), o).release();  // leaked: only the process end closes it
        } catch (...) {
            _exit(2);
        }
        _exit(0);
    }
    Signal lost;
    const auto errors = run_ranks(2, [&](int r) {
        RendezvousOptions o = options_for();
        if (r == 0) o.on_peer_lost = [&](int rank, const std::string& reason) { lost.fire(rank, reason); };
        std::unique_ptr<TcpGroup> group = TcpGroup::rendezvous(place(r, 3, port), o);
        if (r == 1) {  // stays until the leader's goodbye, so the failure the leader sees is rank 2's
            while (!group->receive().empty()) {
            }
            return;
        }
        ASSERT_TRUE(lost.wait(5.0)) << "the leader's watchdog did not fire";
        EXPECT_EQ(lost.rank, 2);
        group->set_on_peer_lost([](int, const std::string&) {});
        group->broadcast(pattern(10, 1));  // rank 1 gets it; rank 2's socket may still take one write
        try {
            for (int i = 0; i < 100; ++i) {
                group->broadcast(pattern(10, 1));
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
            }
            ADD_FAILURE() << "broadcast() to a dead follower never failed";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("rank 2 is gone"), std::string::npos) << e.what();
        }
    });
    EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
    int status = 0;
    ASSERT_EQ(waitpid(follower, &status, 0), follower);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
