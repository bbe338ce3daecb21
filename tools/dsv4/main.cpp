// The dsv4 command. Subcommands are added in their own files (cmd_*.cpp); see DESIGN's CLI contract.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "core/error.h"

int main(int argc, char** argv) {
    CLI::App app{"dsv4: DeepSeek-V4 inference engine"};
    app.set_version_flag("--version", std::string("dsv4 ") + DSV4_VERSION);
    app.require_subcommand(0, 1);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const dsv4::Error& e) {
        std::fprintf(stderr, "dsv4: %s\n", e.what());
        return 1;
    }
    if (app.get_subcommands().empty()) std::fputs(app.help().c_str(), stdout);
    return 0;
}
