// Running the built dsv4 binary from a test (exit code, stdout, stderr), scratch files, and the tiny synthetic
// model every tools test shares: written once per test process with `dsv4 synth` into a temporary directory that
// is removed at exit.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace dsv4::testing {

namespace fs = std::filesystem;

inline const std::string kBinary = std::string(DSV4_BINARY_DIR) + "/tools/dsv4/dsv4";

struct Result {
    int exit_code = -1;
    std::string output;  // stdout and stderr together (run), or stdout alone (run_split)
    std::string errors;  // stderr (run_split only)
};

// A scratch directory for this test process, removed at exit.
class ScratchDir {
  public:
    static const fs::path& path() {
        static ScratchDir dir;
        return dir.path_;
    }
    ~ScratchDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }

  private:
    ScratchDir() : path_(fs::temp_directory_path() / ("dsv4_tools_test_" + std::to_string(::getpid()))) {
        fs::create_directories(path_);
    }
    fs::path path_;
};

inline std::string temp_path(const std::string& name) {
    return (ScratchDir::path() / name).string();
}

inline std::string write_text(const std::string& name, const std::string& text) {
    std::string path = temp_path(name);
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

inline std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

inline std::string quote(const std::string& s) {  // for the shell
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

// Runs `dsv4 args` through the shell (args may hold redirections; `env` goes before the binary).
inline Result run_command(const std::string& command) {
    Result r;
    FILE* pipe = popen(command.c_str(), "r");
    if (!pipe) return r;
    std::array<char, 4096> buffer;
    size_t n;
    while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.output.append(buffer.data(), n);
    int status = pclose(pipe);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

inline Result run(const std::string& args, const std::string& env = "") {
    return run_command(env + (env.empty() ? "" : " ") + kBinary + " " + args + " 2>&1");
}

inline Result run_split(const std::string& args, const std::string& env = "") {
    static int counter = 0;
    const std::string err = temp_path("stderr_" + std::to_string(counter++) + ".txt");
    Result r = run_command(env + (env.empty() ? "" : " ") + kBinary + " " + args + " 2>" + err);
    r.errors = read_text(err);
    return r;
}

// The tiny preset (seed 0), written once per process by the dsv4 binary itself.
inline const std::string& tiny_model() {
    static const std::string dir = [] {
        std::string d = temp_path("tiny");
        Result r = run("synth -q -o " + d);
        EXPECT_EQ(r.exit_code, 0) << r.output;
        return d;
    }();
    return dir;
}

// The installed tokenizer (scripts/setup.sh puts it at .embedded/tokenizer.json); tests of text need it.
inline bool have_tokenizer() {
    return fs::exists(fs::path(DSV4_SOURCE_DIR) / ".embedded" / "tokenizer.json") ||
           std::getenv("DSV4_TOKENIZER_JSON") != nullptr;
}
#define DSV4_REQUIRE_TOKENIZER() \
    ASSERT_TRUE(::dsv4::testing::have_tokenizer()) << "no .embedded/tokenizer.json: run scripts/setup.sh"

inline std::vector<int64_t> parse_ids(const std::string& text) {
    std::vector<int64_t> ids;
    std::istringstream in(text);
    for (int64_t id; in >> id;) ids.push_back(id);
    return ids;
}

inline std::string join_ids(const std::vector<int64_t>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
    return s;
}

}  // namespace dsv4::testing
