// The x86-64 vector instruction sets the host's hot loops are built for. A loop over a row of V4's 129,280 logits
// (runtime/sampling_weights.h, runtime/token_order.h) is compiled once per set from one always-inline body, its
// entry points marked DSV4_TARGET_AVX2 / DSV4_TARGET_AVX512, and the caller picks the widest this CPU runs: the
// binary stays portable, the machine's width is used, and a test can run every set the machine has and compare
// them. The builds run the same source operations, and the project's -ffp-contract=off keeps the wider ones from
// fusing a multiply and an add into an FMA (which AVX2 and AVX-512 machines have), which would change results.
// Elsewhere (not x86-64, or not GCC/Clang) only the baseline exists. Tested in tests/core/vector_isa_test.cpp.
#pragma once

#include <vector>

namespace dsv4 {

enum class VectorIsa { kBaseline, kAvx2, kAvx512 };

// The widest set this CPU runs (AVX-512 here means AVX-512F), found once.
VectorIsa host_vector_isa();
// Every set this CPU runs, baseline first.
std::vector<VectorIsa> runnable_vector_isas();
const char* vector_isa_name(VectorIsa isa);

}  // namespace dsv4

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DSV4_VECTOR_ISAS 1
#define DSV4_TARGET_AVX2 __attribute__((target("avx2")))
#define DSV4_TARGET_AVX512 __attribute__((target("avx512f")))
#else
#define DSV4_VECTOR_ISAS 0
#define DSV4_TARGET_AVX2
#define DSV4_TARGET_AVX512
#endif
