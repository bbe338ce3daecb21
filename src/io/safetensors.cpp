// SafetensorsFile and parse_safetensors: see safetensors.h. The format: u64 little-endian N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the data region;
// offsets are relative to the data region.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/error.h"

namespace dsv4 {
namespace {

using nlohmann::json;

// Real headers are a few hundred kB; the cap keeps a corrupt length field from making us parse gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
// Headers nest three levels ({name: {shape: [..]}}); deeper input is garbage and must not recurse far.
constexpr int kMaxJsonDepth = 8;

const char* json_type(const json& j) {
    return j.type_name();
}

// Parses the header JSON, rejecting duplicate keys at any level (nlohmann would keep only the last silently)
// and nesting beyond kMaxJsonDepth.
json parse_header_json(const char* begin, const char* end, const std::string& file) {
    std::vector<std::set<std::string>> keys_stack;
    auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
        if (depth > kMaxJsonDepth)
            fail("{}: safetensors header: JSON nested deeper than {} levels", file, kMaxJsonDepth);
        switch (event) {
            case json::parse_event_t::object_start:
                keys_stack.emplace_back();
                break;
            case json::parse_event_t::object_end:
                if (!keys_stack.empty()) keys_stack.pop_back();
                break;
            case json::parse_event_t::key: {
                const auto& key = parsed.get_ref<const std::string&>();
                if (!keys_stack.empty() && !keys_stack.back().insert(key).second)
                    fail("{}: safetensors header: key '{}' appears twice", file, key);
                break;
            }
            default:
                break;
        }
        return true;
    };
    try {
        return json::parse(begin, end, callback);
    } catch (const json::exception& e) {
        fail("{}: safetensors header is not valid JSON: {}", file, e.what());
    }
}

// A non-negative integer JSON value that fits int64, or nullopt.
std::optional<uint64_t> as_count(const json& j) {
    if (j.is_number_unsigned()) {
        uint64_t v = j.get<uint64_t>();
        if (v <= uint64_t(std::numeric_limits<int64_t>::max())) return v;
        return std::nullopt;
    }
    if (j.is_number_integer()) {
        int64_t v = j.get<int64_t>();
        if (v >= 0) return uint64_t(v);
    }
    return std::nullopt;
}

TensorRef parse_entry(const std::string& name, const json& entry, const std::byte* data_region, uint64_t data_size,
                      const std::string& file, std::pair<uint64_t, uint64_t>& offsets) {
    DSV4_CHECK(entry.is_object(), "{}: tensor '{}': header entry is a JSON {}, expected an object", file, name,
               json_type(entry));
    for (const auto& [key, value] : entry.items()) {
        (void)value;
        DSV4_CHECK(key == "dtype" || key == "shape" || key == "data_offsets",
                   "{}: tensor '{}': unknown header field '{}'", file, name, key);
    }
    auto field = [&](const char* key) -> const json& {
        auto it = entry.find(key);
        DSV4_CHECK(it != entry.end(), "{}: tensor '{}': header entry has no '{}'", file, name, key);
        return *it;
    };

    TensorRef t;
    t.name = name;
    t.file = file;

    const json& dtype = field("dtype");
    DSV4_CHECK(dtype.is_string(), "{}: tensor '{}': dtype is a JSON {}, expected a string", file, name,
               json_type(dtype));
    auto parsed_dtype = parse_dtype(dtype.get_ref<const std::string&>());
    DSV4_CHECK(parsed_dtype.has_value(), "{}: tensor '{}': unsupported dtype '{}'", file, name,
               dtype.get_ref<const std::string&>());
    t.dtype = *parsed_dtype;

    const json& shape = field("shape");
    DSV4_CHECK(shape.is_array(), "{}: tensor '{}': shape is a JSON {}, expected a list of integers", file, name,
               json_type(shape));
    uint64_t numel = 1;
    for (const auto& d : shape) {
        auto dim = as_count(d);
        DSV4_CHECK(dim.has_value(), "{}: tensor '{}': shape entry {} is not a non-negative integer", file, name,
                   d.dump());
        DSV4_CHECK(!__builtin_mul_overflow(numel, *dim, &numel), "{}: tensor '{}': shape {} overflows", file, name,
                   shape.dump());
        t.shape.push_back(int64_t(*dim));
    }
    uint64_t nbytes = 0;
    DSV4_CHECK(!__builtin_mul_overflow(numel, uint64_t(dtype_size(t.dtype)), &nbytes),
               "{}: tensor '{}': shape {} overflows", file, name, shape.dump());

    const json& offs = field("data_offsets");
    DSV4_CHECK(offs.is_array() && offs.size() == 2, "{}: tensor '{}': data_offsets must be [begin, end], got {}", file,
               name, offs.dump());
    auto begin = as_count(offs[0]), end = as_count(offs[1]);
    DSV4_CHECK(begin && end && *begin <= *end,
               "{}: tensor '{}': data_offsets {} are not [begin, end] with begin <= end", file, name, offs.dump());
    DSV4_CHECK(*end <= data_size, "{}: tensor '{}': data_offsets {} run past the data region ({} bytes)", file, name,
               offs.dump(), data_size);
    DSV4_CHECK(*end - *begin == nbytes, "{}: tensor '{}': data_offsets {} span {} bytes, but {} {} needs {}", file,
               name, offs.dump(), *end - *begin, dtype_name(t.dtype), shape.dump(), nbytes);
    t.data = data_region + *begin;
    t.nbytes = size_t(nbytes);
    offsets = {*begin, *end};
    return t;
}

}  // namespace

