// libFuzzer target for the V4 tokenizer on any bytes a prompt can hold (text_contracts.h, tokenizer_violation):
// encode never throws, the tokens' bytes are the input, decode is its lossy UTF-8, streamed decode equals decode.
// Reads the tokenizer.json that scripts/setup.sh installs ($DSV4_TOKENIZER_JSON, else .embedded/tokenizer.json from
// the working directory). Built with -DDSV4_FUZZ=ON (clang); seeds in tests/fuzz/corpus/tokenizer (replayed by
// tests/tokenizer/fuzz_corpus_test.cpp), see README.md.
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "stop_on_violation.h"
#include "text_contracts.h"

namespace {
std::unique_ptr<dsv4::tok::Tokenizer> tokenizer;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const char* env = std::getenv("DSV4_TOKENIZER_JSON");
    const std::string path = env ? env : ".embedded/tokenizer.json";
    try {
        tokenizer = std::make_unique<dsv4::tok::Tokenizer>(dsv4::tok::Tokenizer::from_file(path));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tokenizer_fuzz: %s (set DSV4_TOKENIZER_JSON or run from the repository)\n", e.what());
        std::abort();
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    dsv4::fuzz::stop_on_violation(
        "tokenizer_fuzz",
        dsv4::fuzz::tokenizer_violation(*tokenizer, std::string_view(reinterpret_cast<const char*>(data), size)));
    return 0;
}
