// Lookup of tokenizer.json: the model directory first, then the installed copy (environment variable,
// executable's ancestors, source tree's ancestors).
#include "tokenizer/tokenizer_path.h"

#include <cstdlib>
#include <system_error>

#include "core/error.h"

namespace dsv4::tok {
namespace {

namespace fs = std::filesystem;

std::optional<fs::path> search_upwards(fs::path dir) {
    std::error_code ec;
    for (int depth = 0; depth < 12 && !dir.empty(); ++depth) {
        const fs::path candidate = dir / ".embedded" / "tokenizer.json";
        if (fs::is_regular_file(candidate, ec)) return candidate;
        if (dir == dir.parent_path()) break;
        dir = dir.parent_path();
    }
    return std::nullopt;
}

}  // namespace

std::optional<fs::path> installed_tokenizer_json() {
    std::error_code ec;
    if (const char* env = std::getenv("DSV4_TOKENIZER_JSON"); env && *env) {
        if (fs::is_regular_file(env, ec)) return fs::path(env);
        return std::nullopt;
    }
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec)
        if (auto p = search_upwards(exe.parent_path())) return p;
    // This file lives at <repo>/src/tokenizer/; the build is usually inside the repository too.
    return search_upwards(fs::path(__FILE__).parent_path());
}

fs::path find_tokenizer_json(const fs::path& model_dir) {
    std::error_code ec;
    if (!model_dir.empty()) {
        DSV4_CHECK(fs::is_directory(model_dir, ec), "model directory {} does not exist", model_dir.string());
        const fs::path own = model_dir / "tokenizer.json";
        if (fs::is_regular_file(own, ec)) return own;
    }
    if (auto p = installed_tokenizer_json()) return *p;
    fail("no tokenizer.json: {} has none and no installed copy was found (.embedded/tokenizer.json; run "
         "scripts/setup.sh, or set DSV4_TOKENIZER_JSON)",
         model_dir.empty() ? std::string("the model directory") : model_dir.string());
}

}  // namespace dsv4::tok
