// Engine: see engine.h. One step: take in new requests and cancellations, admit waiting requests while there are
// free places (each starts from a copy of its longest cached prefix, or a fresh sequence), build one batch (every
// decode, then prompt chunks within the token budget), run it, sample, finish what is done.
#include "runtime/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>

#include "core/error.h"
#include "runtime/sampling_weights.h"
#include "runtime/token_order.h"

namespace dsv4 {

const char* finish_reason_name(FinishReason reason) {
    switch (reason) {
        case FinishReason::kEos: return "eos";
        case FinishReason::kLength: return "length";
        case FinishReason::kCancelled: return "cancelled";
        case FinishReason::kError: return "error";
    }
    return "?";
}

SampledToken token_logprobs(const float* logits, int64_t vocab, int32_t id, int top) {
    // The softmax's normalizer from the sampler's vectorized weights (e^(l - max), within 4e-7 relative), summed in
    // double: the logprobs are within ~4e-7 of exact, below what their float holds near 1.
    const double max_logit = logits[scan_logits(logits, vocab).argmax];
    thread_local std::vector<float> weights;
    weights.resize(size_t(vocab));
    sampling_weights(logits, vocab, float(max_logit), 1.0f, weights.data());
    const double total = sum_of_weights(weights.data(), vocab);
    const double log_total = max_logit + std::log(total);
    SampledToken t;
    t.id = id;
    t.logprob = float(double(logits[id]) - log_total);
    if (top > 0) {
        thread_local TokenOrderScratch scratch;
        thread_local std::vector<int32_t> ids;
        most_likely(logits, vocab, std::min<int64_t>(top, vocab), ids, scratch);
        for (const int32_t choice : ids) t.top.push_back({choice, float(double(logits[choice]) - log_total)});
    }
    return t;
}

struct Engine::Active {
    uint64_t id = 0;
    EngineRequest request;
    Sampler sampler;
    TokenHistory history;  // the ids the penalties look at (nothing when the request has none)
    std::unique_ptr<TokenConstraint> constraint;  // the request's own copy of its constraint (none: null)
    std::optional<SequenceState> state;
    int64_t fed = 0;     // prompt ids the state has consumed
    int64_t cached = 0;  // of those, from the prefix cache
    std::vector<int32_t> generated;
    std::vector<float> ready_logits;  // the prompt's last logits from the cache: sample without a forward
    std::vector<SampledToken> prompt_scores;  // prompt_logprobs: the prompt ids scored so far
    bool cancelled = false;
    bool admitted = false;  // counted in Stats::running

