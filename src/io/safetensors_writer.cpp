// Safetensors writer: see safetensors_writer.h.
#include "io/safetensors_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace dsv4 {

std::string serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
    // nlohmann's default object is sorted by key; ordered_json keeps header order = data order, which is easier
    // to read in a hex dump and is what other writers do.
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
        auto& m = header["__metadata__"] = nlohmann::ordered_json::object();
        for (const auto& [k, v] : metadata) m[k] = v;
    }
    std::set<std::string> seen;
    uint64_t offset = 0;
    for (const auto& t : tensors) {
        DSV4_CHECK(t.name != "__metadata__" && seen.insert(t.name).second,
                   "safetensors writer: tensor name '{}' is reserved or repeated", t.name);
        uint64_t numel = 1, nbytes = 0;
        for (auto d : t.shape) {
            DSV4_CHECK(d >= 0 && !__builtin_mul_overflow(numel, uint64_t(d), &numel),
                       "safetensors writer: tensor '{}' has a negative or overflowing shape", t.name);
        }
        DSV4_CHECK(!__builtin_mul_overflow(numel, uint64_t(dtype_size(t.dtype)), &nbytes) && nbytes == t.nbytes,
                   "safetensors writer: tensor '{}' has {} bytes, but {} with {} elements needs {}", t.name, t.nbytes,
                   dtype_name(t.dtype), numel, nbytes);
        DSV4_CHECK(t.data != nullptr || t.nbytes == 0, "safetensors writer: tensor '{}' has no data", t.name);
        header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                          {"shape", t.shape},
                          {"data_offsets", {offset, offset + t.nbytes}}};
        offset += t.nbytes;
    }
    std::string text;
    try {
        text = header.dump();
    } catch (const nlohmann::json::exception& e) {  // names or metadata that are not valid UTF-8
        fail("safetensors writer: cannot encode the header: {}", e.what());
    }
    text.append((8 - text.size() % 8) % 8, ' ');

    std::string out;
    out.reserve(8 + text.size() + offset);
    uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) out.push_back(char((n >> (8 * i)) & 0xFF));
    out += text;
    for (const auto& t : tensors) out.append(static_cast<const char*>(t.data), t.nbytes);
    return out;
}

void write_file_bytes(const std::string& path, const std::string& bytes) {
    std::string tmp = path + ".tmp." + std::to_string(::getpid());
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    DSV4_CHECK(f != nullptr, "{}: cannot create: {}", tmp, std::strerror(errno));
    size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
    int write_err = errno;
    bool closed = std::fclose(f) == 0;
    if (written != bytes.size() || !closed) {
        std::remove(tmp.c_str());
        fail("{}: write failed: {}", tmp, std::strerror(write_err));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        int err = errno;
        std::remove(tmp.c_str());
        fail("{}: cannot rename {} into place: {}", path, tmp, std::strerror(err));
    }
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    write_file_bytes(path, serialize_safetensors(tensors, metadata));
}

}  // namespace dsv4
