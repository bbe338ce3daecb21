// Holding a backend to DeepSeek's reference on a fixture that records the reference's own one-ulp sensitivity
// (tests/fixtures/official-trained-bytes, made by tools/fixtures/make_trained_fixture.py): the reference run
// (prefill, then 16 greedy decode steps) and P reruns of it, each with 1 % of the embedding entries moved by one
// bf16 ulp, teacher-forced on the same tokens. Their distance from the reference is what ulp-level noise alone does to
// this model; a faithful engine must stay inside it (docs/numerics.md, "The trained fixture"):
//   * every step: cosine to the reference >= the smallest cosine of the perturbed reruns at that step;
//   * the whole run: sum over steps of (1 - cosine) below that of every perturbed rerun;
//   * the greedy tokens: identical at every step.
// Used by tests/model/trained_reference_test.cpp (CPU) and tests/gpu/cuda_trained_reference_test.cpp (GPU).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "model/backend.h"
#include "model/golden_io.h"
#include "runtime/sampler.h"

namespace dsv4::testing {

struct ReferenceRun {
    std::vector<int32_t> prompt;
    std::vector<int64_t> greedy;     // [steps - 1]: greedy[i] = argmax of step i
    std::vector<float> logits;       // [steps, vocab]: step 0 = prefill, step i + 1 = after feeding greedy[i]
    std::vector<float> perturbed;    // [perturbations, steps, vocab]
    int64_t vocab = 0, steps = 0, perturbations = 0;

    const float* step(int64_t s) const { return logits.data() + s * vocab; }
    const float* perturbed_step(int64_t p, int64_t s) const {
        return perturbed.data() + (p * steps + s) * vocab;
    }
};

inline ReferenceRun load_reference_run(const std::string& dir) {
    Golden golden(dir + "/golden.safetensors");
    ReferenceRun r;
    r.prompt = to_ids(golden.ints("input_ids"));
    r.greedy = golden.ints("greedy_tokens");
    std::vector<float> prefill = golden.floats("prefill_last_logits");
    std::vector<float> decode = golden.floats("decode_logits");
    r.vocab = int64_t(prefill.size());
    r.steps = 1 + int64_t(decode.size()) / r.vocab;
    r.logits = prefill;
    r.logits.insert(r.logits.end(), decode.begin(), decode.end());
    r.perturbed = golden.floats("perturbed_logits");
    r.perturbations = int64_t(r.perturbed.size()) / (r.steps * r.vocab);
    EXPECT_EQ(r.perturbed.size(), size_t(r.perturbations * r.steps * r.vocab));
    EXPECT_EQ(r.greedy.size(), size_t(r.steps - 1));
    return r;
}

// The backend's logits at the reference's steps: prefill of the prompt, then the greedy tokens one at a time.
inline std::vector<float> run_teacher_forced(Backend& backend, const ReferenceRun& r) {
    SequenceState state = backend.new_sequence();
    std::vector<float> out = backend.forward(state, r.prompt, false);
    for (int64_t token : r.greedy) {
        int32_t id = int32_t(token);
        std::vector<float> step = backend.forward(state, std::span(&id, 1), false);
        out.insert(out.end(), step.begin(), step.end());
    }
    return out;
}

// How `engine` ([steps, vocab]) stands against the reference and its perturbed reruns.
struct YardstickVerdict {
    std::vector<double> cosine, rerun_worst, rerun_best;  // per step
    std::vector<int64_t> argmax;                          // per step
    double total = 0;                                     // sum over steps of (1 - cosine)
    std::vector<double> rerun_totals;                     // the same sum for every perturbed rerun
    double closest_rerun_total() const { return *std::min_element(rerun_totals.begin(), rerun_totals.end()); }
    bool has_nan = false;

    bool every_step_inside() const {
        for (size_t s = 0; s < cosine.size(); ++s)
            if (!(cosine[s] >= rerun_worst[s])) return false;
        return true;
    }
    bool closer_than_every_rerun() const { return total < closest_rerun_total(); }
};

inline YardstickVerdict judge(const ReferenceRun& r, const std::vector<float>& engine) {
    YardstickVerdict v;
    v.rerun_totals.assign(size_t(r.perturbations), 0.0);
    for (int64_t s = 0; s < r.steps; ++s) {
        Comparison c = compare(engine.data() + s * r.vocab, r.step(s), size_t(r.vocab));
        v.has_nan |= c.has_nan;
        double worst = std::numeric_limits<double>::infinity(), best = -worst;
        for (int64_t p = 0; p < r.perturbations; ++p) {
            const double cp = compare(r.perturbed_step(p, s), r.step(s), size_t(r.vocab)).cosine;
            worst = std::min(worst, cp);
            best = std::max(best, cp);
            v.rerun_totals[size_t(p)] += 1 - cp;
        }
        v.cosine.push_back(c.cosine);
        v.rerun_worst.push_back(worst);
        v.rerun_best.push_back(best);
        v.argmax.push_back(argmax(engine.data() + s * r.vocab, r.vocab));
        v.total += 1 - c.cosine;
    }
    return v;
}

// Judges `engine`, prints one line per step and the totals, and fails the test where it is outside.
inline void expect_within_reference_yardstick(const ReferenceRun& r, const std::vector<float>& engine,
                                              const std::string& who) {
    ASSERT_EQ(engine.size(), r.logits.size()) << who;
    const YardstickVerdict v = judge(r, engine);
    ASSERT_FALSE(v.has_nan) << who;
    int closer_reruns = 0;
    for (int64_t s = 0; s < r.steps; ++s) {
        const bool best_is_closer = v.cosine[size_t(s)] < v.rerun_best[size_t(s)];
        closer_reruns += best_is_closer;
        std::printf("%s step %2lld: cosine %.7f, perturbed reruns %.7f .. %.7f%s\n", who.c_str(), (long long)s,
                    v.cosine[size_t(s)], v.rerun_worst[size_t(s)], v.rerun_best[size_t(s)],
                    best_is_closer ? "  (inside the spread)" : "  (closer than every rerun)");
        EXPECT_GE(v.cosine[size_t(s)], v.rerun_worst[size_t(s)])
            << who << " step " << s << ": further from the reference than one-ulp noise";
        if (s + 1 < r.steps) {
            EXPECT_EQ(v.argmax[size_t(s)], r.greedy[size_t(s)]) << who << " step " << s;
        }
    }
    std::printf("%s: sum of (1 - cosine) over %lld steps %.3e; perturbed reruns %.3e .. %.3e; steps where the "
                "closest rerun is closer: %d\n", who.c_str(), (long long)r.steps, v.total, v.closest_rerun_total(),
                *std::max_element(v.rerun_totals.begin(), v.rerun_totals.end()), closer_reruns);
    EXPECT_TRUE(v.closer_than_every_rerun()) << who << ": over the whole run, further from the reference than a "
                                                "one-ulp perturbation of 1 % of the embedding";
}

}  // namespace dsv4::testing
