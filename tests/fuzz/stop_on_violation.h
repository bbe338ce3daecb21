// What every fuzz target does with its contract's answer (request_contract.h, text_contracts.h,
// checkpoint_contract.h): nothing when it holds, else say what broke and abort, so that libFuzzer keeps the input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace dsv4::fuzz {

inline void stop_on_violation(const char* target, const std::string& broken) {
    if (broken.empty()) return;
    std::fprintf(stderr, "%s: %s\n", target, broken.c_str());
    std::abort();
}

}  // namespace dsv4::fuzz
