// The serving engine's own cost per step (runtime/engine.h): continuous batching over a backend that computes
// nothing (its forward is instant, its draws a fixed rule), so every microsecond measured is the engine's host work:
// taking requests, planning the batch, the uniforms and draws it hands the backend, sampling on the host where it
// must, delivering events. Clients keep `concurrency` requests in flight (a new one as each finishes, like
// tools/bench_serve.py), prompts of 128 ids and 128 tokens at temperature 1, V4's vocabulary. Compare the step time
// with the GPU's decode step at that batch (docs/perf.md: 84 ms at batch 256 on two H200s) to see the engine's share.
// Usage: dsv4_bench_engine [TEXT]   (only the settings whose name contains TEXT)
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "model/synthetic_checkpoint.h"
#include "runtime/engine.h"

namespace {

using namespace dsv4;

// A backend that draws (Backend::draws_tokens) and computes nothing: positions advance, drawn ids follow the
// position, and the logits it must return (items that are not drawn) are zeros.
class InstantBackend final : public Backend {
  public:
    explicit InstantBackend(ModelConfig config) : config_(std::move(config)) {}
    const ModelConfig& config() const override { return config_; }
    Numerics numerics() const override { return Numerics::kModel; }
    SequenceState new_sequence() const override { return {}; }
    SequenceState copy_sequence(const SequenceState& s) const override {
        SequenceState copy;
        copy.position = s.position;
        return copy;
    }
    std::vector<float> forward(SequenceState& s, std::span<const int32_t> ids, bool all_logits) override {
        s.position += int64_t(ids.size());
        return std::vector<float>(size_t((all_logits ? int64_t(ids.size()) : 1) * config_.vocab_size), 0.0f);
    }
    std::vector<std::vector<float>> forward_batch(std::span<const BatchItem> items) override {
        std::vector<std::vector<float>> logits(items.size());
        for (size_t i = 0; i < items.size(); ++i) {
            const BatchItem& item = items[i];
            if (item.draw) {
                item.state->position += int64_t(item.ids.size());
                item.draw->id = int32_t(1000 + item.state->position % 1000);
            } else {
                logits[i] = forward(*item.state, item.ids, item.all_logits);
            }
        }
        return logits;
    }
    bool draws_tokens() const override { return true; }
    std::vector<float> forward_block(SequenceState&, int64_t, int64_t, std::span<const int32_t>,
                                     const float*) override {
        fail("InstantBackend has no blocks");
    }
    void set_observer(ActivationObserver) override {}

  private:
    ModelConfig config_;
};

struct Setting {
    const char* name;
    int64_t concurrency, step_tokens, prefix_cache;
    bool backend_draws;
};

void run(const Setting& s, const ModelConfig& config) {
    constexpr int64_t kPrompt = 128, kOutput = 128;
    const int64_t requests = 4 * s.concurrency;
    InstantBackend backend(config);
    EngineOptions o;
    o.max_running = s.concurrency;
    o.step_tokens = s.step_tokens;
    o.max_context = 4096;
    o.prefix_cache_entries = s.prefix_cache;
    o.backend_draws = s.backend_draws;
    Engine engine(backend, o);
    std::mutex mutex;
    std::condition_variable done;
    int64_t finished = 0, tokens = 0;
    auto submit = [&](int64_t i) {
        EngineRequest r;
        for (int64_t j = 0; j < kPrompt; ++j) r.prompt.push_back(int32_t((i * 7919 + j * 104729) % 120000 + 100));
        r.max_new_tokens = kOutput;
        r.stop_at_eos = false;
        r.sampling.greedy = false;
        r.sampling.temperature = 1.0f;
        r.sampling.seed = uint64_t(i);
        r.on_event = [&](const EngineEvent& e) {
            std::lock_guard lock(mutex);
            if (e.kind == EngineEvent::Kind::kToken) ++tokens;
            if (e.kind == EngineEvent::Kind::kFinished) {
                ++finished;
                done.notify_one();
            }
        };
        engine.submit(std::move(r));
    };
    const auto t0 = std::chrono::steady_clock::now();
    int64_t submitted = 0;
    for (; submitted < s.concurrency; ++submitted) submit(submitted);
    {
        std::unique_lock lock(mutex);
        while (finished < requests) {
            const int64_t can = std::min(requests, finished + s.concurrency) - submitted;
            if (can > 0) {
                lock.unlock();
                for (int64_t k = 0; k < can; ++k) submit(submitted++);
                lock.lock();
                continue;
            }
            done.wait(lock);
        }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const Engine::Stats st = engine.stats();
    std::printf("%-34s %6lld %7lld %8lld %9.1f %12.0f %9lld\n", s.name, (long long)s.concurrency,
                (long long)s.step_tokens, (long long)st.steps, 1e6 * seconds / double(st.steps),
                double(tokens) / seconds, (long long)st.backend_draws);
}

}  // namespace

int main(int argc, char** argv) {
    const char* only = argc > 1 ? argv[1] : "";
    const ModelConfig config = synthetic_preset("flash", 1);
    std::printf("engine host work per step, V4 vocabulary (%lld), backend instant; 4 x concurrency requests of 128 + "
                "128 tokens at temperature 1\n",
                (long long)config.vocab_size);
    std::printf("%-34s %6s %7s %8s %9s %12s %9s\n", "setting", "conc", "step", "steps", "us/step", "tokens/s",
                "drawn");
    for (const Setting& s : {Setting{"draws by the backend", 1, 256, 0, true},
                             Setting{"draws by the backend", 64, 1280, 0, true},
                             Setting{"draws by the backend", 256, 1280, 0, true},
                             Setting{"draws by the backend, prefix cache 32", 256, 1280, 32, true},
                             Setting{"draws on the host", 64, 1280, 0, false},
                             Setting{"draws on the host", 256, 1280, 0, false}})
        if (std::strstr(s.name, only)) run(s, config);
}
