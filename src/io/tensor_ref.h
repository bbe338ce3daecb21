// TensorRef: a view of one tensor inside a memory-mapped checkpoint file (no copy). The mapping is owned by
// the Checkpoint that produced the reference and lives as long as it does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace dsv4 {

struct TensorRef {
    std::string name;             // native (Hub) name after mapping, e.g. "layers.3.attn.wq_a.weight"
    std::string file;             // the file it lives in (for error messages)
    DType dtype = DType::kF32;
    std::vector<int64_t> shape;
    const std::byte* data = nullptr;
    size_t nbytes = 0;

    bool empty() const { return data == nullptr; }
    int64_t numel() const {
        int64_t n = 1;
        for (auto s : shape) n *= s;
        return n;
    }
    int64_t dim(size_t i) const { return shape.at(i); }
    std::string shape_string() const;  // "[128, 256]"
};

}  // namespace dsv4