    Active(uint64_t id, EngineRequest r)
        : id(id),
          request(std::move(r)),
          sampler(request.sampling),
          history(request.adjust, request.prompt),
          constraint(request.constraint ? request.constraint->clone() : nullptr) {}
    int64_t prompt_size() const { return int64_t(request.prompt.size()); }
    bool decoding() const { return fed == prompt_size(); }
};

Engine::Engine(Backend& backend, EngineOptions options)
    : backend_(backend),
      options_(options),
      cache_(options.prefix_cache_entries),
      sampling_pool_(int(std::min<int64_t>(options.max_running, std::max(1u, std::thread::hardware_concurrency())))),
      backend_draws_(options.backend_draws && backend.draws_tokens()) {
    DSV4_CHECK(options_.max_context > 0, "the engine needs a context length");
    DSV4_CHECK(options_.max_running >= 1, "the engine needs room for at least one running request");
    DSV4_CHECK(options_.step_tokens > options_.max_running,
               "a step's token budget ({}) must exceed the running requests ({}) so prompts always progress",
               options_.step_tokens, options_.max_running);
    thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

uint64_t Engine::submit(EngineRequest request) {
    const ModelConfig& c = backend_.config();
    const int64_t n = int64_t(request.prompt.size());
    DSV4_CHECK(n > 0, "the prompt is empty");
    for (int32_t id : request.prompt)
        DSV4_CHECK(id >= 0 && id < c.vocab_size, "token id {} is outside the vocabulary [0, {})", id, c.vocab_size);
    DSV4_CHECK(request.max_new_tokens >= 1 || (request.max_new_tokens == 0 && request.prompt_logprobs >= 0),
               "at least one token must be generated (max_tokens >= 1), unless the prompt is only scored");
    DSV4_CHECK(n + request.max_new_tokens <= options_.max_context,
               "this model's context is {} tokens; the prompt has {} and {} more were asked for ({} in all): shorten "
               "the prompt or ask for fewer tokens",
               options_.max_context, n, request.max_new_tokens, n + request.max_new_tokens);
    validate_sampling(request.sampling);
    validate_adjustments(request.adjust, c.vocab_size);
    for (int32_t id : request.stop_ids)
        DSV4_CHECK(id >= 0 && id < c.vocab_size, "stop token id {} is outside the vocabulary [0, {})", id,
                   c.vocab_size);
    DSV4_CHECK(request.min_new_tokens >= 0 && request.min_new_tokens <= request.max_new_tokens,
               "min_tokens ({}) must be between 0 and max_tokens ({})", request.min_new_tokens, request.max_new_tokens);
    std::lock_guard lock(mutex_);
    DSV4_CHECK(!stop_, "the engine is shutting down");
    const uint64_t id = next_id_++;
    incoming_.push_back(std::make_unique<Active>(id, std::move(request)));
    wake_.notify_all();
    return id;
}

void Engine::cancel(uint64_t id) {
    std::lock_guard lock(mutex_);
    cancelled_.insert(id);
    wake_.notify_all();
}

void Engine::cancel_all() {
    std::lock_guard lock(mutex_);
    cancel_all_ = true;
    wake_.notify_all();
}

Engine::Stats Engine::stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
}

bool Engine::idle() const {
    std::lock_guard lock(mutex_);
    return stats_.running == 0 && stats_.waiting == 0 && incoming_.empty();
}

void Engine::loop() {
    while (true) {
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] {
                return stop_ || cancel_all_ || !incoming_.empty() || !running_.empty() || !waiting_.empty() ||
                       !cancelled_.empty();
            });
            if (stop_) break;
        }
        step();
    }
    // Shutting down: every request still here ends cancelled.
    std::deque<std::unique_ptr<Active>> rest;
    {
        std::lock_guard lock(mutex_);
        rest.swap(incoming_);
    }
    for (auto& a : rest) finish(*a, FinishReason::kCancelled);
    for (auto& a : waiting_) finish(*a, FinishReason::kCancelled);
    for (auto& a : running_) finish(*a, FinishReason::kCancelled);
    waiting_.clear();
    running_.clear();
}

void Engine::finish(Active& a, FinishReason reason, const std::string& error) {
    // A sequence that finished normally has consumed the prompt and every sampled id but the last: keep it for a
    // later request that extends it (the next turn of a conversation).
    if ((reason == FinishReason::kEos || reason == FinishReason::kLength) && a.state && cache_.enabled()) {
        std::vector<int32_t> ids = a.request.prompt;
        if (!a.generated.empty()) ids.insert(ids.end(), a.generated.begin(), a.generated.end() - 1);
        if (int64_t(ids.size()) == a.state->position) cache_.insert(backend_, std::move(ids), std::move(*a.state), {});
    }
    if (a.state) a.state.reset(), --live_states_;
    {
        // Counted out before the client hears of it: once it has its reply, /metrics no longer shows it running
        // nor its sequence held (unless the prefix cache kept it).
        std::lock_guard lock(mutex_);
        ++stats_.requests_finished;
        if (a.admitted) --stats_.running, a.admitted = false;
        publish_holdings();
    }
    EngineEvent e;
    e.kind = EngineEvent::Kind::kFinished;
    e.reason = reason;
    e.error = error;
    e.prompt_tokens = a.prompt_size();
    e.cached_tokens = a.cached;
    a.request.on_event(e);
}

