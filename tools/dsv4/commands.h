// The dsv4 subcommands, each registered on the CLI11 app by its own file (cmd_*.cpp).
#pragma once

#include <CLI/CLI.hpp>

namespace dsv4::cli {

void add_logits_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_synth_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_serve_command(CLI::App& app);  // when built with cpp-httplib (DSV4_WITH_SERVER)

}  // namespace dsv4::cli
