// SafetensorsFile: one .safetensors file, memory-mapped read-only; tensors are views into the mapping (no copy).
// The header (8-byte little-endian length + JSON) is validated completely before any view is handed out, so
// every TensorRef it yields lies inside the file. Tested in tests/io/safetensors_test.cpp and, with random
// mutations, in tests/io/safetensors_mutation_test.cpp and tests/fuzz/safetensors_fuzz.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/tensor_ref.h"

namespace dsv4 {

// The parsed and validated content of a safetensors image. Tensor views point into the image it was parsed
// from; names are as the file spells them, sorted by name.
struct SafetensorsHeader {
    std::vector<TensorRef> tensors;
    std::map<std::string, std::string> metadata;  // "__metadata__"
    size_t data_begin = 0;                        // offset of the data region in the image (8 + header length)
};

// Parses and validates a whole safetensors image `[data, data + size)`. `file` names it in error messages.
// Throws dsv4::Error for anything malformed; never reads outside the image.
SafetensorsHeader parse_safetensors(const std::byte* data, size_t size, const std::string& file);

class SafetensorsFile {
  public:
    // Maps `path` read-only and parses its header. Throws dsv4::Error naming the file (and tensor).
    static std::unique_ptr<SafetensorsFile> open(const std::string& path);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::string& path() const { return path_; }
    size_t file_size() const { return size_; }
    const std::vector<TensorRef>& tensors() const { return header_.tensors; }
    const std::map<std::string, std::string>& metadata() const { return header_.metadata; }

  private:
    SafetensorsFile() = default;
    std::string path_;
    const std::byte* map_ = nullptr;
    size_t size_ = 0;
    SafetensorsHeader header_;
};

}  // namespace dsv4