SampledToken Engine::sample(Active& a, const float* logits, const TokenDraw* draw) const {
    const int64_t V = backend_.config().vocab_size;
    thread_local std::vector<float> adjusted;  // the draw from the adjusted logits; the logprobs from the model's own
    const float* row = a.history.row_for_draw(a.request.adjust, logits, V, adjusted);
    if (before_min_tokens(a)) row = without_ends(a, row, V, adjusted);
    if (a.constraint) row = masked_row(*a.constraint, row, V, adjusted);
    const int32_t id = draw ? a.sampler.sample(row, V, draw->u) : a.sampler.sample(row, V);
    if (a.constraint) a.constraint->advance(id);
    if (a.request.logprobs >= 0) return token_logprobs(logits, V, id, a.request.logprobs);
    SampledToken t;
    t.id = id;
    return t;
}

bool Engine::before_min_tokens(const Active& a) {
    return int64_t(a.generated.size()) < a.request.min_new_tokens;
}

// `row` without the ids that end the reply (EOS where it stops, the stop ids): a copy in `scratch` (or scratch itself).
const float* Engine::without_ends(const Active& a, const float* row, int64_t vocab, std::vector<float>& scratch) const {
    if (row != scratch.data()) scratch.assign(row, row + vocab);
    constexpr float kNever = -std::numeric_limits<float>::infinity();
    if (a.request.stop_at_eos) scratch[size_t(backend_.config().eos_token_id)] = kNever;
    for (const int32_t id : a.request.stop_ids) scratch[size_t(id)] = kNever;
    return scratch.data();
}

// The draw of a's next token, for the backend to make (appended to `draws`, reserved for every running request so
// that the pointers stay), where it can, the draw needs no order of the vocabulary and the logits no adjustment; the
// uniform is taken from a's generator now, as the host sampler would take it.
TokenDraw* Engine::ask_backend_draw(Active& a, std::vector<TokenDraw>& draws) {
    const SamplingParams& p = a.request.sampling;
    const int64_t V = backend_.config().vocab_size;
    const bool ordered = !p.greedy && (p.top_p < 1.0f || (p.top_k > 0 && p.top_k < V));
    if (!backend_draws_ || ordered || a.request.logprobs >= 0 || a.request.adjust.any() || a.constraint ||
        before_min_tokens(a))
        return nullptr;
    DSV4_CHECK(draws.size() < draws.capacity(), "engine: more draws than running requests");
    TokenDraw& d = draws.emplace_back();
    d.greedy = p.greedy;
    d.temperature = p.temperature;
    d.min_p = p.min_p;
    d.u = p.greedy ? 0.0 : a.sampler.next_uniform();
    return &d;
}

void Engine::deliver(Active& a, const SampledToken& token) {
    EngineEvent e;
    e.token = token;
    e.prompt_tokens = a.prompt_size();
    e.cached_tokens = a.cached;
    a.generated.push_back(token.id);
    a.history.add_output(token.id);
    a.request.on_event(e);
    {
        std::lock_guard lock(mutex_);
        ++stats_.generated_tokens;
    }
    const bool eos =
        (token.id == backend_.config().eos_token_id && a.request.stop_at_eos) ||
        std::find(a.request.stop_ids.begin(), a.request.stop_ids.end(), token.id) != a.request.stop_ids.end();
    if (eos)
        finish(a, FinishReason::kEos);
    else if (int64_t(a.generated.size()) >= a.request.max_new_tokens)
        finish(a, FinishReason::kLength);
}

