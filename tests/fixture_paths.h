// Where the tests find their fixtures: tests/fixtures/ of this repository (its README says what each one is and
// where it came from). Nothing outside the repository is read, so a clone runs every CPU test; a fixture that is
// missing makes the tests that need it fail, never skip.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace dsv4::test_fixtures {

inline std::filesystem::path root() { return std::filesystem::path(DSV4_SOURCE_DIR) / "tests" / "fixtures"; }

inline std::string dir(const std::string& name) { return (root() / name).string(); }

// A tiny Hub-layout checkpoint (FP8 + FP4, MTP, two shards) and the outputs of DeepSeek's own inference code on it.
inline const std::string kOfficialNumericsA = "official-numerics-a";
inline std::string official_numerics_a() { return dir(kOfficialNumericsA); }

// Folders named official-* hold DeepSeek's reference outputs (prefill_last_logits, decode_logits); every other
// folder with a golden.safetensors holds transformers' outputs (prefill_logits, chunk_sizes, greedy_logits, ...).
inline bool is_official(const std::string& name) { return name.starts_with("official-"); }

// The names of every fixture with a golden, sorted; `official`: true for DeepSeek's, false for transformers'.
inline std::vector<std::string> fixtures(bool official) {
    std::vector<std::string> names;
    if (std::filesystem::exists(root()))
        for (const auto& entry : std::filesystem::directory_iterator(root())) {
            const std::string name = entry.path().filename().string();
            if (std::filesystem::exists(entry.path() / "golden.safetensors") && is_official(name) == official)
                names.push_back(name);
        }
    std::sort(names.begin(), names.end());
    return names;
}

inline std::vector<std::string> transformers_fixtures() { return fixtures(false); }

// Every fixture with a golden, transformers' first, then DeepSeek's.
inline std::vector<std::string> all_fixtures() {
    std::vector<std::string> names = fixtures(false), official = fixtures(true);
    names.insert(names.end(), official.begin(), official.end());
    return names;
}

}  // namespace dsv4::test_fixtures
