// The in-process ControlChannel: see local_channel.h.
#include "runtime/parallel/local_channel.h"

#include <condition_variable>
#include <deque>
#include <mutex>

#include "core/error.h"

namespace dsv4::parallel {
namespace {

struct Group {
    explicit Group(int world) : queues(size_t(world)), alive(size_t(world), true) {}

    std::mutex mutex;
    std::condition_variable arrived;
    std::vector<std::deque<std::vector<uint8_t>>> queues;  // [world]: rank r's messages not yet received ([0] unused)
    std::vector<bool> alive;                               // [world]: rank r's channel not yet destroyed
};

class LocalChannel final : public ControlChannel {
  public:
    LocalChannel(std::shared_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}
    ~LocalChannel() override {
        std::lock_guard lock(group_->mutex);
        group_->alive[size_t(rank_)] = false;
        group_->arrived.notify_all();
    }

    int rank() const override { return rank_; }
    int world() const override { return int(group_->queues.size()); }

    void broadcast(std::span<const uint8_t> message) override {
        DSV4_CHECK(rank_ == 0, "broadcast on rank {}: only the leader (rank 0) sends", rank_);
        std::lock_guard lock(group_->mutex);
        for (int r = 1; r < world(); ++r)
            DSV4_CHECK(group_->alive[size_t(r)], "rank {} is gone: its channel was closed", r);
        for (int r = 1; r < world(); ++r) group_->queues[size_t(r)].emplace_back(message.begin(), message.end());
        group_->arrived.notify_all();
    }

    std::vector<uint8_t> receive() override {
        DSV4_CHECK(rank_ != 0, "receive on rank 0: the leader only sends");
        std::unique_lock lock(group_->mutex);
        auto& queue = group_->queues[size_t(rank_)];
        group_->arrived.wait(lock, [&] { return !queue.empty() || !group_->alive[0]; });
        DSV4_CHECK(!queue.empty(), "the leader (rank 0) is gone: its channel was closed");
        std::vector<uint8_t> message = std::move(queue.front());
        queue.pop_front();
        return message;
    }

  private:
    std::shared_ptr<Group> group_;
    int rank_;
};

}  // namespace

std::vector<std::unique_ptr<ControlChannel>> make_local_channels(int world) {
    DSV4_CHECK(world >= 1, "a group of {} ranks", world);
    auto group = std::make_shared<Group>(world);
    std::vector<std::unique_ptr<ControlChannel>> channels;
    for (int r = 0; r < world; ++r) channels.push_back(std::make_unique<LocalChannel>(group, r));
    return channels;
}

}  // namespace dsv4::parallel
