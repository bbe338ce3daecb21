// Precision: where `model` numerics rounds and quantizes. See numerics.h.
#include "model/numerics.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/number_formats.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/quant_sim.h"

namespace dsv4 {
namespace {

constexpr int64_t kActQuantBlock = 128;  // activation FP8 blocks before FP8/FP4 GEMMs
constexpr int64_t kKvQuantBlock = 64;    // KV nope FP8 simulation
constexpr int64_t kFp4Block = 32;        // indexer FP4 simulation

// FP8 round trip of a row in blocks of `block`; a trailing partial block (only in tiny test models, whose
// widths need not be multiples of 128) is quantized as a block of its own.
void fp8_blocks(float* x, int64_t n, int64_t block) {
    for (int64_t b = 0; b < n; b += block) {
        int64_t len = std::min(block, n - b);
        cpu::fp8_round_trip(x + b, len, len);
    }
}

}  // namespace

Numerics parse_numerics(std::string_view name) {
    if (name == "reference") return Numerics::kReference;
    if (name == "model") return Numerics::kModel;
    fail("unknown numerics '{}': use 'reference' (float32, as transformers) or 'model' (official DeepSeek-V4)", name);
}

const char* numerics_name(Numerics n) { return n == Numerics::kModel ? "model" : "reference"; }

void check_numerics_support(const ModelConfig& c, Numerics numerics) {
    if (numerics != Numerics::kModel) return;
    bool any_csa = false;
    for (int64_t block = 0; block < c.num_layers + c.num_mtp_layers; ++block)
        any_csa |= c.block_compress_ratio(block) == 4;
    const int64_t n = c.index_head_dim;
    DSV4_CHECK(!any_csa || (n > 0 && (n & (n - 1)) == 0),
               "index_head_dim {} is not supported in model numerics: the indexer's Hadamard rotation needs a power "
               "of two (DeepSeek's code too); use --numerics reference",
               n);
}

void Precision::activation(float* x, int64_t n) const {
    if (model()) cpu::round_bf16(x, n);
}

void Precision::linear(const float* x, int64_t tokens, const QuantizedMatrix& w, float* y) const {
    if (model() && w.is_low_precision()) {
        std::vector<float> xq(x, x + tokens * w.cols);
        pool_.parallel_for(tokens, [&](int64_t begin, int64_t end) {
            for (int64_t t = begin; t < end; ++t) fp8_blocks(xq.data() + t * w.cols, w.cols, kActQuantBlock);
        });
        cpu::linear(pool_, xq.data(), tokens, w, y);
    } else {
        cpu::linear(pool_, x, tokens, w, y);
    }
    activation(y, tokens * w.rows);
}

void Precision::linear_f32(const float* x, int64_t tokens, const QuantizedMatrix& w, float* y) const {
    cpu::linear(pool_, x, tokens, w, y);
}

void Precision::grouped_linear(const float* x, int64_t tokens, const QuantizedMatrix& w, int64_t groups,
                               float* y) const {
    DSV4_ASSERT(w.rows % groups == 0, "grouped weight {} rows {} not divisible by {} groups", w.name, w.rows, groups);
    const int64_t out_per_group = w.rows / groups, in_per_group = w.cols, in_total = groups * in_per_group;
    pool_.parallel_for(w.rows, [&](int64_t begin, int64_t end) {
        std::vector<float> row(static_cast<size_t>(in_per_group));
        for (int64_t r = begin; r < end; ++r) {
            cpu::dequantize_row(w, r, row.data());
            const int64_t g = r / out_per_group;
            for (int64_t t = 0; t < tokens; ++t) {
                const float* xg = x + t * in_total + g * in_per_group;
                float acc = 0.0f;
                for (int64_t k = 0; k < in_per_group; ++k) acc += xg[k] * row[static_cast<size_t>(k)];
                y[t * w.rows + r] = acc;
            }
        }
    });
    activation(y, tokens * w.rows);
}

void Precision::head_rms_norm(float* q, int64_t n, float eps) const {
    if (!model()) {
        double sum = 0.0;
        for (int64_t i = 0; i < n; ++i) sum += double(q[i]) * q[i];
        float r = 1.0f / std::sqrt(float(sum / double(n)) + eps);
        for (int64_t i = 0; i < n; ++i) q[i] *= r;
        return;
    }
    // q.square() -> bf16; .mean() accumulates in f32 and rounds; + eps -> bf16; rsqrt -> bf16; q * r -> bf16.
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += round_bf16(q[i] * q[i]);
    float mean = round_bf16(sum / float(n));
    float r = round_bf16(1.0f / std::sqrt(round_bf16(mean + eps)));
    for (int64_t i = 0; i < n; ++i) q[i] = round_bf16(q[i] * r);
}

void Precision::kv_nope_fp8(float* x, int64_t n) const {
    if (model()) fp8_blocks(x, n, kKvQuantBlock);
}

void Precision::indexer_rotate_fp4(float* x, int64_t n) const {
    if (!model()) return;
    cpu::hadamard_transform(x, n);
    cpu::round_bf16(x, n);
    for (int64_t b = 0; b < n; b += kFp4Block) cpu::fp4_round_trip(x + b, std::min(kFp4Block, n - b), std::min(kFp4Block, n - b));
}

}  // namespace dsv4
