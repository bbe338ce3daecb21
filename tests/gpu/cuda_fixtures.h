// The model fixtures the CudaModel tests run on: every fixture of tests/fixtures (transformers' and DeepSeek's
// official-*), with each fixture's mixed chunk schedule; the small-shape synthetic models of tests/model/
// small_shapes.h (shapes no specialised GPU kernel covers); and the one-ulp
// perturbation both tests build their CPU-vs-CPU yardstick from (docs/numerics.md, "GPU vs CPU").
// Used by tests/gpu/cuda_model_test.cpp (end to end) and tests/gpu/cuda_layer_test.cpp (block by block).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/number_formats.h"
#include "fixture_paths.h"
#include "model/golden_io.h"
#include "model/small_shapes.h"

namespace dsv4::cuda_fixtures {

inline std::string fixture_dir(const std::string& name) { return test_fixtures::dir(name); }

inline std::vector<std::string> fixtures() { return test_fixtures::all_fixtures(); }

// The fixture's mixed schedule of prefill chunks and single-token steps (official-numerics-a has none stored:
// the schedule of its OfficialNumerics test, 375 ids).
inline std::vector<int64_t> chunk_schedule(const testing::Golden& golden) {
    if (golden.has("chunk_sizes")) return golden.ints("chunk_sizes");
    return {37, 1, 1, 20, 69, 3, 1, 128, 5, 1, 1, 1, 2, 31, 74};
}

// The small-shape models, by test parameter name ("small-" + small_shapes name).
inline const std::string kSmallPrefix = "small-";
inline std::vector<std::string> small_shape_models() {
    std::vector<std::string> names;
    for (const std::string& n : small_shapes::names()) names.push_back(kSmallPrefix + n);
    return names;
}

// What a model test runs: the checkpoint, the ids, the mixed chunk schedule over them, and the prompt length that
// greedy decoding starts from. `found` is false when a fixture is absent (the test skips).
struct ModelInputs {
    bool found = false;
    std::string dir;
    std::vector<int32_t> ids;
    std::vector<int64_t> schedule;
    int64_t greedy_prompt = 0;
};
inline ModelInputs model_inputs(const std::string& name) {
    ModelInputs in;
    if (name.rfind(kSmallPrefix, 0) == 0) {
        in.found = true;
        in.dir = small_shapes::checkpoint_dir(name.substr(kSmallPrefix.size()));
        in.ids = small_shapes::ids();
        in.schedule = small_shapes::schedule();
        in.greedy_prompt = small_shapes::kGreedyPrompt;
        return in;
    }
    in.dir = fixture_dir(name);
    if (!std::filesystem::exists(in.dir + "/golden.safetensors")) return in;
    const testing::Golden golden(in.dir + "/golden.safetensors");
    in.found = true;
    in.ids = testing::to_ids(golden.ints("input_ids"));
    in.schedule = chunk_schedule(golden);
    in.greedy_prompt = golden.has("greedy_prompt_len") ? golden.ints("greedy_prompt_len")[0] : int64_t(in.ids.size());
    return in;
}

// The yardstick: how far the CPU moves from itself when one input element per token moves by one bf16 ulp, for
// kYardsticks different deterministic choices of the elements.
constexpr int kYardsticks = 3;

// A deterministic, well-mixed 64-bit hash (splitmix64's finalizer) of (perturbation k, token or row r).
inline uint64_t perturbation_hash(int k, int64_t r) {
    uint64_t z = uint64_t(k + 1) * 0x9E3779B97F4A7C15ull + uint64_t(r) * 0xD1B54A32D192ED03ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// The bf16 neighbour of the bf16 value `x` one ulp away: larger in magnitude when `away`, else smaller (zero,
// which has no smaller neighbour, moves away). Finite in, finite out for every value the fixtures hold.
inline float bf16_neighbour(float x, bool away) {
    const uint16_t h = f32_to_bf16(x);
    const uint16_t magnitude = h & 0x7FFF, sign = h & 0x8000;
    const uint16_t moved = (away || magnitude == 0) ? uint16_t(magnitude + 1) : uint16_t(magnitude - 1);
    return bf16_to_f32(uint16_t(sign | moved));
}

// gtest parameter names: '-' is not allowed.
inline std::string test_name(std::string name) {
    std::replace(name.begin(), name.end(), '-', '_');
    return name;
}

}  // namespace dsv4::cuda_fixtures