// Waiting requests take free places in arrival order. A request whose sequence does not fit the backend waits,
// after the prefix cache has given up what it can; if nothing runs and it still does not fit, it never will.
void Engine::admit() {
    while (!waiting_.empty() && int64_t(running_.size()) < options_.max_running) {
        Active& a = *waiting_.front();
        const bool scored = a.request.prompt_logprobs >= 0;  // needs every position's logits: no cached prefix
        if (!scored) {
            std::lock_guard lock(mutex_);
            ++stats_.prefix_queries;
        }
        if (auto hit = scored ? std::nullopt : cache_.find(backend_, a.request.prompt)) {
            a.state = std::move(hit->state);
            ++live_states_;
            a.fed = a.cached = hit->tokens;
            a.ready_logits = std::move(hit->logits);
            std::lock_guard lock(mutex_);
            ++stats_.prefix_hits;
            stats_.cached_tokens += a.cached;
        } else {
            while (!a.state) {
                try {
                    a.state = backend_.new_sequence();
                    ++live_states_;
                } catch (const Error& e) {
                    if (cache_.evict_one()) continue;
                    if (running_.empty()) {
                        finish(a, FinishReason::kError, e.what());
                        waiting_.pop_front();
                    }
                    return;
                }
            }
        }
        {
            std::lock_guard lock(mutex_);
            stats_.prompt_tokens += a.prompt_size();
            ++stats_.running;
            --stats_.waiting;
            a.admitted = true;
            publish_holdings();
        }
        running_.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
    }
}

// One step's batch: the items the backend runs and whose they are, the requests whose whole prompt came from the
// cache with its logits (sampled without a forward), and the draws asked of the backend.
struct Engine::Batch {
    std::vector<BatchItem> items;
    std::vector<Active*> owners;  // per item
    std::vector<Active*> ready;
    std::vector<TokenDraw> draws;  // reserved for every running request: the items point into it (a move keeps it)
    bool backend_drew = true;      // the items' draws made (else their logits are here, to draw on the host)
};

// A request with a token to sample: from its logits on the host (with `draw`: the draw the backend could not make,
// its uniform taken), or the id the backend drew (logits null).
struct Engine::ToSample {
    Active* a;
    const float* logits;
    const TokenDraw* draw;
};

void Engine::step() {
    take_incoming();
    admit();
    Batch batch = plan_batch();
    run_batch(batch);
    std::vector<ToSample> to_sample = advance_prompts(batch);
    sample_and_deliver(to_sample);
    end_step();
}

// New requests and cancellations; the cancelled ones end now.
void Engine::take_incoming() {
    {
        std::lock_guard lock(mutex_);
        while (!incoming_.empty()) {
            waiting_.push_back(std::move(incoming_.front()));
            incoming_.pop_front();
        }
        stats_.waiting = int64_t(waiting_.size());
        for (auto& a : waiting_) a->cancelled |= cancelled_.erase(a->id) > 0 || cancel_all_;
        for (auto& a : running_) a->cancelled |= cancelled_.erase(a->id) > 0 || cancel_all_;
        cancelled_.clear();  // ids of requests that have finished already
        cancel_all_ = false;
    }
    auto drop_cancelled = [&](auto& list) {
        for (auto& a : list)
            if (a->cancelled) finish(*a, FinishReason::kCancelled);
        std::erase_if(list, [](const auto& a) { return a->cancelled; });
    };
    drop_cancelled(waiting_);
    drop_cancelled(running_);
}

// The batch: decodes (one token each), then prompt chunks while the budget lasts (prefill_step_tokens' longer one
// when no running request waits for a token). A chunk ends at a multiple of snapshot_interval when it crosses one,
// so the prompt's state there can be cached. Where the backend draws, a decode's token and a prompt's first are
// drawn there (not a prompt's first when its last logits are cached with it).
Engine::Batch Engine::plan_batch() {
    Batch b;
    b.draws.reserve(running_.size());
    const bool someone_waits =
        std::ranges::any_of(running_, [](const auto& a) { return !a->ready_logits.empty() || a->decoding(); });
    int64_t budget =
        someone_waits ? options_.step_tokens : std::max(options_.step_tokens, options_.prefill_step_tokens);
    for (auto& a : running_)
        if (!a->ready_logits.empty())
            b.ready.push_back(a.get());
        else if (a->decoding()) {
            b.items.push_back({&*a->state, std::span(&a->generated.back(), 1), false, ask_backend_draw(*a, b.draws)});
            b.owners.push_back(a.get());
            --budget;
        }
    for (auto& a : running_) {
        if (a->decoding() || budget <= 0) continue;
        int64_t end = std::min(a->prompt_size(), a->fed + budget);
        const int64_t k = options_.snapshot_interval;
        if (k > 0 && cache_.enabled() && end / k * k > a->fed) end = end / k * k;
        const bool scored = a->request.prompt_logprobs >= 0;
        const bool first_token =
            end == a->prompt_size() && !scored && !cache_.enabled() && a->request.max_new_tokens > 0;
        b.items.push_back({&*a->state, std::span(a->request.prompt).subspan(size_t(a->fed), size_t(end - a->fed)),
                           scored, first_token ? ask_backend_draw(*a, b.draws) : nullptr});
        b.owners.push_back(a.get());
        budget -= end - a->fed;
    }
    return b;
}

