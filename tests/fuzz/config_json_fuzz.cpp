// libFuzzer target for config.json parsing: any text must give a self-consistent ModelConfig or throw
// dsv4::Error. Built with -DDSV4_FUZZ=ON (clang); seeds in tests/fuzz/corpus/config_json, see README.md.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "io/config_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        dsv4::ModelConfig c = dsv4::parse_model_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
        // What passes validation must be usable without further checks by the model code.
        if (c.compress_ratios.size() != size_t(c.num_layers) || c.mlp_types.size() != size_t(c.num_layers) ||
            c.mtp_compress_ratios.size() != size_t(c.num_mtp_layers) || c.rope_head_dim % 2 != 0 ||
            c.head_dim <= c.rope_head_dim || c.num_experts_per_tok > c.n_routed_experts)
            std::abort();
    } catch (const dsv4::Error&) {
    }
    return 0;
}
