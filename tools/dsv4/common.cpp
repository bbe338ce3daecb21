// Shared pieces of the dsv4 subcommands: see common.h.
#include "common.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/checkpoint.h"

namespace dsv4::cli {

void add_model_options(CLI::App* command, ModelOptions& o) {
    command->add_option("-m,--model", o.dir, "Model directory (config.json + *.safetensors)")->required();
    command->add_option("--numerics", o.numerics,
                        "reference (f32, as transformers) | model (official DeepSeek-V4 numerics) | auto "
                        "(model for quantized checkpoints, else reference)")
        ->check(CLI::IsMember({"auto", "reference", "model"}));
    command->add_option("--backend", o.backend, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}));
    command->add_option("--threads", o.threads, "CPU threads (0: all cores)")->check(CLI::NonNegativeNumber);
    command->add_flag("-q,--quiet", o.quiet, "No progress or notes on stderr");
}

std::unique_ptr<CpuModel> load_model(const ModelOptions& o) {
    DSV4_CHECK(o.backend == "cpu",
               "--backend {}: the CUDA backend does not run the model yet; use --backend cpu (the reference)",
               o.backend);
    OpenOptions open_options;
    open_options.show_progress = !o.quiet && isatty(STDERR_FILENO);
    auto checkpoint = Checkpoint::open(o.dir, open_options);
    const ModelConfig& config = checkpoint->config();
    Numerics numerics = o.numerics == "auto" ? (config.fp8_quantized ? Numerics::kModel : Numerics::kReference)
                                             : parse_numerics(o.numerics);
    if (!o.quiet && o.numerics == "auto")
        std::fprintf(stderr, "dsv4: numerics %s (%s checkpoint; choose with --numerics)\n", numerics_name(numerics),
                     config.fp8_quantized ? "quantized" : "floating-point");
    ModelWeights weights = load_model_weights(checkpoint, config);
    return std::make_unique<CpuModel>(config, std::move(weights), numerics, o.threads);
}

std::vector<int32_t> read_ids_file(const std::string& path) {
    std::ifstream in(path);
    DSV4_CHECK(in.good(), "cannot read the ids file '{}'", path);
    std::vector<int32_t> ids;
    std::string word;
    while (in >> word) {
        size_t used = 0;
        long long value = -1;
        try {
            value = std::stoll(word, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        DSV4_CHECK(used == word.size() && value >= 0 && value <= INT32_MAX,
                   "'{}' in the ids file '{}' is not a token id (a non-negative integer)", word, path);
        ids.push_back(int32_t(value));
    }
    DSV4_CHECK(!ids.empty(), "the ids file '{}' holds no token ids", path);
    return ids;
}

}  // namespace dsv4::cli