SafetensorsHeader parse_safetensors(const std::byte* data, size_t size, const std::string& file) {
    DSV4_CHECK(size >= 8, "{}: not a safetensors file: {} bytes is shorter than the 8-byte header length", file, size);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint64_t(std::to_integer<uint8_t>(data[i]));
    DSV4_CHECK(header_len <= size - 8, "{}: safetensors header length {} runs past the end of the file ({} bytes)",
               file, header_len, size);
    DSV4_CHECK(header_len <= kMaxHeaderBytes, "{}: safetensors header length {} exceeds the {} byte limit", file,
               header_len, kMaxHeaderBytes);
    DSV4_CHECK(header_len >= 2, "{}: safetensors header length {} is too short for a JSON object", file, header_len);

    const char* text = reinterpret_cast<const char*>(data + 8);
    json header = parse_header_json(text, text + header_len, file);
    DSV4_CHECK(header.is_object(), "{}: safetensors header is a JSON {}, expected an object", file, json_type(header));

    SafetensorsHeader result;
    result.data_begin = size_t(8 + header_len);
    const std::byte* data_region = data + result.data_begin;
    uint64_t data_size = size - result.data_begin;

    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end) per tensor, parallel to result.tensors
    for (const auto& [name, entry] : header.items()) {
        if (name == "__metadata__") {
            DSV4_CHECK(entry.is_object(), "{}: __metadata__ is a JSON {}, expected an object of strings", file,
                       json_type(entry));
            for (const auto& [key, value] : entry.items()) {
                DSV4_CHECK(value.is_string(), "{}: __metadata__ entry '{}' is a JSON {}, expected a string", file, key,
                           json_type(value));
                result.metadata[key] = value.get<std::string>();
            }
            continue;
        }
        std::pair<uint64_t, uint64_t> range;
        result.tensors.push_back(parse_entry(name, entry, data_region, data_size, file, range));
        ranges.push_back(range);
    }

    // Overlap check: sort non-empty ranges by start; each must begin at or after the furthest end so far.
    std::vector<size_t> order;
    for (size_t i = 0; i < ranges.size(); ++i)
        if (ranges[i].second > ranges[i].first) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a].first < ranges[b].first; });
    for (size_t k = 1; k < order.size(); ++k) {
        size_t prev = order[k - 1], cur = order[k];
        DSV4_CHECK(ranges[cur].first >= ranges[prev].second,
                   "{}: tensor '{}' (bytes {}..{}) overlaps tensor '{}' (bytes {}..{})", file, result.tensors[cur].name,
                   ranges[cur].first, ranges[cur].second, result.tensors[prev].name, ranges[prev].first,
                   ranges[prev].second);
    }
    return result;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    DSV4_CHECK(fd >= 0, "{}: cannot open: {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        fail("{}: cannot stat: {}", path, std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail("{}: not a regular file", path);
    }
    size_t size = size_t(st.st_size);
    if (size < 8) {
        ::close(fd);
        fail("{}: not a safetensors file: {} bytes is shorter than the 8-byte header length", path, size);
    }
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);  // the mapping keeps the file alive
    DSV4_CHECK(map != MAP_FAILED, "{}: cannot mmap {} bytes: {}", path, size, std::strerror(err));

    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = path;
    f->map_ = static_cast<const std::byte*>(map);
    f->size_ = size;
    f->header_ = parse_safetensors(f->map_, f->size_, path);  // on throw, the destructor unmaps
    return f;
}

SafetensorsFile::~SafetensorsFile() {
    if (map_) ::munmap(const_cast<std::byte*>(map_), size_);
}

}  // namespace dsv4
