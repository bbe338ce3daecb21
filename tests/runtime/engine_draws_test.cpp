// The serving engine's draws (runtime/engine.h), on the CPU backend and the embedded trained model: the prompt's and
// the tokens' logprobs, draws made where the backend draws against the host sampler's, penalties and biases as
// defined, constrained draws keeping to their mask, a NaN draw ending only its request, stop ids and min_tokens.
#include "engine_test_support.h"

namespace dsv4 {
namespace {

using namespace engine_test;

TEST(Engine, PromptLogprobsScoreEveryIdAsTheWholePromptsForwardDoes) {
    // Each prompt id t > 0 is scored by the logits of position t - 1 of one forward over the whole prompt (bitwise,
    // whatever chunks the step budget cuts the prompt into), with its 3 most likely alternatives; the first id has
    // nothing before it. Then the tokens are those of the request alone. With max_new_tokens 0 nothing is generated.
    const std::vector<int32_t> prompt = prompt_of(45, 4);
    const int64_t V = model().config().vocab_size;
    SequenceState state = model().new_sequence();
    const std::vector<float> all = model().forward(state, prompt, true);
    for (int64_t budget : {7, 64}) {
        Engine engine(model(), options(budget, 4));
        Collector scored, only;
        EngineRequest r = greedy_request(prompt, 5, scored);
        r.prompt_logprobs = 3;
        engine.submit(std::move(r));
        EngineRequest o = greedy_request(prompt, 0, only);
        o.prompt_logprobs = 0;
        engine.submit(std::move(o));
        const Result got = scored.wait(), got_only = only.wait();
        ASSERT_EQ(got.prompt_events, 1);
        ASSERT_EQ(got.prompt.size(), prompt.size());
        EXPECT_EQ(got.prompt[0].id, prompt[0]);
        EXPECT_TRUE(std::isnan(got.prompt[0].logprob));
        EXPECT_TRUE(got.prompt[0].top.empty());
        for (size_t t = 1; t < prompt.size(); ++t) {
            const SampledToken want = token_logprobs(all.data() + (t - 1) * size_t(V), V, prompt[t], 3);
            EXPECT_EQ(got.prompt[t].id, prompt[t]);
            EXPECT_EQ(got.prompt[t].logprob, want.logprob) << "position " << t << ", budget " << budget;
            ASSERT_EQ(got.prompt[t].top.size(), 3u);
            for (size_t k = 0; k < 3; ++k) {
                EXPECT_EQ(got.prompt[t].top[k].id, want.top[k].id);
                EXPECT_EQ(got.prompt[t].top[k].logprob, want.top[k].logprob);
            }
        }
        const Result want = alone(prompt, 5);
        EXPECT_EQ(got.tokens, want.tokens);
        EXPECT_EQ(got.logprobs, want.logprobs);
        EXPECT_EQ(got.cached, 0) << "a scored prompt is computed whole";
        ASSERT_EQ(got_only.prompt.size(), prompt.size());
        EXPECT_EQ(got_only.prompt[9].logprob, got.prompt[9].logprob);
        EXPECT_TRUE(got_only.prompt[9].top.empty());
        EXPECT_TRUE(got_only.tokens.empty());
        EXPECT_EQ(got_only.reason, FinishReason::kLength);
        ASSERT_TRUE(becomes_idle(engine));
    }
}

TEST(Engine, LogprobsAreLogSoftmaxWithTheTopChoicesFirst) {
    const Backend& m = model();
    SequenceState state = model().new_sequence();
    const std::vector<float> logits = model().forward(state, prompt_of(12, 1), false);
    const int64_t V = m.config().vocab_size;
    const int32_t best = argmax(logits.data(), V);
    const SampledToken t = token_logprobs(logits.data(), V, best, 5);
    ASSERT_EQ(t.top.size(), 5u);
    EXPECT_EQ(t.top[0].id, best);
    EXPECT_EQ(t.top[0].logprob, t.logprob);
    double total = 0;
    for (int64_t i = 0; i < V; ++i) total += std::exp(double(token_logprobs(logits.data(), V, int32_t(i), 0).logprob));
    EXPECT_NEAR(total, 1.0, 1e-5);
    for (size_t i = 1; i < t.top.size(); ++i) EXPECT_GE(t.top[i - 1].logprob, t.top[i].logprob);
}

// Requests whose draws need no order of the vocabulary (greedy, temperature, min-p, top-k not below the vocabulary;
// no logprobs) are drawn where the backend draws, the others on the host; every request gets the tokens it gets
// with every draw on the host (its generator gives the same uniforms), with and without the prefix cache (which keeps
// a prompt's last logits, so a prompt's first token is then drawn on the host), and when the backend refuses the
// batch after the uniforms were taken.
TEST(Engine, DrawsWhereTheBackendDrawsGiveTheHostSamplersTokens) {
    const int64_t V = model().config().vocab_size;
    struct Case {
        SamplingParams sampling;
        int logprobs;
        bool drawn;  // by the backend
    };
    auto sampling = [](bool greedy, float temperature, float min_p, int64_t top_k, float top_p, uint64_t seed) {
        SamplingParams p;
        p.greedy = greedy, p.temperature = temperature, p.min_p = min_p, p.top_k = top_k, p.top_p = top_p;
        p.seed = seed;
        return p;
    };
    const std::vector<Case> cases = {
        {sampling(true, 1.0f, 0.0f, 0, 1.0f, 0), -1, true},       {sampling(true, 1.0f, 0.0f, 0, 1.0f, 0), 0, false},
        {sampling(false, 0.8f, 0.0f, 0, 1.0f, 7), -1, true},      {sampling(false, 1.3f, 0.05f, 0, 1.0f, 8), -1, true},
        {sampling(false, 1.0f, 0.0f, V, 1.0f, 9), -1, true},      {sampling(false, 0.9f, 0.0f, 5, 1.0f, 10), -1, false},
        {sampling(false, 1.0f, 0.0f, 0, 0.8f, 11), -1, false},    {sampling(false, 2.0f, 0.0f, 0, 1.0f, 12), 2, false},
    };
    constexpr int64_t kMaxNew = 9;
    for (const auto& [cache_entries, refuse] : {std::pair<int64_t, bool>{0, false}, {8, false}, {0, true}}) {
        {
            int64_t stats_draws = -1;
            auto run = [&](Backend& backend) {
                Engine engine(backend, options(7, cache_entries));
                std::vector<std::unique_ptr<Collector>> collectors;
                for (size_t i = 0; i < cases.size(); ++i) {
                    collectors.push_back(std::make_unique<Collector>());
                    EngineRequest r = greedy_request(prompt_of(6 + int64_t(i), int(i)), kMaxNew, *collectors.back());
                    r.sampling = cases[i].sampling;
                    r.logprobs = cases[i].logprobs;
                    r.stop_at_eos = false;
                    engine.submit(std::move(r));
                }
                std::vector<Result> results;
                for (auto& c : collectors) results.push_back(c->wait());
                EXPECT_TRUE(becomes_idle(engine));
                stats_draws = engine.stats().backend_draws;
                return results;
            };
            const std::vector<Result> want = run(model());
            DrawingBackend drawing(model());
            drawing.refuse_batches = refuse;
            const std::vector<Result> got = run(drawing);
            int64_t drawn = 0;
            for (size_t i = 0; i < cases.size(); ++i) {
                ASSERT_EQ(got[i].reason, FinishReason::kLength) << "request " << i << ": " << got[i].error;
                EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i << ", cache " << cache_entries;
                EXPECT_EQ(got[i].logprobs, want[i].logprobs) << "request " << i;
                // With the cache, a prompt's first token comes from its cached last logits, on the host.
                if (cases[i].drawn) drawn += kMaxNew - (cache_entries > 0 ? 1 : 0);
            }
            EXPECT_EQ(drawing.draws.load(), refuse ? 0 : drawn) << "cache " << cache_entries;
            EXPECT_EQ(stats_draws, drawing.draws.load()) << "the engine counts the backend's draws";
        }
    }
}

// Penalties and biases (runtime/logit_adjust.h) through the engine: each request's greedy tokens are those of the
// definition written out here on the same model alone (the bias, the repetition penalty once per id of the prompt
// or the output, then the output's frequency and presence penalties, every operation in float), whatever else
// runs beside it; the logprobs stay the model's own; a backend that draws is never asked to draw for them.
TEST(Engine, PenaltiesAndBiasesAsDefinedAndDrawnOnTheHost) {
    const int64_t V = model().config().vocab_size;
    auto adjust = [](float rep, float freq, float pres, std::vector<std::pair<int32_t, float>> bias) {
        LogitAdjustments a;
        a.repetition_penalty = rep, a.frequency_penalty = freq, a.presence_penalty = pres;
        a.logit_bias = std::move(bias);
        return a;
    };
    const std::vector<LogitAdjustments> cases = {
        adjust(1.3f, 0.0f, 0.0f, {}), adjust(1.0f, 1.5f, 0.0f, {}), adjust(1.0f, 0.0f, 2.0f, {}),
        adjust(0.7f, -0.5f, 0.3f, {{101, 4.0f}, {32, -100.0f}}), adjust(1.0f, 0.0f, 0.0f, {{101, 100.0f}})};
    constexpr int64_t kMaxNew = 10;
    // The definition, alone on the model: one token at a time, argmax of the adjusted logits.
    auto reference = [&](const std::vector<int32_t>& prompt, const LogitAdjustments& a) {
        Backend& m = model();
        SequenceState state = m.new_sequence();
        std::vector<float> logits = m.forward(state, prompt, false);
        std::vector<int32_t> out;
        while (int64_t(out.size()) < kMaxNew) {
            std::vector<float> l = logits;
            for (const auto& [id, bias] : a.logit_bias) l[size_t(id)] += bias;
            for (int64_t id = 0; id < V; ++id) {
                const bool seen = std::count(prompt.begin(), prompt.end(), id) + std::count(out.begin(), out.end(), id);
                if (seen && a.repetition_penalty != 1.0f)
                    l[size_t(id)] = l[size_t(id)] > 0 ? l[size_t(id)] / a.repetition_penalty
                                                      : l[size_t(id)] * a.repetition_penalty;
                const int64_t count = std::count(out.begin(), out.end(), id);
                if (count > 0)
                    l[size_t(id)] = (l[size_t(id)] - a.frequency_penalty * float(count)) - a.presence_penalty;
            }
            out.push_back(argmax(l.data(), V));
            logits = m.forward(state, std::span(&out.back(), 1), false);
        }
        return out;
    };
    DrawingBackend drawing(model());
    Engine engine(drawing, options(16, 0));
    std::vector<std::unique_ptr<Collector>> collectors;
    for (size_t i = 0; i < cases.size(); ++i) {
        collectors.push_back(std::make_unique<Collector>());
        EngineRequest r = greedy_request(prompt_of(12 + int64_t(i), int(i)), kMaxNew, *collectors.back());
        r.adjust = cases[i];
        r.logprobs = -1;
        r.stop_at_eos = false;
        engine.submit(std::move(r));
    }
    for (size_t i = 0; i < cases.size(); ++i) {
        const Result got = collectors[i]->wait();
        ASSERT_EQ(got.reason, FinishReason::kLength) << got.error;
        EXPECT_EQ(got.tokens, reference(prompt_of(12 + int64_t(i), int(i)), cases[i])) << "case " << i;
    }
    EXPECT_EQ(std::vector<int32_t>(size_t(kMaxNew), 101), collectors.back()->wait().tokens) << "a +100 bias wins";
    EXPECT_EQ(drawing.draws.load(), 0) << "adjusted requests draw on the host";
    // Logprobs are the model's: a +100 bias picks token 101, whose reported logprob is its logprob under the
    // model's own logits (not ~0, as under the biased ones).
    Collector biased;
    EngineRequest b = greedy_request(prompt_of(9, 3), 1, biased);  // logprobs 0
    b.adjust = adjust(1.0f, 0.0f, 0.0f, {{101, 100.0f}});
    engine.submit(std::move(b));
    const Result br = biased.wait();
    SequenceState state = model().new_sequence();
    const std::vector<float> raw = model().forward(state, prompt_of(9, 3), false);
    ASSERT_EQ(br.tokens, std::vector<int32_t>{101});
    EXPECT_EQ(br.logprobs, std::vector<float>{token_logprobs(raw.data(), V, 101, 0).logprob});
    EngineRequest bad = greedy_request(prompt_of(4, 1), 1, biased);
    bad.adjust = adjust(1.0f, 3.0f, 0.0f, {});
    EXPECT_THROW(engine.submit(std::move(bad)), Error);
}

// A constraint of this test's own (structured/ has the real ones): ids of a set, never the id drawn just before, so
// its state must follow the draws.
class SetWithoutRepeats final : public TokenConstraint {
  public:
    explicit SetWithoutRepeats(std::vector<int32_t> ids) : ids_(std::move(ids)) {}
    std::unique_ptr<TokenConstraint> clone() const override { return std::make_unique<SetWithoutRepeats>(*this); }
    bool mask(float* logits, int64_t vocab) const override {
        bool any = false;
        for (int64_t id = 0; id < vocab; ++id) {
            if (allows(int32_t(id)))
                any = any || !std::isinf(logits[id]);
            else
                logits[id] = -std::numeric_limits<float>::infinity();
        }
        return any;
    }
    void advance(int32_t id) override {
        EXPECT_TRUE(allows(id)) << "drew " << id << " after " << last_;
        last_ = id;
    }
    bool allows(int32_t id) const { return id != last_ && std::find(ids_.begin(), ids_.end(), id) != ids_.end(); }

