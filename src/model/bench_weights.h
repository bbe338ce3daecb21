// BenchWeights: random weights in checkpoint formats for dsv4 bench, generated directly in memory (no checkpoint is
// written): FP8 e4m3 + E8M0 block scales, MXFP4 routed experts (packed e2m1 + E8M0), BF16 matrices, F32 vectors.
// The routed experts (92% of V4-Flash's bytes) can be left without host bytes for each GPU to generate its own
// (ExpertBytes::kDevice, CudaOptions::random_experts_seed) with the same rule, so they are the same bytes.
// Tested by tests/model/bench_weights_test.cpp (the rule, independence of `held` and `where`) and on the GPU by
// tests/gpu/random_fill_test.cpp and tests/gpu/bench_weights_gpu_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/mix64.h"
#include "core/thread_pool.h"
#include "model/expert_range.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace dsv4 {

// Where the bytes of the held routed experts are made: in host memory, or on the GPU that holds them.
enum class ExpertBytes { kHost, kDevice };

// Every matrix is drawn through a 65,536-entry table of N(0, 1) samples quantized once to its format: value i of a
// matrix with key `key` is table[table_index(key, i)]. Scales are powers of two giving each linear a std of about
// 1/sqrt(fan_in), so every value is finite and the forward stays finite. A routed expert's key is a pure function
// of (seed, layer, expert, projection): any GPU computes the keys of the experts it holds. Every other tensor takes
// the next key of a counter in a fixed walk over the model, so its values depend on the config and seed only.
class BenchWeights {
  public:
    static constexpr int64_t kTable = 65536;

    BenchWeights(uint64_t seed, ThreadPool& pool);

    // Every tensor of `c`; routed experts have bytes only if in `held` and `where` is kHost (the others keep their
    // names, shapes, formats and scale_cols with data == scale == nullptr: a rank of an expert-parallel run reads
    // only its own, and with kDevice the GPU makes them). An expert's values depend on neither `held` nor `where`;
    // every call with the same config gives the same values. The weights point into bytes this object owns.
    ModelWeights build(const ModelConfig& c, ExpertRange held, ExpertBytes where);

    uint64_t host_bytes() const { return host_bytes_; }  // of every build so far

    // The table of routed experts: a packed pair of e2m1 codes per entry ([65536] bytes).
    const std::vector<uint8_t>& fp4_table() const { return fp4_; }
    // The key of projection `projection` (0: w1, 1: w2, 2: w3) of routed expert `expert` of layer `layer`.
    static uint64_t expert_key(uint64_t seed, int64_t layer, int64_t expert, int projection);
    // The E8M0 byte of every 32-value block of a routed expert with `cols` input columns.
    static uint8_t expert_scale_byte(int64_t cols);
    // The table entry of value i: one hash per four values, 16 bits each, low bits first.
    static int64_t table_index(uint64_t key, int64_t i) {
        return int64_t((mix64(key + uint64_t(i & ~int64_t(3))) >> (16 * (i & 3))) & 0xFFFF);
    }
    // out[i] = table[table_index(key, i)] for i in [0, count), in parallel on the pool (uint8_t or uint16_t).
    template <typename T>
    void fill(T* out, int64_t count, const std::vector<T>& table, uint64_t key);

  private:
    static constexpr float kFp8CodeStd = 64.0f;  // e4m3 codes ~ N(0, 64^2), clamped to +-448 (7 sigma)
    static constexpr float kFp4CodeStd = 1.5f;   // e2m1 codes ~ N(0, 1.5^2), saturating at +-6

    uint64_t next_key();
    uint8_t* take(size_t bytes);
    static uint8_t e8m0_for(double code_std, int64_t fan_in);

    QuantizedMatrix fp8(const std::string& name, int64_t rows, int64_t cols);
    // No key: shapes and format only, no bytes.
    QuantizedMatrix fp4(const std::string& name, int64_t rows, int64_t cols, std::optional<uint64_t> key);
    QuantizedMatrix bf16(const std::string& name, int64_t rows, int64_t cols, double std);
    Vec normals(int64_t count, double std);
    Vec uniform(int64_t count, double lo, double hi);
    Vec norm(int64_t count);
    HcWeights hc(int64_t rows, int64_t scales, const ModelConfig& c);
    CompressorWeights compressor(const std::string& p, int64_t ratio, int64_t head_dim, const ModelConfig& c);
    std::vector<int32_t> tid2eid(int64_t vocab, int64_t k, int64_t experts);

    uint64_t seed_, counter_ = 0, host_bytes_ = 0;
    ThreadPool& pool_;
    std::vector<float> normal_;
    std::vector<uint8_t> fp8_, fp4_;
    std::vector<std::unique_ptr<uint8_t[]>> owned_;
};

}  // namespace dsv4
