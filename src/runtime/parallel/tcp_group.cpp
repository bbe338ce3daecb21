// TcpGroup (tcp_group.h): rendezvous, framed leader-to-follower messages and the watchdog, over POSIX sockets.
// Wire format, all integers little-endian: a frame is [type u32][length u64][length bytes]. Strings and blobs
// inside a body are [length u32][bytes]. Tested in tests/parallel/tcp_group_test.cpp.
#include "runtime/parallel/tcp_group.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "runtime/parallel/wire.h"

namespace dsv4::parallel {
namespace {

constexpr uint32_t kMagic = 0x34565344;  // "DSV4"
constexpr uint32_t kVersion = 1;
enum FrameType : uint32_t { kHello = 1, kVerdict = 2, kMessage = 3, kGoodbye = 4 };
constexpr size_t kHeaderBytes = 12;
constexpr uint64_t kMaxRendezvousFrame = 1 << 20;    // hellos and verdicts: fingerprints and the payload
constexpr uint64_t kMaxMessage = uint64_t(1) << 40;  // a larger length is a corrupt stream, not a message
constexpr double kHelloWait_s = 10;                  // a connection that says nothing for this long is not a dsv4 rank

using Clock = std::chrono::steady_clock;
using Deadline = std::optional<Clock::time_point>;  // nullopt: wait forever

Clock::time_point after(double seconds) {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// poll()'s timeout for the time left before `deadline` (-1: forever), rounded up so a wait never returns early.
int poll_timeout_ms(Deadline deadline) {
    if (!deadline) return -1;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count();
    return left <= 0 ? 0 : int(std::min<int64_t>(left, 1 << 30));
}

// Waits until `fd` reports one of `events` (or hangup/error); false when the deadline passed first.
bool wait_for(int fd, short events, Deadline deadline) {
    while (true) {
        pollfd p = {fd, events, 0};
        const int r = poll(&p, 1, poll_timeout_ms(deadline));
        if (r > 0) return true;
        if (r == 0) return false;
        if (errno != EINTR) return true;  // the following read/write reports the error
    }
}

class Writer : public LittleEndianWriter {
  public:
    void blob(std::span<const uint8_t> b) {
        u32(uint32_t(b.size()));
        raw(b);
    }
    void str(const std::string& s) { blob({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }
};

// Reads a body; a short body is a peer that does not speak this protocol.
class Reader {
  public:
    explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
    bool ok() const { return ok_; }
    uint8_t u8() { return uint8_t(take(1)); }
    uint32_t u32() { return uint32_t(take(4)); }
    std::vector<uint8_t> blob() {
        const uint32_t n = u32();
        if (!ok_ || bytes_.size() - pos_ < n) return ok_ = false, std::vector<uint8_t>{};
        std::vector<uint8_t> out(bytes_.begin() + pos_, bytes_.begin() + pos_ + n);
        pos_ += n;
        return out;
    }
    std::string str() {
        const std::vector<uint8_t> b = blob();
        return std::string(b.begin(), b.end());
    }

  private:
    uint64_t take(int n) {
        if (!ok_ || bytes_.size() - pos_ < size_t(n)) return ok_ = false, 0;
        uint64_t v = 0;
        for (int i = 0; i < n; ++i) v |= uint64_t(bytes_[pos_ + i]) << (8 * i);
        pos_ += n;
        return v;
    }
    std::span<const uint8_t> bytes_;
    size_t pos_ = 0;
    bool ok_ = true;
};

std::string socket_error(int fd) {
    int error = 0;
    socklen_t len = sizeof(error);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
    return error ? std::strerror(error) : "connection closed";
}

// "" when sent; otherwise why not.
std::string send_frame(int fd, uint32_t type, std::span<const uint8_t> body) {
    Writer header;
    header.u32(type);
    header.u64(body.size());
    iovec iov[2] = {{const_cast<uint8_t*>(header.bytes().data()), kHeaderBytes},
                    {const_cast<uint8_t*>(body.data()), body.size()}};
    iovec* v = iov;
    int count = 2;
    while (count > 0) {  // one sendmsg for header and body: with TCP_NODELAY two sends would be two segments
        if (v->iov_len == 0) {
            ++v, --count;
            continue;
        }
        msghdr msg = {};
        msg.msg_iov = v;
        msg.msg_iovlen = count;
        const ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno == EINTR) continue;
            return errno == EPIPE ? "connection closed" : std::strerror(errno);
        }
        size_t left = size_t(sent);
        while (count > 0 && left >= v->iov_len) left -= v->iov_len, ++v, --count;
        if (count > 0) v->iov_base = static_cast<uint8_t*>(v->iov_base) + left, v->iov_len -= left;
    }
    return "";
}

// Reads exactly n bytes; false with `reason` ("connection closed", "timed out" or the socket error) otherwise.
bool read_exact(int fd, uint8_t* out, size_t n, Deadline deadline, std::string& reason) {
    while (n > 0) {
        if (deadline && !wait_for(fd, POLLIN, deadline)) return reason = "timed out", false;
        const ssize_t got = recv(fd, out, n, 0);
        if (got == 0) return reason = "connection closed", false;
        if (got < 0) {
            if (errno == EINTR) continue;
            return reason = std::strerror(errno), false;
        }
        out += got, n -= size_t(got);
    }
    return true;
}

struct Frame {
    uint32_t type = 0;
    std::vector<uint8_t> body;
};

bool read_frame(int fd, Frame& frame, uint64_t max_length, Deadline deadline, std::string& reason) {
    uint8_t header[kHeaderBytes];
    if (!read_exact(fd, header, kHeaderBytes, deadline, reason)) return false;
    Reader r({header, kHeaderBytes});
    frame.type = r.u32();
    const uint64_t length = uint64_t(r.u32()) | uint64_t(r.u32()) << 32;
    if (length > max_length) return reason = fmt::format("a frame of {} bytes: not a dsv4 rank", length), false;
    frame.body.resize(length);
    return read_exact(fd, frame.body.data(), length, deadline, reason);
}

// Latency: one small message per decode step (no Nagle). A dead host sends no FIN: keepalive probes notice it
// within about 15 + 4 * 5 = 35 s and the watchdog sees the error.
void tune(int fd) {
    const int one = 1, idle = 15, interval = 5, probes = 4;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
}

void set_blocking(int fd, bool blocking) {
    const int flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

struct AddrInfo {
    addrinfo* list = nullptr;
    ~AddrInfo() {
        if (list) freeaddrinfo(list);
    }
};

// getaddrinfo's error as a sentence fragment, or "".
std::string resolve(const std::string& addr, int port, bool passive, AddrInfo& out) {
    addrinfo hints = {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    const std::string service = std::to_string(port);
    const int r = getaddrinfo(addr.c_str(), service.c_str(), &hints, &out.list);
    return r == 0 ? "" : fmt::format("cannot resolve '{}': {}", addr, gai_strerror(r));
}

// One attempt at every address of addr:port; the connected socket, or -1 with `reason`.
int connect_once(const std::string& addr, int port, Deadline deadline, std::string& reason) {
    AddrInfo info;
    if (reason = resolve(addr, port, false, info); !reason.empty()) return -1;
    for (addrinfo* a = info.list; a; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) {
            reason = std::strerror(errno);
            continue;
        }
        int error = connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
        if (error == EINPROGRESS) {
            error = ETIMEDOUT;
            if (wait_for(fd, POLLOUT, deadline)) {
                socklen_t len = sizeof(error);
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
            }
        }
        reason = std::strerror(error);
        if (error == 0) {
            set_blocking(fd, true);
            tune(fd);
            return fd;
        }
        ::close(fd);
    }
    return -1;
}

int listen_on(const std::string& addr, int port, int backlog) {
    AddrInfo info;
    if (std::string error = resolve(addr, port, true, info); !error.empty()) {
        fail("rank 0 cannot listen for the other ranks at {}:{}: {}; check --master-addr", addr, port, error);
    }
    std::string reason = "no address";
    for (addrinfo* a = info.list; a; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            reason = std::strerror(errno);
            continue;
        }
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, backlog) == 0) {
            set_blocking(fd, false);
            return fd;
        }
        reason = std::strerror(errno);
        ::close(fd);
    }
    fail(
        "rank 0 cannot listen for the other ranks at {}:{}: {}; choose another --master-port (or check "
        "--master-addr: it must be an address of node 0)",
        addr, port, reason);
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
    return out;
}

std::vector<uint8_t> hello_body(const RankInfo& place, const Identity& identity) {
    Writer w;
    w.u32(kMagic);
    w.u32(kVersion);
    w.u32(uint32_t(place.rank));
    w.u32(uint32_t(place.world));
    w.str(identity.build);
    w.str(identity.model);
    w.str(identity.options);
    return w.bytes();
}

std::vector<uint8_t> verdict_body(bool ok, std::span<const uint8_t> payload_or_message) {
    Writer w;
    w.u8(ok ? 1 : 0);
    w.blob(payload_or_message);
    return w.bytes();
}

std::span<const uint8_t> as_bytes(const std::string& s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

struct Arrival {
    int fd = -1;
    uint32_t version = 0;
    int rank = -1, world = 0;
    Identity identity;
};

// Why the arrivals cannot run with the leader, one sentence fragment per problem (empty: they can).
std::vector<std::string> check_arrivals(const std::vector<Arrival>& arrivals, const RankInfo& leader,
                                        const Identity& identity) {
    std::vector<std::string> problems;
    std::vector<int> claimed(leader.world, 0);
    for (const Arrival& a : arrivals) {
        if (a.version != kVersion) {
            problems.push_back(
                fmt::format("rank {} speaks rendezvous protocol {} but rank 0 speaks {} (run the same "
                            "dsv4 build on every node)",
                            a.rank, a.version, kVersion));
        } else if (a.rank == 0) {
            problems.push_back("a second process claims rank 0 (check that every node has its own --node-rank)");
        } else if (a.rank < 0 || a.rank >= leader.world) {
            problems.push_back(
                fmt::format("a process claims rank {} but the run has {} ranks, 0 to {} (check "
                            "--node-rank and --nnodes on every node)",
                            a.rank, leader.world, leader.world - 1));
        } else if (claimed[a.rank]++) {
            problems.push_back(
                fmt::format("two processes claim rank {} (check that every node has its own "
                            "--node-rank)",
                            a.rank));
        } else if (a.world != leader.world) {
            problems.push_back(
                fmt::format("rank {} was started for {} ranks but rank 0 for {} (every node must give "
                            "the same --nnodes and the same number of --gpus)",
                            a.rank, a.world, leader.world));
        } else if (a.identity.build != identity.build) {
            problems.push_back(fmt::format("rank {} runs a different dsv4 build ({} vs {} on rank 0)", a.rank,
                                           a.identity.build, identity.build));
        } else if (a.identity.model != identity.model) {
            problems.push_back(fmt::format("rank {} loaded a different checkpoint ({} vs {} on rank 0)", a.rank,
                                           a.identity.model, identity.model));
        } else if (a.identity.options != identity.options) {
            problems.push_back(fmt::format("rank {} was started with different options ({} vs {} on rank 0)", a.rank,
                                           a.identity.options, identity.options));
        }
    }
    return problems;
}

}  // namespace

void exit_on_peer_lost(int rank, const std::string& reason) {
    fmt::print(stderr, "dsv4: rank {} is gone ({}); stopping\n", rank, reason);
    std::fflush(stderr);
    _exit(1);
}

int pick_free_port(const std::string& addr) {
    AddrInfo info;
    if (std::string error = resolve(addr, 0, true, info); !error.empty()) fail("cannot pick a free port: {}", error);
    const int fd = socket(info.list->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    DSV4_CHECK(fd >= 0, "cannot pick a free port on {}: {}", addr, std::strerror(errno));
    sockaddr_storage bound = {};
    socklen_t len = sizeof(bound);
    const bool ok = bind(fd, info.list->ai_addr, info.list->ai_addrlen) == 0 &&
                    getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0;
    const int error = errno;
    ::close(fd);
    DSV4_CHECK(ok, "cannot pick a free port on {}: {}; give one with --master-port", addr, std::strerror(error));
    return bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                       : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

TcpGroup::TcpGroup(int rank, int world, double timeout_s, PeerLostCallback callback)
    : rank_(rank), world_(world), timeout_s_(timeout_s), on_peer_lost_(std::move(callback)) {}

std::unique_ptr<TcpGroup> TcpGroup::rendezvous(const RankInfo& place, const RendezvousOptions& options) {
    DSV4_CHECK(place.world >= 1 && place.rank >= 0 && place.rank < place.world, "rank {} is outside a run of {} ranks",
               place.rank, place.world);
    DSV4_CHECK(options.timeout_s > 0, "the rendezvous timeout must be positive (got {} s)", options.timeout_s);
    std::unique_ptr<TcpGroup> group(new TcpGroup(place.rank, place.world, options.timeout_s, options.on_peer_lost));
    if (place.world == 1) {
        group->payload_ = options.payload;
        return group;
    }
    const std::string where = fmt::format("{}:{}", place.master_addr, place.master_port);
    const auto deadline = after(options.timeout_s);

    if (place.leader()) {
        DSV4_CHECK(options.payload.size() < kMaxRendezvousFrame / 2, "the rendezvous payload ({} bytes) is too large",
                   options.payload.size());
        const int listener = listen_on(place.master_addr, place.master_port, place.world + 16);
        std::vector<Arrival> arrivals;
        bool timed_out = false;
        while (int(arrivals.size()) < place.world - 1) {
            if (!wait_for(listener, POLLIN, deadline)) {
                timed_out = true;
                break;
            }
            const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) continue;
            set_blocking(fd, true);
            tune(fd);
            Frame frame;
            std::string reason;
            const bool read =
                read_frame(fd, frame, kMaxRendezvousFrame, std::min(deadline, after(kHelloWait_s)), reason);
            Reader r(frame.body);
            if (!read || frame.type != kHello || r.u32() != kMagic) {
                ::close(fd);  // not a dsv4 rank (a port scanner, a health check): ignore it
                continue;
            }
            Arrival a;
            a.fd = fd;
            a.version = r.u32();
            a.rank = int(r.u32());
            a.world = int(r.u32());
            if (a.version == kVersion) a.identity = {r.str(), r.str(), r.str()};
            arrivals.push_back(std::move(a));
        }
        ::close(listener);

        std::vector<std::string> problems = check_arrivals(arrivals, place, options.identity);
        if (timed_out) {
            std::vector<std::string> missing;
            for (int r = 1; r < place.world; ++r) {
                bool seen = false;
                for (const Arrival& a : arrivals) seen |= a.rank == r;
                if (!seen) missing.push_back(std::to_string(r));
            }
            problems.push_back(
                fmt::format("rank 0 waited {} s at {} for rank{} {}, which never arrived (check that "
                            "every node runs with the same --master-addr and --master-port and can "
                            "reach node 0)",
                            options.timeout_s, where, missing.size() == 1 ? "" : "s", join(missing, ", ")));
        }
        const std::string message = "the ranks cannot run together: " + join(problems, "; ");
        for (const Arrival& a : arrivals) {
            send_frame(
                a.fd, kVerdict,
                verdict_body(problems.empty(), problems.empty() ? std::span(options.payload) : as_bytes(message)));
        }
        if (!problems.empty()) {
            for (const Arrival& a : arrivals) ::close(a.fd);
            throw Error(message);
        }
        group->peers_.assign(place.world - 1, -1);
        for (const Arrival& a : arrivals) group->peers_[a.rank - 1] = a.fd;
        group->payload_ = options.payload;
    } else {
        int fd = -1;
        std::string reason;
        while ((fd = connect_once(place.master_addr, place.master_port, deadline, reason)) < 0) {
            if (Clock::now() >= deadline) {
                fail(
                    "rank {} could not reach rank 0 at {} within {} s ({}); check --master-addr and --master-port, "
                    "and that node 0 was started",
                    place.rank, where, options.timeout_s, reason);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        group->peers_ = {fd};  // from here the destructor closes it
        if (std::string error = send_frame(fd, kHello, hello_body(place, options.identity)); !error.empty()) {
            fail("rank {} lost its connection to rank 0 at {} during the rendezvous ({})", place.rank, where, error);
        }
        // The leader answers once every rank arrived or its own timeout passed; it started listening before this
        // connection, so its deadline is at most timeout_s from now.
        Frame frame;
        if (!read_frame(fd, frame, kMaxRendezvousFrame, after(options.timeout_s + kHelloWait_s), reason) ||
            frame.type != kVerdict) {
            fail("rank {} lost its connection to rank 0 at {} during the rendezvous ({})", place.rank, where,
                 reason.empty() ? "an unexpected frame" : reason);
        }
        Reader r(frame.body);
        const bool ok = r.u8() == 1;
        std::vector<uint8_t> body = r.blob();
        DSV4_CHECK(r.ok(), "rank {} got a malformed answer from rank 0 at {}: is it a dsv4 rank?", place.rank, where);
        if (!ok) throw Error(std::string(body.begin(), body.end()));
        group->payload_ = std::move(body);
    }
    group->start_watchdog();
    return group;
}

TcpGroup::~TcpGroup() {
    close();
}

void TcpGroup::broadcast(std::span<const uint8_t> message) {
    DSV4_ASSERT(rank_ == 0, "broadcast() on rank {}: only the leader sends", rank_);
    DSV4_CHECK(!closed_, "broadcast() after close(): the followers were told the run ended");
    DSV4_CHECK(!message.empty(), "broadcast() of an empty message: the empty message means the end of the run");
    for (size_t i = 0; i < peers_.size(); ++i) {
        if (std::string error = send_frame(peers_[i], kMessage, message); !error.empty()) {
            fail("rank {} is gone ({}); the leader cannot send it the next call", i + 1, error);
        }
    }
}

std::vector<uint8_t> TcpGroup::receive() {
    DSV4_ASSERT(rank_ != 0, "receive() on the leader: only followers receive");
    if (ended_ || world_ == 1) return {};
    DSV4_CHECK(!closed_, "receive() after close() on rank {}", rank_);
    Frame frame;
    std::string reason;
    if (!read_frame(peers_[0], frame, kMaxMessage, std::nullopt, reason)) {
        fail("rank {}: the leader (rank 0) is gone ({})", rank_, reason);
    }
    if (frame.type == kGoodbye) {
        // Disarm the watchdog before hanging up: the leader closes its end once every follower hung up.
        ended_ = true;
        stop_watchdog();
        ::close(peers_[0]);
        peers_.clear();
        return {};
    }
    DSV4_CHECK(frame.type == kMessage && !frame.body.empty(),
               "rank {}: the leader sent a frame of type {}: is it the "
               "same dsv4 build?",
               rank_, frame.type);
    return std::move(frame.body);
}

void TcpGroup::set_on_peer_lost(PeerLostCallback callback) {
    std::lock_guard<std::mutex> lock(callback_mutex_);
    on_peer_lost_ = std::move(callback);
}

void TcpGroup::close() {
    if (closed_) return;
    closed_ = true;
    stop_watchdog();
    if (rank_ == 0) {
        for (int fd : peers_) send_frame(fd, kGoodbye, {});
        const auto deadline = after(timeout_s_);
        for (int fd : peers_) {  // until each follower read the goodbye and hung up
            uint8_t sink[256];
            while (wait_for(fd, POLLIN, deadline) && recv(fd, sink, sizeof(sink), 0) > 0) {
            }
        }
    }
    for (int fd : peers_) ::close(fd);
    peers_.clear();
}

void TcpGroup::start_watchdog() {
    DSV4_CHECK(pipe2(wake_, O_CLOEXEC) == 0, "cannot create the watchdog's pipe: {}", std::strerror(errno));
    watchdog_ = std::thread([this] { watch(); });
}

void TcpGroup::stop_watchdog() {
    if (!watchdog_.joinable()) return;
    DSV4_ASSERT(std::this_thread::get_id() != watchdog_.get_id(), "the peer-lost callback must not close the group");
    (void)!write(wake_[1], "x", 1);
    watchdog_.join();
    ::close(wake_[0]);
    ::close(wake_[1]);
    wake_[0] = wake_[1] = -1;
}

// Only hangups and errors are polled for (POLLRDHUP, never POLLIN): the messages themselves are receive()'s.
void TcpGroup::watch() {
    std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}};
    for (int fd : peers_) fds.push_back({fd, POLLRDHUP, 0});
    while (true) {
        if (poll(fds.data(), fds.size(), -1) < 0) continue;  // EINTR
        if (fds[0].revents) return;
        for (size_t i = 1; i < fds.size(); ++i) {
            if (!(fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) continue;
            const int peer = rank_ == 0 ? int(i) : 0;
            const std::string reason = fds[i].revents & POLLERR ? socket_error(fds[i].fd) : "connection closed";
            PeerLostCallback callback;
            {
                std::lock_guard<std::mutex> lock(callback_mutex_);
                callback = on_peer_lost_;
            }
            if (callback) callback(peer, reason);
            return;
        }
    }
}

}  // namespace dsv4::parallel
