// The model fixtures the CudaModel tests run on: tests/fixtures/* and, when DSV4_SHARED_DIR holds it,
// official-numerics-a (skipped at run time otherwise), with each fixture's mixed chunk schedule.
// Used by tests/gpu/cuda_model_test.cpp (end to end) and tests/gpu/cuda_layer_test.cpp (block by block).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "model/golden_io.h"

namespace dsv4::cuda_fixtures {

inline const std::string kOfficial = "official-numerics-a";

inline std::string fixture_dir(const std::string& name) {
    if (name == kOfficial) return std::string(DSV4_SHARED_DIR) + "/fixtures/" + kOfficial;
    return (std::filesystem::path(DSV4_SOURCE_DIR) / "tests" / "fixtures" / name).string();
}

inline std::vector<std::string> fixtures() {
    namespace fs = std::filesystem;
    std::vector<std::string> names;
    const fs::path root = fs::path(DSV4_SOURCE_DIR) / "tests" / "fixtures";
    if (fs::exists(root))
        for (const auto& entry : fs::directory_iterator(root))
            if (fs::exists(entry.path() / "golden.safetensors")) names.push_back(entry.path().filename().string());
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

// gtest parameter names: '-' is not allowed.
inline std::string test_name(std::string name) {
    std::replace(name.begin(), name.end(), '-', '_');
    return name;
}

}  // namespace dsv4::cuda_fixtures
