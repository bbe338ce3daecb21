// Vector instruction sets: see vector_isa.h.
#include "core/vector_isa.h"

namespace dsv4 {

std::vector<VectorIsa> runnable_vector_isas() {
    std::vector<VectorIsa> isas = {VectorIsa::kBaseline};
#if DSV4_VECTOR_ISAS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) isas.push_back(VectorIsa::kAvx2);
    if (__builtin_cpu_supports("avx512f")) isas.push_back(VectorIsa::kAvx512);
#endif
    return isas;
}

VectorIsa host_vector_isa() {
    static const VectorIsa widest = runnable_vector_isas().back();
    return widest;
}

const char* vector_isa_name(VectorIsa isa) {
    switch (isa) {
        case VectorIsa::kBaseline:
            return "baseline";
        case VectorIsa::kAvx2:
            return "avx2";
        case VectorIsa::kAvx512:
            return "avx512";
    }
    return "?";
}

}  // namespace dsv4
