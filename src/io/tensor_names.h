// Tensor-name normalization: whatever a checkpoint file calls a tensor, the engine looks it up by the Hub's
// native DeepSeek name (spec §11.1). Handles the names transformers' save_pretrained writes (spec §16.2) and the
// FP8 scale suffix of transformers' FP8 integration. Tested in tests/io/checkpoint_test.cpp.
#pragma once

#include <string>
#include <string_view>

namespace dsv4 {

// The native name of a tensor stored as `stored`; native names map to themselves.
std::string native_tensor_name(std::string_view stored);

}  // namespace dsv4
