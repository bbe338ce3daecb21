// Checkpoint: a model directory as downloaded (config.json + one safetensors file or shards with
// model.safetensors.index.json), memory-mapped. Tensor names are normalized to the Hub's native names
// (spec §11.1) whichever way the file spells them (transformers' save_pretrained names, spec §16.2).
// Tested in tests/io/.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/tensor_ref.h"
#include "model/model_config.h"

namespace dsv4 {

class SafetensorsFile;

struct OpenOptions {
    bool show_progress = false;  // progress and a summary on stderr (only when it is a terminal)
};

class Checkpoint {
public:
    // Opens `dir`, reads config.json and every safetensors header, validates them, and maps the files.
    // Throws dsv4::Error with the file (and tensor) named for anything malformed.
    static std::shared_ptr<Checkpoint> open(const std::string& dir, const OpenOptions& options = {});
    ~Checkpoint();

    const std::string& dir() const { return dir_; }
    const ModelConfig& config() const { return config_; }

    // Looks a tensor up by native name; nullptr if absent.
    const TensorRef* find(std::string_view native_name) const;
    // Like find, but a missing tensor is an error naming the checkpoint directory.
    const TensorRef& get(std::string_view native_name) const;
    const std::map<std::string, TensorRef, std::less<>>& tensors() const { return tensors_; }
    uint64_t total_bytes() const;

private:
    Checkpoint() = default;
    std::string dir_;
    ModelConfig config_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, TensorRef, std::less<>> tensors_;
};

}  // namespace dsv4
