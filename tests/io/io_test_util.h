// Helpers shared by the tests of src/io and model/weights.cpp: scratch directories, raw safetensors images,
// an editable in-memory copy of a checkpoint (to derive broken or re-encoded variants of the official fixture),
// and an expectation that a call throws dsv4::Error mentioning given words.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.h"
#include "fixture_paths.h"
#include "io/checkpoint.h"
#include "io/safetensors_writer.h"

namespace dsv4::test {

// The tiny Hub-layout checkpoint tests/fixtures/official-numerics-a (FP8 + FP4, MTP, two shards).
inline std::string fixture_dir() { return test_fixtures::official_numerics_a(); }

class TempDir {
  public:
    TempDir() {
        std::string tmpl = (std::filesystem::temp_directory_path() / "dsv4-io-test-XXXXXX").string();
        path_ = ::mkdtemp(tmpl.data()) ? tmpl : std::string();
        if (path_.empty()) throw std::runtime_error("mkdtemp failed");
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    const std::string& path() const { return path_; }
    std::string file(const std::string& name) const { return path_ + "/" + name; }
    std::string write(const std::string& name, const std::string& bytes) const {
        write_file_bytes(file(name), bytes);
        return file(name);
    }

  private:
    std::string path_;
};

// A safetensors image from a header written by hand (no validation, no padding) and a data region.
inline std::string raw_safetensors(const std::string& header, const std::string& data = {}) {
    std::string out;
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out.push_back(char((n >> (8 * i)) & 0xFF));
    return out + header + data;
}

// Runs fn, expecting a dsv4::Error whose message contains every one of `words`.
inline void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> words) {
    try {
        fn();
    } catch (const Error& e) {
        std::string msg = e.what();
        for (const auto& w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
        return;
    } catch (const std::exception& e) {
        ADD_FAILURE() << "expected dsv4::Error, got another exception: " << e.what();
        return;
    }
    ADD_FAILURE() << "expected dsv4::Error mentioning " << *words.begin() << ", but the call succeeded";
}

struct OwnedTensor {
    std::string name;
    DType dtype = DType::kF32;
    std::vector<int64_t> shape;
    std::string bytes;
};

// An editable copy of a checkpoint's tensors (native names), written back as one model.safetensors.
struct TensorSet {
    std::vector<OwnedTensor> tensors;

    static TensorSet from_checkpoint(const Checkpoint& ck) {
        TensorSet s;
        for (const auto& [name, t] : ck.tensors())
            s.tensors.push_back({name, t.dtype, t.shape, std::string(reinterpret_cast<const char*>(t.data), t.nbytes)});
        return s;
    }
    OwnedTensor* find(const std::string& name) {
        for (auto& t : tensors)
            if (t.name == name) return &t;
        return nullptr;
    }
    OwnedTensor& at(const std::string& name) {
        OwnedTensor* t = find(name);
        if (!t) throw std::runtime_error("test TensorSet: no tensor " + name);
        return *t;
    }
    void remove(const std::string& name) {
        std::erase_if(tensors, [&](const OwnedTensor& t) { return t.name == name; });
    }
    void add(std::string name, DType dtype, std::vector<int64_t> shape, char fill = 0) {
        int64_t n = 1;
        for (auto d : shape) n *= d;
        tensors.push_back({std::move(name), dtype, std::move(shape), std::string(size_t(n) * dtype_size(dtype), fill)});
    }
    std::string serialize() const {
        std::vector<TensorToWrite> out;
        for (const auto& t : tensors) out.push_back({t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
        return serialize_safetensors(out);
    }
    // Writes `dir`/model.safetensors and `dir`/config.json.
    void write_checkpoint(const TempDir& dir, const std::string& config_json) const {
        dir.write("model.safetensors", serialize());
        dir.write("config.json", config_json);
    }
};

}  // namespace dsv4::test
