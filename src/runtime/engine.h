// The serving engine: one thread owns the model (any Backend) and runs steps of continuous batching. Requests
// join and leave at every step; a step is one Backend::forward_batch over every running decode (one token each)
// and as many prompt tokens as the step's token budget leaves, so a long prompt is prefilled in chunks between
// the others' decode steps instead of stalling them. Prompts start from the longest cached prefix (prefix_cache.h).
// Results are bit-identical to running each request alone (the backends are batch- and chunk-invariant), so the
// same request with greedy decoding gives the same tokens whatever else runs. Tested in
// tests/runtime/engine_test.cpp against the CPU backend on the embedded trained model.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "core/thread_pool.h"
#include "model/backend.h"
#include "runtime/logit_adjust.h"
#include "runtime/prefix_cache.h"
#include "runtime/sampler.h"
#include "runtime/token_constraint.h"

namespace dsv4 {

struct EngineOptions {
    int64_t max_running = 16;          // requests computed at once (each holds one backend sequence)
    int64_t step_tokens = 256;         // tokens per step: running decodes first, then prompt chunks (> max_running)
    int64_t max_context = 0;           // positions per sequence (prompt + output); required
    int64_t prefix_cache_entries = 0;  // 0: no prefix cache
    int64_t snapshot_interval = 256;   // prompts are cached at their end and every this many tokens (shared starts)
    // Draws that need no order of the vocabulary (greedy, temperature, min-p; no logprobs) are made where the
    // backend computes the logits (Backend::draws_tokens: the GPU), so a decode step copies no logits to the host.
    // The same ids either way (the request's generator gives the draw's uniform); off: every draw on the host.
    bool backend_draws = true;
    // Tokens per step while no running request waits for a token (every one is reading its prompt): a long prompt on
    // an otherwise idle engine goes in longer steps, which the GPU prefills faster (docs/perf.md, "Prefill rate by
    // piece size": 2.5x from 256 to 2,048 tokens), and no decode's next token waits behind them. The same logits
    // either way (chunk invariance). 0 or less than step_tokens: step_tokens.
    int64_t prefill_step_tokens = 0;
};

struct TokenChoice {
    int32_t id = 0;
    float logprob = 0.0f;  // natural log of the softmax of the raw logits (temperature 1)
};

struct SampledToken {
    int32_t id = 0;
    float logprob = 0.0f;
    std::vector<TokenChoice> top;  // the most likely tokens of the step, most likely first (when asked)
};

enum class FinishReason { kEos, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason reason);

struct EngineEvent {
    enum class Kind { kToken, kPrompt, kFinished };
    Kind kind = Kind::kToken;
    SampledToken token;                       // kToken: every sampled id, EOS included
    std::vector<SampledToken> prompt;         // kPrompt: each prompt id scored by the positions before it (the
                                              // first id has nothing before it: logprob NaN, no alternatives)
    FinishReason reason = FinishReason::kEos;  // kFinished
    std::string error;                        // kFinished with kError: a sentence for the client
    int64_t prompt_tokens = 0;
    int64_t cached_tokens = 0;  // prompt tokens taken from the prefix cache (known from the first token on)
};

struct EngineRequest {
    std::vector<int32_t> prompt;  // non-empty, ids in the vocabulary
    int64_t max_new_tokens = 1;   // >= 1, or 0 with prompt_logprobs (score the prompt only); prompt + max_new_tokens
                                  // <= max_context
    SamplingParams sampling;
    LogitAdjustments adjust;  // penalties and biases on the logits before each draw (not on the logprobs)
    // Structured output: which ids may come next (applied after `adjust`, not to the logprobs). Each request advances
    // its own copy, so one constraint may serve several requests (a request's choices). Its draws are made on the host.
    std::shared_ptr<const TokenConstraint> constraint;
    bool stop_at_eos = true;
    // More ids that end the reply as EOS does (vLLM's stop_token_ids; the id is delivered, as EOS is).
    std::vector<int32_t> stop_ids;
    // Before this many tokens, neither EOS (where it stops) nor stop_ids is drawn (vLLM's min_tokens): they are masked
    // from the draw (made on the host; the logprobs stay the model's own). <= max_new_tokens.
    int64_t min_new_tokens = 0;
    int logprobs = -1;  // -1: none; 0: the sampled token's; N > 0: and the N most likely
    // -1: none; N >= 0: every prompt id's logprob (and the N most likely ids at its place) in one kPrompt event, once
    // the prompt is computed, before any token. The prompt is then computed whole (never from the prefix cache: its
    // logits at every position are needed), with the logits of every position.
    int prompt_logprobs = -1;
    // Called on the engine thread for every event, in order, ending with one kFinished. Must be quick (hand the
    // event to another thread) and must not throw or call back into the engine except cancel().
    std::function<void(const EngineEvent&)> on_event;
};

class Engine {
  public:
    // The engine thread starts at once; `backend` must outlive the engine and is used by that thread only.
    Engine(Backend& backend, EngineOptions options);
    ~Engine();  // cancels every request (each gets its kFinished) and joins the thread
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Checks the request (throws dsv4::Error with a sentence for the client: empty prompt, an id outside the
    // vocabulary, a request that cannot fit the context, bad sampling parameters or adjustments) and queues it.
    // Returns its id.
    uint64_t submit(EngineRequest request);
    // From any thread: the request ends with kCancelled at the next step and its sequence is released, unless it
    // finished already.
    void cancel(uint64_t id);
    // Every queued and running request ends with kCancelled at the next step (the end of a drain).
    void cancel_all();

    struct Stats {
        int64_t running = 0, waiting = 0;
        int64_t prompt_tokens = 0;     // prompt tokens of finished and running requests, cached ones included
        int64_t cached_tokens = 0;     // of those, taken from the prefix cache
        int64_t generated_tokens = 0;  // sampled tokens
        int64_t backend_draws = 0;     // of those, drawn by the backend where the logits are (BatchItem::draw)
        int64_t prefix_queries = 0, prefix_hits = 0, prefix_entries = 0;
        int64_t steps = 0;
        int64_t requests_finished = 0;
        int64_t sequences_held = 0;  // running requests' and prefix-cache entries' sequences
        Backend::PoolUsage pool;     // after the last step
    };
    Stats stats() const;
    const ModelConfig& config() const { return backend_.config(); }
    // True when no request is queued or running.
    bool idle() const;

  private:
    struct Active;
    struct Batch;
    struct ToSample;
    void loop();
    // One step of continuous batching, in order: take_incoming, admit, plan_batch, run_batch, advance_prompts,
    // sample_and_deliver, end_step.
    void step();
    void take_incoming();
    void admit();
    Batch plan_batch();
    void run_batch(Batch& batch);
    std::vector<ToSample> advance_prompts(const Batch& batch);
    void sample_and_deliver(const std::vector<ToSample>& to_sample);
    void end_step();
    void finish(Active& a, FinishReason reason, const std::string& error = {});
    // With mutex_ held: the gauges of what is held (sequences, prefix entries) as they are now, so that a client
    // that heard its request end reads counters that no longer count it.
    void publish_holdings();
    // Any thread: a's own sampler. With `draw`, the draw the backend was asked for and could not make (its uniform
    // taken already).
    SampledToken sample(Active& a, const float* logits, const TokenDraw* draw) const;
    static bool before_min_tokens(const Active& a);
    const float* without_ends(const Active& a, const float* row, int64_t vocab, std::vector<float>& scratch) const;
    TokenDraw* ask_backend_draw(Active& a, std::vector<TokenDraw>& draws);  // null: drawn on the host
    void deliver(Active& a, const SampledToken& token);                     // the event; finishes a if done

    Backend& backend_;
    EngineOptions options_;
    PrefixCache cache_;
    ThreadPool sampling_pool_;
    bool backend_draws_;  // options_.backend_draws and the backend draws

    mutable std::mutex mutex_;  // guards incoming_, cancelled_, stats_, stop_
    std::condition_variable wake_;
    std::deque<std::unique_ptr<Active>> incoming_;
    std::unordered_set<uint64_t> cancelled_;
    Stats stats_;
    bool stop_ = false;
    bool cancel_all_ = false;
    uint64_t next_id_ = 1;

    std::deque<std::unique_ptr<Active>> waiting_;  // engine thread only
    std::vector<std::unique_ptr<Active>> running_;  // engine thread only
    std::vector<std::vector<float>> step_logits_;   // engine thread only: a step's logits, capacity kept across steps
    int64_t live_states_ = 0;                       // engine thread only: requests holding a backend sequence
    std::thread thread_;
};

// The logprob of `id` and the `top` most likely tokens under the softmax of the raw logits.
SampledToken token_logprobs(const float* logits, int64_t vocab, int32_t id, int top);

}  // namespace dsv4
