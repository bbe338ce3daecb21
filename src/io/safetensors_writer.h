// A minimal safetensors writer: named tensors with dtype, shape and bytes -> one file (or an in-memory image).
// Used by the CLI to write logits and by tests to build good and deliberately broken checkpoints.
// Round trips are tested in tests/io/safetensors_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace dsv4 {

struct TensorToWrite {
    std::string name;
    DType dtype = DType::kF32;
    std::vector<int64_t> shape;
    const void* data = nullptr;  // numel(shape) * dtype_size(dtype) bytes, not owned
    size_t nbytes = 0;
};

// The complete file image: header padded with spaces to a multiple of 8 (so every tensor of the data region
// starts 8-byte aligned when tensors are multiples of 8 bytes), then the tensors in the given order.
// Throws dsv4::Error if a tensor's byte count does not match its shape or a name repeats.
std::string serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

// Writes the image to `path` via a temporary file in the same directory and a rename, so a reader never sees
// a half-written file. Throws dsv4::Error naming the path on I/O failure.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes raw bytes to `path` (same temporary-file-and-rename discipline).
void write_file_bytes(const std::string& path, const std::string& bytes);

}  // namespace dsv4
