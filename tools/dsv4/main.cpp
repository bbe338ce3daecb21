// The dsv4 command: one binary, subcommands registered from cmd_*.cpp (see DESIGN's CLI contract). User
// errors end here: one line on stderr and exit code 1.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cmd_text.h"
#include "commands.h"
#include "core/error.h"
#include "ranks.h"

int main(int argc, char** argv) {
    dsv4::cli::set_command_line(argc, argv);  // a run over several GPUs starts its ranks with it
    CLI::App app{"dsv4: DeepSeek-V4 inference engine"};
    app.set_version_flag("--version", std::string("dsv4 ") + DSV4_VERSION);
    app.require_subcommand(1);
    dsv4::cli::add_inspect_command(app);
    dsv4::cli::add_logits_command(app);
    dsv4::cli::add_generate_command(app);
    dsv4::cli::add_text_commands(app);
    dsv4::cli::add_synth_command(app);
    dsv4::cli::add_chat_command(app);
    dsv4::cli::add_bench_command(app);
#ifdef DSV4_WITH_SERVER
    dsv4::cli::add_serve_command(app);
#endif
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const dsv4::Error& e) {
        std::fprintf(stderr, "dsv4: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
