// What the dsv4 subcommands share: the model flags (-m, --numerics, --backend, --threads), loading a model
// for them, and reading token-id files. Errors are dsv4::Error with a sentence the user can act on.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/cpu_model.h"

namespace dsv4::cli {

struct ModelOptions {
    std::string dir;
    std::string numerics = "auto";  // auto: model numerics for quantized checkpoints, reference for float ones
    std::string backend = "cpu";
    int threads = 0;
    bool quiet = false;
};

void add_model_options(CLI::App* command, ModelOptions& options);

// Opens the checkpoint, loads and validates every weight, and builds the backend. Says on stderr which
// numerics it runs (unless quiet).
std::unique_ptr<CpuModel> load_model(const ModelOptions& options);

// Whitespace-separated non-negative token ids; a clear error for anything else or for an empty file.
std::vector<int32_t> read_ids_file(const std::string& path);

}  // namespace dsv4::cli
