// libFuzzer target for the safetensors reader: any input must parse (with every tensor view inside the input)
// or throw dsv4::Error. Built with -DDSV4_FUZZ=ON (clang); seeds in tests/fuzz/corpus/safetensors, see README.md.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto* bytes = reinterpret_cast<const std::byte*>(data);
    try {
        dsv4::SafetensorsHeader h = dsv4::parse_safetensors(bytes, size, "fuzz-input");
        // Read every byte of every view: libFuzzer's input buffer is exactly `size` long, so ASan flags any view
        // that reaches past it.
        uint8_t acc = 0;
        for (const auto& t : h.tensors)
            for (size_t i = 0; i < t.nbytes; ++i) acc ^= std::to_integer<uint8_t>(t.data[i]);
        volatile uint8_t sink = acc;
        (void)sink;
    } catch (const dsv4::Error&) {
    }
    return 0;
}
