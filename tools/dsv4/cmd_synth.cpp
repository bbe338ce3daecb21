// dsv4 synth -o DIR [--preset tiny|flash] [--layers N] [--seed S] [--shards N]: writes a synthetic DeepSeek-V4
// checkpoint in the Hub's native layout (src/model/synthetic_checkpoint.h). The embedded demo model is
// `--preset tiny`. Tested in tests/tools/synth_test.cpp.
#include <cstdio>

#include "commands.h"
#include "core/error.h"
#include "model/synthetic_checkpoint.h"

namespace dsv4::cli {

void add_synth_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("synth", "Write a synthetic DeepSeek-V4 checkpoint (Hub layout, random weights)");
    struct Args {
        std::string out, preset = "tiny";
        int64_t layers = 0;
        uint64_t seed = 0;
        int shards = 2, threads = 0;
        bool quiet = false;
    };
    auto a = std::make_shared<Args>();
    cmd->add_option("-o,--out", a->out, "Output directory (must not exist, or be empty)")->required();
    cmd->add_option("--preset", a->preset, "tiny (the embedded demo model) | flash (V4-Flash shapes)")
        ->check(CLI::IsMember(synthetic_preset_names()));
    cmd->add_option("--layers", a->layers, "Trunk layers (default: the preset's), continuing its layer pattern")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--seed", a->seed, "Seed of the weights (same seed, same bytes)");
    cmd->add_option("--shards", a->shards, "Number of safetensors files")->check(CLI::PositiveNumber);
    cmd->add_option("--threads", a->threads, "Generation threads (0: all cores)")->check(CLI::NonNegativeNumber);
    cmd->add_flag("-q,--quiet", a->quiet, "No summary on stderr");
    cmd->callback([a] {
        ModelConfig config = synthetic_preset(a->preset, a->layers);
        SyntheticOptions options;
        options.seed = a->seed;
        options.shards = a->shards;
        options.threads = a->threads;
        SyntheticSummary s = write_synthetic_checkpoint(config, options, a->out);
        if (!a->quiet)
            std::fprintf(
                stderr,
                "dsv4: wrote %s: preset %s, seed %llu, %lld layers + %lld MTP, %lld tensors, %.1f MB in %zu file(s)\n",
                a->out.c_str(), a->preset.c_str(), (unsigned long long)a->seed, (long long)config.num_layers,
                (long long)config.num_mtp_layers, (long long)s.tensors, double(s.bytes) / 1e6, s.files.size());
    });
}

}  // namespace dsv4::cli
