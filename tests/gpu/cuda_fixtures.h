// The model fixtures the CudaModel tests run on: tests/fixtures/* and, when DSV4_SHARED_DIR holds it,
// official-numerics-a (skipped at run time otherwise), with each fixture's mixed chunk schedule, and the one-ulp
// perturbation both tests build their CPU-vs-CPU yardstick from (docs/numerics.md, "GPU vs CPU").
// Used by tests/gpu/cuda_model_test.cpp (end to end) and tests/gpu/cuda_layer_test.cpp (block by block).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/number_formats.h"
#include "model/golden_io.h"

namespace dsv4::cuda_fixtures {

inline const std::string kOfficial = "official-numerics-a";

inline std::string fixture_dir(const std::string& name) {
    if (name == kOfficial) return std::string(DSV4_SHARED_DIR) + "/fixtures/" + kOfficial;
    return (std::filesystem::path(DSV4_SOURCE_DIR) / "tests" / "fixtures" / name).string();
}

// Fixtures whose config the CUDA backend refuses, with a word its error must name (docs/config.md): the
// GPU-vs-CPU tests leave them out, CudaModel.RefusesFixturesBeyondItsKernels checks each refusal.
struct RefusedFixture {
    std::string name, limit;
};
inline const std::vector<RefusedFixture> kRefusedByCuda = {{"hf-edge-all-rope", "index_topk 0"}};

inline std::vector<std::string> fixtures() {
    namespace fs = std::filesystem;
    std::vector<std::string> names;
    const fs::path root = fs::path(DSV4_SOURCE_DIR) / "tests" / "fixtures";
    auto refused = [](const std::string& name) {
        return std::any_of(kRefusedByCuda.begin(), kRefusedByCuda.end(),
                           [&](const RefusedFixture& r) { return r.name == name; });
    };
    if (fs::exists(root))
        for (const auto& entry : fs::directory_iterator(root))
            if (fs::exists(entry.path() / "golden.safetensors") && !refused(entry.path().filename().string()))
                names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    names.push_back(kOfficial);
    return names;
}

// The fixture's mixed schedule of prefill chunks and single-token steps (official-numerics-a has none stored:
// the schedule of its OfficialNumerics test, 375 ids).
inline std::vector<int64_t> chunk_schedule(const testing::Golden& golden) {
    if (golden.has("chunk_sizes")) return golden.ints("chunk_sizes");
    return {37, 1, 1, 20, 69, 3, 1, 128, 5, 1, 1, 1, 2, 31, 74};
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
