// libFuzzer target for a broken checkpoint (checkpoint_contract.h): the input is the JSON header of one shard of a
// small Hub-layout checkpoint; opening the directory and loading its weights succeed or throw dsv4::Error, no other
// exception, no crash, no read outside the mapped files, no undefined behaviour. Each input is written to a
// temporary directory (DSV4_FUZZ_TMP, default /tmp). Built with -DDSV4_FUZZ=ON (clang); seed in
// tests/fuzz/corpus/checkpoint (replayed by tests/io/fuzz_corpus_test.cpp), see README.md.
#include <unistd.h>

#include <cstdlib>
#include <memory>

#include "checkpoint_contract.h"
#include "stop_on_violation.h"

namespace {
std::unique_ptr<dsv4::fuzz::ShardHeaderCheck> check;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const char* tmp = std::getenv("DSV4_FUZZ_TMP");
    check = std::make_unique<dsv4::fuzz::ShardHeaderCheck>(std::filesystem::path(tmp ? tmp : "/tmp") /
                                                           ("dsv4_checkpoint_fuzz_" + std::to_string(getpid())));
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    dsv4::fuzz::stop_on_violation("checkpoint_fuzz",
                                  check->violation(std::string_view(reinterpret_cast<const char*>(data), size)));
    return 0;
}
