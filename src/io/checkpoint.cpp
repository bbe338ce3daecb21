// Checkpoint::open: see checkpoint.h. Which files make up the checkpoint: the shards named by
// model.safetensors.index.json if present, else model.safetensors, else every *.safetensors in the directory.
#include "io/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/progress.h"
#include "io/config_json.h"
#include "io/safetensors.h"
#include "io/tensor_names.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct ShardIndex {
    std::string path;
    std::map<std::string, std::string> weight_map;  // stored tensor name -> shard file name
    std::vector<std::string> shards;                // distinct shard file names, in first-seen order
};

ShardIndex read_index(const std::string& path) {
    std::string text = read_text_file(path);
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        fail("{}: not valid JSON: {}", path, e.what());
    }
    DSV4_CHECK(j.is_object(), "{}: expected a JSON object, got {}", path, j.type_name());
    auto wm = j.find("weight_map");
    DSV4_CHECK(wm != j.end(), "{}: missing 'weight_map'", path);
    DSV4_CHECK(wm->is_object(), "{}: 'weight_map' is a JSON {}, expected an object", path, wm->type_name());
    ShardIndex index;
    index.path = path;
    std::set<std::string> seen;
    for (const auto& [name, shard] : wm->items()) {
        DSV4_CHECK(shard.is_string(), "{}: weight_map['{}'] is a JSON {}, expected a shard file name", path, name,
                   shard.type_name());
        const std::string& file = shard.get_ref<const std::string&>();
        fs::path p(file);
        bool inside = !file.empty() && p.is_relative();
        for (const auto& part : p) inside &= part != "..";
        DSV4_CHECK(inside, "{}: weight_map['{}'] = '{}' is not a file inside the checkpoint directory", path, name,
                   file);
        index.weight_map[name] = file;
        if (seen.insert(file).second) index.shards.push_back(file);
    }
    DSV4_CHECK(!index.shards.empty(), "{}: 'weight_map' is empty", path);
    return index;
}

}  // namespace

Checkpoint::~Checkpoint() = default;

std::shared_ptr<Checkpoint> Checkpoint::open(const std::string& dir, const OpenOptions& options) {
    DSV4_CHECK(fs::is_directory(dir), "{}: not a directory (expected a model directory with config.json)", dir);
    std::shared_ptr<Checkpoint> ck(new Checkpoint());
    ck->dir_ = dir;
    const fs::path root(dir);

    const std::string config_path = (root / "config.json").string();
    DSV4_CHECK(fs::exists(config_path), "{}: no config.json in the model directory", dir);
    ParsedConfig parsed = parse_config_json(read_text_file(config_path), config_path);
    ck->config_ = parsed.config;

    std::optional<ShardIndex> index;
    std::vector<std::string> shard_paths, shard_names;  // shard_names: as the index spells them, else file names
    if (fs::path p = root / "model.safetensors.index.json"; fs::exists(p)) {
        index = read_index(p.string());
        for (const auto& s : index->shards) {
            fs::path shard = root / s;
            DSV4_CHECK(fs::exists(shard), "{}: shard '{}' named in the index does not exist", dir, s);
            shard_paths.push_back(shard.string());
            shard_names.push_back(s);
        }
    } else if (fs::path single = root / "model.safetensors"; fs::exists(single)) {
        shard_paths.push_back(single.string());
    } else {
        for (const auto& entry : fs::directory_iterator(root))
            if (entry.path().extension() == ".safetensors") shard_paths.push_back(entry.path().string());
        std::sort(shard_paths.begin(), shard_paths.end());
        DSV4_CHECK(!shard_paths.empty(), "{}: no model.safetensors.index.json, model.safetensors or *.safetensors",
                   dir);
    }
    if (!index)
        for (const auto& p : shard_paths) shard_names.push_back(fs::path(p).filename().string());

    ProgressLine progress(options.show_progress);
    uint64_t bytes = 0;
    size_t n_tensors = 0;
    std::map<std::string, std::string> stored_name_of;  // native name -> name as stored, for duplicate messages
    std::set<std::string> stored_names;
    for (size_t i = 0; i < shard_paths.size(); ++i) {
        auto file = SafetensorsFile::open(shard_paths[i]);
        const std::string& shard_name = shard_names[i];
        for (const TensorRef& t : file->tensors()) {
            if (index) {
                auto it = index->weight_map.find(t.name);
                DSV4_CHECK(it != index->weight_map.end(), "{}: tensor '{}' is in shard {} but not listed in {}",
                           shard_paths[i], t.name, shard_name, index->path);
                DSV4_CHECK(it->second == shard_name, "{}: index {} puts tensor '{}' in shard {}, but it is in {}", dir,
                           index->path, t.name, it->second, shard_name);
            }
            TensorRef ref = t;
            ref.name = native_tensor_name(t.name);
            auto [pos, inserted] = ck->tensors_.emplace(ref.name, ref);
            DSV4_CHECK(inserted, "{}: tensor '{}' is stored twice: as '{}' in {} and as '{}' in {}", dir, ref.name,
                       stored_name_of[ref.name], pos->second.file, t.name, t.file);
            stored_name_of[ref.name] = t.name;
            stored_names.insert(t.name);
            ++n_tensors;
        }
        bytes += file->file_size();
        ck->files_.push_back(std::move(file));
        double s = progress.elapsed_s();
        progress.update(fmt::format("opening {}: shard {}/{}, {} tensors, {}, {:.1f} s, {}/s", dir, i + 1,
                                    shard_paths.size(), n_tensors, format_bytes(bytes), s,
                                    format_bytes(uint64_t(double(bytes) / std::max(s, 1e-3)))));
    }
    if (index) {
        // Every indexed tensor must have turned up in its shard (the loop above checked the converse).
        for (const auto& [name, shard] : index->weight_map)
            DSV4_CHECK(stored_names.count(name) != 0,
                       "{}: index {} lists tensor '{}' in shard {}, but that shard does not contain it", dir,
                       index->path, name, shard);
    }

    // transformers does not instantiate MTP (spec §16.3 item 7), so a checkpoint it saved has no mtp.* tensors
    // although its config still counts num_nextn_predict_layers (default 1). Such a model simply has no MTP.
    if (parsed.shape == ConfigShape::kTransformers) {
        auto it = ck->tensors_.lower_bound("mtp.");
        if (it == ck->tensors_.end() || it->first.compare(0, 4, "mtp.") != 0) {
            ck->config_.num_mtp_layers = 0;
            ck->config_.mtp_compress_ratios.clear();
        }
    }
    progress.finish(fmt::format("opened {}: {} tensors in {} shards, {:.2f} GB, {:.2f} s", dir, n_tensors,
                                shard_paths.size(), double(bytes) / 1e9, progress.elapsed_s()));
    return ck;
}

const TensorRef* Checkpoint::find(std::string_view native_name) const {
    auto it = tensors_.find(native_name);
    return it == tensors_.end() ? nullptr : &it->second;
}

const TensorRef& Checkpoint::get(std::string_view native_name) const {
    const TensorRef* t = find(native_name);
    DSV4_CHECK(t != nullptr, "{}: missing tensor '{}'", dir_, native_name);
    return *t;
}

uint64_t Checkpoint::total_bytes() const {
    uint64_t n = 0;
    for (const auto& [name, t] : tensors_) n += t.nbytes;
    return n;
}

}  // namespace dsv4
