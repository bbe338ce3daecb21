// libFuzzer target for a model directory's tokenizer.json (text_contracts.h, tokenizer_json_violation): any text
// loads into a tokenizer or is refused with dsv4::Error or a JSON error, and a loaded tokenizer encodes and decodes
// without throwing anything else; no crash, no undefined behaviour. Built with -DDSV4_FUZZ=ON (clang); seeds in
// tests/fuzz/corpus/tokenizer_json (replayed by tests/tokenizer/fuzz_corpus_test.cpp), see README.md.
#include "stop_on_violation.h"
#include "text_contracts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    dsv4::fuzz::stop_on_violation("tokenizer_json_fuzz", dsv4::fuzz::tokenizer_json_violation(std::string_view(
                                                             reinterpret_cast<const char*>(data), size)));
    return 0;
}
