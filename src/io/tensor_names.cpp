// Tensor-name normalization: see tensor_names.h.
#include "io/tensor_names.h"

#include <cctype>

namespace dsv4 {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// "layers.<digits>.attn.norm.weight": the one per-layer name transformers saves differently (spec §16.2).
bool is_layer_attn_norm(std::string_view s) {
    constexpr std::string_view prefix = "layers.", suffix = ".attn.norm.weight";
    if (s.substr(0, prefix.size()) != prefix || !ends_with(s, suffix)) return false;
    std::string_view digits = s.substr(prefix.size(), s.size() - prefix.size() - suffix.size());
    if (digits.empty()) return false;
    for (char ch : digits)
        if (!std::isdigit(static_cast<unsigned char>(ch))) return false;
    return true;
}

}  // namespace

std::string native_tensor_name(std::string_view stored) {
    std::string name(stored);
    // transformers' FP8 integration calls the block scales weight_scale_inv (same values, spec §11.4).
    constexpr std::string_view kScaleInv = ".weight_scale_inv";
    if (ends_with(name, kScaleInv)) name = name.substr(0, name.size() - kScaleInv.size()) + ".scale";

    if (name == "lm_head.weight") return "head.weight";  // transformers' in-memory name of the head
    constexpr std::string_view kModel = "model.";
    if (name.compare(0, kModel.size(), kModel) != 0) return name;
    name.erase(0, kModel.size());
    if (name == "embed_tokens.weight") return "embed.weight";
    if (name == "hc_head.hc_fn") return "hc_head_fn";
    if (name == "hc_head.hc_base") return "hc_head_base";
    if (name == "hc_head.hc_scale") return "hc_head_scale";
    if (is_layer_attn_norm(name))
        return name.substr(0, name.size() - std::string_view("norm.weight").size()) + "kv_norm.weight";
    return name;
}

}  // namespace dsv4
