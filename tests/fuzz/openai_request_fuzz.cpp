// libFuzzer target for what a client sends `dsv4 serve` (request_contract.h, openai_request_violation): any body
// parses into a chat or completion request or is an ApiError, and a parsed chat's messages render into a prompt or
// are a dsv4::Error; no other exception, no crash, no undefined behaviour. The first byte picks the endpoint (chat,
// completions, responses) and the encoder era; the rest is the body. Built with -DDSV4_FUZZ=ON (clang); seeds in
// tests/fuzz/corpus/openai_request (replayed by tests/server/fuzz_corpus_test.cpp), see README.md.
#include "request_contract.h"
#include "stop_on_violation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    dsv4::fuzz::stop_on_violation("openai_request_fuzz", dsv4::fuzz::openai_request_violation(std::string_view(
                                                             reinterpret_cast<const char*>(data), size)));
    return 0;
}