// One forward of the batch into step_logits_. A batch refused before it ran (e.g. a full GPU pool) is run an item
// at a time, so one request's failure does not end the others (their draws then made on the host).
void Engine::run_batch(Batch& b) {
    std::vector<std::vector<float>>& logits = step_logits_;  // [0, items.size()) are this step's
    if (!b.items.empty()) {
        try {
            backend_.forward_batch_into(b.items, logits);
        } catch (const Error&) {
            b.backend_drew = false;
            if (logits.size() < b.items.size()) logits.resize(b.items.size());
            for (size_t i = 0; i < b.items.size(); ++i) logits[i].clear();
            for (size_t i = 0; i < b.items.size(); ++i) {
                try {
                    logits[i] = backend_.forward(*b.items[i].state, b.items[i].ids, b.items[i].all_logits);
                } catch (const Error& e) {
                    b.owners[i]->cancelled = true;
                    finish(*b.owners[i], FinishReason::kError, e.what());
                }
            }
        }
    }
    std::lock_guard lock(mutex_);
    ++stats_.steps;
}

// After the forward: prompts advance (scored with prompt_logprobs; cached every snapshot_interval tokens and at
// their end, with their last logits); returns the requests with a token to sample: whole prompts from the cache,
// finished prompts and decodes (a prompt computed with the logits of every position samples from its last row).
std::vector<Engine::ToSample> Engine::advance_prompts(const Batch& b) {
    const int64_t V = backend_.config().vocab_size;
    const std::vector<std::vector<float>>& logits = step_logits_;
    std::vector<ToSample> to_sample;
    for (Active* a : b.ready) to_sample.push_back({a, a->ready_logits.data(), nullptr});
    struct Score {
        Active* a;
        int32_t id;
        const float* row;  // the logits of the position before the id
    };
    std::vector<Score> scores;
    std::vector<Active*> scored_prompts;  // prompts scored to their end in this step
    for (size_t i = 0; i < b.items.size(); ++i) {
        Active& a = *b.owners[i];
        if (a.cancelled) continue;  // failed in run_batch
        const BatchItem& item = b.items[i];
        const int64_t rows = item.all_logits ? int64_t(item.ids.size()) : 1;
        const float* last = item.draw && b.backend_drew ? nullptr : logits[i].data() + (rows - 1) * V;
        if (!a.decoding()) {
            const int64_t first = a.fed;
            a.fed += int64_t(item.ids.size());
            if (item.all_logits) {
                if (first == 0) {  // nothing before the first id to score it
                    SampledToken t;
                    t.id = a.request.prompt[0];
                    t.logprob = std::numeric_limits<float>::quiet_NaN();
                    a.prompt_scores.push_back(t);
                }
                for (int64_t j = 0; j < rows && first + j + 1 < a.prompt_size(); ++j)
                    scores.push_back({&a, a.request.prompt[size_t(first + j + 1)], logits[i].data() + j * V});
                if (a.decoding()) scored_prompts.push_back(&a);
            }
            const int64_t k = options_.snapshot_interval;
            if (cache_.enabled() && ((k > 0 && a.fed % k == 0) || a.decoding())) {
                try {
                    cache_.insert(backend_, {a.request.prompt.begin(), a.request.prompt.begin() + a.fed},
                                  backend_.copy_sequence(*a.state),
                                  a.decoding() ? std::vector<float>(last, last + V) : std::vector<float>{});
                } catch (const Error&) {  // no room for a copy: the cache is an optimisation only
                }
            }
            if (!a.decoding()) continue;  // more of the prompt to come
        }
        to_sample.push_back({&a, last, item.draw});
    }
    // Prompt ids' logprobs (each a pass over the vocabulary), in parallel; in order into each request's list. A
    // prompt scored to its end gets them in one event; one that asked for no tokens ends there.
    std::vector<SampledToken> scored(scores.size());
    sampling_pool_.parallel_for(int64_t(scores.size()), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const Score& s = scores[size_t(i)];
            scored[size_t(i)] = token_logprobs(s.row, V, s.id, s.a->request.prompt_logprobs);
        }
    });
    for (size_t i = 0; i < scores.size(); ++i) scores[i].a->prompt_scores.push_back(std::move(scored[i]));
    for (Active* a : scored_prompts) {
        EngineEvent e;
        e.kind = EngineEvent::Kind::kPrompt;
        e.prompt = std::move(a->prompt_scores);
        e.prompt_tokens = a->prompt_size();
        a->request.on_event(e);
        if (a->request.max_new_tokens == 0) finish(*a, FinishReason::kLength);
    }
    std::erase_if(to_sample, [](const ToSample& s) { return !s.a->state; });  // finished just above
    return to_sample;
}

