// Shared helpers of the tokenizer tests: the installed tokenizer (loaded once), data files, FNV-1a.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_path.h"

namespace dsv4::tok::test {

inline std::string data_path(const std::string& name) {
    return std::string(DSV4_SOURCE_DIR) + "/tests/tokenizer/data/" + name;
}

inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in.good()) << "cannot open " << path;
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

// DeepSeek-V4's tokenizer as installed by scripts/setup.sh (.embedded/tokenizer.json). Tests need it: a
// missing file is a failure telling what to run, not a skip.
inline const Tokenizer& v4_tokenizer() {
    static const Tokenizer t = [] {
        const auto path = installed_tokenizer_json();
        if (!path) throw std::runtime_error("no installed tokenizer.json: run scripts/setup.sh");
        return Tokenizer::from_file(*path);
    }();
    return t;
}

inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = 0xCBF29CE484222325ull) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
    return h;
}

}  // namespace dsv4::tok::test
