// The contract checkpoint_fuzz checks, as a class that returns what broke ("" when the input keeps it), so that the
// fuzz target aborts on it and tests/io/fuzz_corpus_test.cpp replays the committed corpus through the same check.
// A copy of a small Hub-layout checkpoint (tests/fixtures/native-nvfp4: NVFP4 experts, FP8 attention, two shards
// and an index) whose second shard gets the input as its JSON header, its data section kept: opening the directory
// and loading its weights succeed or throw dsv4::Error, whatever the header says (names, dtypes, shapes, offsets).
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/weights.h"

namespace dsv4::fuzz {

class ShardHeaderCheck {
  public:
    static constexpr const char* kShard = "model-00002-of-00002.safetensors";

    // Copies the fixture (DSV4_SOURCE_DIR/tests/fixtures/native-nvfp4) into `dir`, which it creates.
    explicit ShardHeaderCheck(std::filesystem::path dir) : dir_(std::move(dir)) {
        const std::filesystem::path fixture =
            std::filesystem::path(DSV4_SOURCE_DIR) / "tests" / "fixtures" / "native-nvfp4";
        std::filesystem::create_directories(dir_);
        for (const char* f : {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors"})
            std::filesystem::copy_file(fixture / f, dir_ / f, std::filesystem::copy_options::overwrite_existing);
        std::ifstream in(fixture / kShard, std::ios::binary);
        const std::string shard{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
        uint64_t header = 0;
        std::memcpy(&header, shard.data(), 8);
        data_ = shard.substr(8 + header);
    }

    std::string violation(std::string_view header) const {
        {
            std::ofstream out(dir_ / kShard, std::ios::binary | std::ios::trunc);
            const uint64_t size = header.size();
            out.write(reinterpret_cast<const char*>(&size), 8);
            out.write(header.data(), std::streamsize(header.size()));
            out.write(data_.data(), std::streamsize(data_.size()));
        }
        try {
            const std::shared_ptr<Checkpoint> checkpoint = Checkpoint::open(dir_.string());
            (void)load_model_weights(checkpoint, checkpoint->config());
        } catch (const Error&) {
        } catch (const std::exception& e) {
            return std::string("an exception outside the contract: ") + e.what();
        }
        return "";
    }

    const std::filesystem::path& dir() const { return dir_; }

  private:
    std::filesystem::path dir_;
    std::string data_;  // the fixture shard's bytes after its header
};

}  // namespace dsv4::fuzz