// Sampling scans the vocabulary per request (129k logits for V4): in parallel, each request with its own sampler,
// so the tokens are the same as one after another. Then the events, in batch order. A row the model made NaN ends
// its request with an error (the host sampler refuses it; the backend's draw gives -1).
void Engine::sample_and_deliver(const std::vector<ToSample>& to_sample) {
    std::vector<SampledToken> tokens(to_sample.size());
    std::vector<std::string> errors(to_sample.size());
    sampling_pool_.parallel_for(int64_t(to_sample.size()), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const ToSample& s = to_sample[size_t(i)];
            try {
                if (s.logits)
                    tokens[size_t(i)] = sample(*s.a, s.logits, s.draw);
                else if (s.draw->id >= 0)
                    tokens[size_t(i)].id = s.draw->id;
                else
                    fail("the model produced a NaN logit: refusing to sample");
            } catch (const Error& e) {
                errors[size_t(i)] = e.what();
            }
        }
    });
    {  // counted before the events: a caller that saw its last one and then the engine idle reads them all
        int64_t backend_draws = 0;
        for (size_t i = 0; i < to_sample.size(); ++i) backend_draws += errors[i].empty() && !to_sample[i].logits;
        std::lock_guard lock(mutex_);
        stats_.backend_draws += backend_draws;
    }
    for (size_t i = 0; i < to_sample.size(); ++i) {
        Active& a = *to_sample[i].a;
        a.ready_logits.clear();
        if (!errors[i].empty())
            finish(a, FinishReason::kError, errors[i]);
        else
            deliver(a, tokens[i]);
    }
}

// Whatever finished (its on_event saw kFinished and its state is gone) leaves the running list; the stats.
void Engine::end_step() {
    std::erase_if(running_, [](const auto& a) { return a->cancelled || !a->state; });
    const Backend::PoolUsage pool = backend_.pool_usage();
    std::lock_guard lock(mutex_);
    stats_.pool = pool;
    stats_.running = int64_t(running_.size());
    stats_.waiting = int64_t(waiting_.size() + incoming_.size());
    publish_holdings();
}

void Engine::publish_holdings() {
    stats_.sequences_held = live_states_ + cache_.entries();
    stats_.prefix_entries = cache_.entries();
}

}  // namespace dsv4