  private:
    std::vector<int32_t> ids_;
    int32_t last_ = -1;
};

// EngineRequest::constraint: greedy draws are the argmax of the masked logits, one at a time on the model alone;
// sampled ones keep to the mask too; all are made on the host, each request advancing its own copy; a constraint
// that leaves nothing ends its request with an error and the engine serves the next.
TEST(Engine, ConstrainedDrawsKeepToTheirMask) {
    const int64_t V = model().config().vocab_size;
    const auto constraint =
        std::make_shared<const SetWithoutRepeats>(std::vector<int32_t>{'a', 'e', 'o', ' ', 's', 't', 'n'});
    constexpr int64_t kMaxNew = 12;
    const std::vector<int32_t> prompt = prompt_of(14, 2);
    std::vector<int32_t> want;  // the definition, on the model alone
    {
        SequenceState state = model().new_sequence();
        std::vector<float> logits = model().forward(state, prompt, false);
        auto c = constraint->clone();
        while (int64_t(want.size()) < kMaxNew) {
            ASSERT_TRUE(c->mask(logits.data(), V));
            want.push_back(argmax(logits.data(), V));
            c->advance(want.back());
            logits = model().forward(state, std::span(&want.back(), 1), false);
        }
    }
    DrawingBackend drawing(model());
    Engine engine(drawing, options(16, 0));
    std::vector<std::unique_ptr<Collector>> collectors;
    for (int i = 0; i < 4; ++i) {
        collectors.push_back(std::make_unique<Collector>());
        EngineRequest r = greedy_request(prompt, kMaxNew, *collectors.back());
        r.logprobs = -1;
        r.constraint = constraint;
        if (i > 0) r.sampling.greedy = false, r.sampling.temperature = 1.5f, r.sampling.seed = uint64_t(i);
        engine.submit(std::move(r));
    }
    for (int i = 0; i < 4; ++i) {
        const Result got = collectors[size_t(i)]->wait();
        ASSERT_EQ(got.reason, FinishReason::kLength) << got.error;
        if (i == 0) {
            EXPECT_EQ(got.tokens, want);
        }
        SetWithoutRepeats check = *constraint;
        for (const int32_t id : got.tokens) check.advance(id);
    }
    EXPECT_EQ(drawing.draws.load(), 0) << "constrained requests draw on the host";

    Collector stuck, next;
    EngineRequest r = greedy_request(prompt, 4, stuck);
    r.constraint = std::make_shared<const SetWithoutRepeats>(std::vector<int32_t>{});
    engine.submit(std::move(r));
    const Result failed = stuck.wait();
    EXPECT_EQ(failed.reason, FinishReason::kError);
    EXPECT_NE(failed.error.find("no token"), std::string::npos) << failed.error;
    engine.submit(greedy_request(prompt, 2, next));
    EXPECT_EQ(next.wait().reason, FinishReason::kLength);
}

// A draw the backend reports as NaN logits ends that request with an error; the engine serves the next one.
TEST(Engine, ABackendDrawOfNaNLogitsEndsThatRequestOnly) {
    DrawingBackend drawing(model());
    drawing.nan_draw = 3;
    Engine engine(drawing, options(64, 0));
    Collector first, second;
    EngineRequest r = greedy_request(prompt_of(10, 1), 8, first);
    r.logprobs = -1;
    r.stop_at_eos = false;
    engine.submit(std::move(r));
    const Result failed = first.wait();
    EXPECT_EQ(failed.reason, FinishReason::kError);
    EXPECT_NE(failed.error.find("NaN"), std::string::npos) << failed.error;
    EXPECT_EQ(failed.tokens.size(), 3u);
    EngineRequest next = greedy_request(prompt_of(10, 1), 8, second);
    next.logprobs = -1;
    next.stop_at_eos = false;
    engine.submit(std::move(next));
    const Result ok = second.wait();
    EXPECT_EQ(ok.reason, FinishReason::kLength);
    ASSERT_EQ(ok.tokens.size(), 8u);
    EXPECT_EQ(failed.tokens, std::vector<int32_t>(ok.tokens.begin(), ok.tokens.begin() + 3)) << "the same greedy draws";
}

// vLLM's stop_token_ids and min_tokens: a stop id ends the reply as EOS does (delivered, reason kEos); before
// min_new_tokens neither EOS nor a stop id is drawn (greedy: the argmax without them, written out here on the model
// alone), and those draws are made on the host (a backend that draws is asked only after); the logprobs stay the
// model's own.
TEST(Engine, StopIdsEndTheReplyAndMinTokensHoldsThemBack) {
    const int64_t V = model().config().vocab_size;
    const int32_t eos = int32_t(model().config().eos_token_id);
    const std::vector<int32_t> prompt = prompt_of(12, 3);
    const auto reference = [&](const std::vector<int32_t>& stops, int64_t min_new, int64_t max_new) {
        SequenceState state = model().new_sequence();
        std::vector<float> logits = model().forward(state, prompt, false);
        Result r;
        while (true) {
            std::vector<float> row = logits;
            if (int64_t(r.tokens.size()) < min_new) {
                row[size_t(eos)] = -std::numeric_limits<float>::infinity();
                for (const int32_t id : stops) row[size_t(id)] = -std::numeric_limits<float>::infinity();
            }
            const int32_t id = argmax(row.data(), V);
            r.tokens.push_back(id);
            r.logprobs.push_back(token_logprobs(logits.data(), V, id, 0).logprob);
            if (id == eos || std::find(stops.begin(), stops.end(), id) != stops.end())
                return r.reason = FinishReason::kEos, r;
            if (int64_t(r.tokens.size()) == max_new) return r.reason = FinishReason::kLength, r;
            logits = model().forward(state, std::span(&id, 1), false);
        }
    };
    const Result free = reference({}, 0, 12);
    ASSERT_GE(free.tokens.size(), 4u);
    const std::vector<int32_t> stops = {free.tokens[2], free.tokens[3]};
    DrawingBackend drawing(model());
    Engine engine(drawing, options(64, 0));
    for (const int64_t min_new : {int64_t(0), int64_t(2), int64_t(6)}) {
        const Result want = reference(stops, min_new, 12);
        if (min_new == 0) {  // the free reply, up to its first stop id
            const auto first = std::find_first_of(free.tokens.begin(), free.tokens.end(), stops.begin(), stops.end());
            EXPECT_EQ(want.tokens, std::vector<int32_t>(free.tokens.begin(), first + 1));
        }
        for (const int logprobs : {0, -1}) {  // with logprobs every draw is the host's; without, the backend's may be
            Collector c;
            EngineRequest r = greedy_request(prompt, 12, c);
            r.stop_ids = stops;
            r.min_new_tokens = min_new;
            r.logprobs = logprobs;
            const int64_t draws_before = drawing.draws.load();
            engine.submit(std::move(r));
            const Result got = c.wait();
            EXPECT_EQ(got.reason, want.reason) << "min " << min_new;
            EXPECT_EQ(got.tokens, want.tokens) << "min " << min_new;
            if (logprobs == 0) {
                EXPECT_EQ(got.logprobs, want.logprobs) << "min " << min_new;
            } else {  // the first token is the prompt's (drawn by the backend when it may), then one per step
                const int64_t backend = drawing.draws.load() - draws_before;
                EXPECT_EQ(backend, int64_t(got.tokens.size()) - std::min<int64_t>(min_new, int64_t(got.tokens.size())))
                    << "min " << min_new << ": the draws before min_tokens are the host's";
            }
        }
    }
    Collector bad;
    EngineRequest r = greedy_request(prompt, 4, bad);
    r.min_new_tokens = 5;
    EXPECT_THROW(engine.submit(std::move(r)), Error);
    EngineRequest r2 = greedy_request(prompt, 4, bad);
    r2.stop_ids = {int32_t(V)};
    EXPECT_THROW(engine.submit(std::move(r2)), Error);
}

}  // namespace
}  // namespace dsv4
