// Everything one sequence carries between forward calls (spec §12, reference layout in f32): per layer the
// sliding-window ring of raw KV, the compressed entries, the indexer keys and the compressor states. With it
// the forward pass is chunk-invariant: any split into prefill chunks and decode steps gives the same logits.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/compressor.h"
#include "model/model_config.h"

namespace dsv4 {

struct LayerState {
    std::vector<float> window;       // [W, head_dim] ring: position p lives in slot p % W
    std::vector<float> compressed;   // [entries, head_dim] finished compressed KV entries, entry w covers [w*m, w*m+m)
    std::vector<float> index_keys;   // [entries, index_head_dim] (CSA layers)
    CompressorState compressor;      // CSA/HCA layers
    CompressorState index_compressor;  // CSA layers
};

// State a backend keeps outside host memory (the CUDA backend's slot of its device state pool); released with
// the SequenceState.
struct DeviceSequence {
    virtual ~DeviceSequence() = default;
};

struct SequenceState {
    int64_t position = 0;            // tokens consumed so far
    std::vector<LayerState> layers;  // num_layers (CPU backend)
    std::unique_ptr<DeviceSequence> device;  // GPU backends; null on the CPU
};

}  // namespace dsv4
