// libFuzzer target for parsing a model's output (text_contracts.h, completion_violation): parse_completion never
// throws, and the text streamed in arbitrary chunks gives the whole parse. The first byte picks the thinking mode
// and the chunk sizes; the rest is the generated text. Built with -DDSV4_FUZZ=ON (clang); seeds in
// tests/fuzz/corpus/completion (replayed by tests/tokenizer/fuzz_corpus_test.cpp), see README.md.
#include "stop_on_violation.h"
#include "text_contracts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    dsv4::fuzz::stop_on_violation("completion_fuzz", dsv4::fuzz::completion_violation(
                                                         std::string_view(reinterpret_cast<const char*>(data), size)));
    return 0;
}
