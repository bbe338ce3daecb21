// dsv4 tokenize / detokenize / render: the text commands over src/tokenizer (see cmd_text.cpp).
#pragma once

#include <CLI/CLI.hpp>

namespace dsv4::cli {

// Registers `tokenize`, `detokenize` and `render` on the app.
void add_text_commands(CLI::App& app);

}  // namespace dsv4::cli
