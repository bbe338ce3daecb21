// libFuzzer target for the V4 tokenizer (tokenizer/tokenizer.h) on any bytes a prompt can hold: encode never
// throws; the tokens' bytes concatenate to the input exactly (byte-level BPE loses nothing, special tokens
// included); decode gives the input with invalid UTF-8 replaced (utf8_lossy); and IncrementalDecoder's pieces plus
// finish() equal decode. Reads the tokenizer.json that scripts/setup.sh installs ($DSV4_TOKENIZER_JSON, else
// .embedded/tokenizer.json from the working directory). Built with -DDSV4_FUZZ=ON (clang); seeds in
// tests/fuzz/corpus/tokenizer, see README.md.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

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
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const dsv4::tok::Tokenizer& tok = *tokenizer;
    const std::vector<int32_t> ids = tok.encode(text);
    std::string joined;
    for (int32_t id : ids) joined += tok.token_bytes(id);
    if (joined != text) std::abort();  // bytes lost or changed
    const std::string decoded = tok.decode(ids);
    if (decoded != dsv4::tok::utf8_lossy(text)) std::abort();
    dsv4::tok::IncrementalDecoder stream(tok);
    std::string pieces;
    for (int32_t id : ids) pieces += stream.push(id);
    pieces += stream.finish();
    if (pieces != decoded) std::abort();
    return 0;
}
