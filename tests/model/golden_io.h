// Reading golden tensors (safetensors written by the fixture scripts) into plain vectors, and the comparison
// statistics the model tests report: cosine, worst |difference| relative to the golden's largest |value|.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace dsv4::testing {

class Golden {
public:
    explicit Golden(const std::string& path) : file_(SafetensorsFile::open(path)) {}

    bool has(const std::string& name) const { return find(name) != nullptr; }
    const TensorRef& tensor(const std::string& name) const {
        const TensorRef* t = find(name);
        if (!t) throw std::runtime_error("golden tensor '" + name + "' missing in " + file_->path());
        return *t;
    }
    std::vector<float> floats(const std::string& name) const {
        const TensorRef& t = tensor(name);
        EXPECT_EQ(t.dtype, DType::kF32) << name;
        std::vector<float> v(static_cast<size_t>(t.numel()));
        std::memcpy(v.data(), t.data, v.size() * sizeof(float));
        return v;
    }
    std::vector<int64_t> ints(const std::string& name) const {
        const TensorRef& t = tensor(name);
        std::vector<int64_t> v(static_cast<size_t>(t.numel()));
        if (t.dtype == DType::kI64) {
            std::memcpy(v.data(), t.data, v.size() * sizeof(int64_t));
        } else {
            EXPECT_EQ(t.dtype, DType::kI32) << name;
            for (size_t i = 0; i < v.size(); ++i) {
                int32_t x;
                std::memcpy(&x, t.data + i * 4, 4);
                v[i] = x;
            }
        }
        return v;
    }

private:
    const TensorRef* find(const std::string& name) const {
        for (const auto& t : file_->tensors())
            if (t.name == name) return &t;
        return nullptr;
    }
    std::unique_ptr<SafetensorsFile> file_;
};

struct Comparison {
    double cosine = 0;
    double max_abs_diff = 0;
    double max_abs_ref = 0;
    double relative() const { return max_abs_diff / std::max(max_abs_ref, 1e-30); }
    bool has_nan = false;
};

inline Comparison compare(const float* got, const float* ref, size_t n) {
    Comparison c;
    double dot = 0, gg = 0, rr = 0;
    for (size_t i = 0; i < n; ++i) {
        if (std::isnan(got[i]) || std::isnan(ref[i])) c.has_nan = true;
        dot += double(got[i]) * ref[i];
        gg += double(got[i]) * got[i];
        rr += double(ref[i]) * ref[i];
        c.max_abs_diff = std::max(c.max_abs_diff, std::fabs(double(got[i]) - ref[i]));
        c.max_abs_ref = std::max(c.max_abs_ref, std::fabs(double(ref[i])));
    }
    c.cosine = dot / std::sqrt(std::max(gg * rr, 1e-300));
    return c;
}

inline std::vector<int32_t> to_ids(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

}  // namespace dsv4::testing
