// attention_inputs (kernels/cuda/attention_inputs) against the launches it replaces, bit for bit: head_rms_norm, then
// apply_ropes on q and kv, then pack_kv_entries into the chunk's entries and into ring entries (each of those is
// tested against the CPU reference in rms_norm_test, rope_test and quant_test). Shapes: V4 (64 heads of 512, rope
// 64), V4-Pro's 128 heads, the fixtures' small heads (rope 16 and 32, an all-rope head), and one the fused kernel
// does not take (odd head_dim: the separate path). Inputs: bf16 normals with whole scale blocks scaled over a wide
// range and blocks of zeros (the amax floor), positions up to 2^20 on the YaRN table, ring slots with gaps and rows
// not stored (-1); every output byte is compared, the ring's untouched entries included. A long piece (1,100 tokens)
// takes the separate launches (attention_inputs_path).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "gpu_test_util.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/attention_inputs/attention_inputs.h"
#include "kernels/cuda/quant/quant.h"
#include "kernels/cuda/rms_norm/rms_norm.h"
#include "kernels/cuda/rope/rope.h"

using namespace dsv4;
using namespace dsv4::gpu_test;

namespace {

struct Shape {
    int64_t heads, head_dim, rope_dim;
};

// Row-major bf16 rows of `dim` whose 64-value blocks are scaled by 2^(-12 .. 12), every seventh block zero.
std::vector<uint16_t> blocky_bf16(Rng& rng, int64_t rows, int64_t dim) {
    std::vector<float> x = rng.normal_bf16(rows * dim);
    for (int64_t i = 0; i < rows * dim; i += 64) {
        const int64_t block = i / 64;
        const float scale = block % 7 == 3 ? 0.0f : std::ldexp(1.0f, int(block * 5 % 25) - 12);
        for (int64_t j = i; j < std::min(i + 64, rows * dim); ++j) x[size_t(j)] = round_bf16(x[size_t(j)] * scale);
    }
    return to_bf16(x);
}

}  // namespace

TEST(GpuAttentionInputs, EqualsNormRopeAndPackLaunchesBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    const RopeParams yarn{160000.0, YarnParams{16.0, 65536, 32.0, 1.0}};
    const float eps = 1e-6f;
    for (Shape c : {Shape{64, 512, 64}, Shape{128, 512, 64}, Shape{4, 96, 32}, Shape{4, 80, 16}, Shape{1, 32, 32},
                    Shape{4, 128, 64}, Shape{3, 34, 10}})
        for (int64_t tokens : {1, 7, 33, 1100})
            for (bool ring : {false, true}) {
                if (tokens == 1100 && c.heads != 64) continue;  // V4 at 1,100 tokens: the separate launches
                const std::string what = "heads " + std::to_string(c.heads) + " head_dim " +
                                         std::to_string(c.head_dim) + " rope " + std::to_string(c.rope_dim) +
                                         " tokens " + std::to_string(tokens) + (ring ? " ring" : "");
                const cpu::RopeTable table = cpu::make_rope_table(c.rope_dim, yarn);
                const int64_t entry = cuda::kv_entry_layout(c.head_dim, c.rope_dim).bytes;
                const int64_t ring_entries = 2 * tokens + 3;
                const std::vector<uint16_t> q = random_bf16(rng, tokens * c.heads * c.head_dim, 3.0f);
                const std::vector<uint16_t> kv = blocky_bf16(rng, tokens, c.head_dim);
                std::vector<int32_t> positions(static_cast<size_t>(tokens)), slots(static_cast<size_t>(tokens));
                std::vector<int32_t> order(static_cast<size_t>(ring_entries));
                std::iota(order.begin(), order.end(), 0);
                std::shuffle(order.begin(), order.end(), rng.engine());
                for (int64_t t = 0; t < tokens; ++t) {
                    positions[size_t(t)] = t == 0 ? 0 : int32_t(rng.engine()() % (1u << (4 + 2 * (t % 9))));
                    slots[size_t(t)] = t % 5 == 2 ? -1 : order[size_t(t)];
                }
                auto d_freq = to_device(table.inv_freq);
                auto d_pos = to_device(positions);
                auto d_slots = to_device(slots);
                struct Outputs {
                    cuda::DeviceBuffer<uint16_t> q, kv;
                    cuda::DeviceBuffer<uint8_t> entries, ring;
                };
                auto fresh = [&] {
                    return Outputs{to_device(q), to_device(kv), poisoned<uint8_t>(size_t(tokens * entry), 0xA5),
                                   poisoned<uint8_t>(size_t(ring_entries * entry), 0x5A)};
                };
                auto params = [&](Outputs& o) {
                    cuda::AttentionInputsParams p;
                    p.q = reinterpret_cast<__nv_bfloat16*>(o.q.get());
                    p.kv = reinterpret_cast<__nv_bfloat16*>(o.kv.get());
                    p.inv_freq = d_freq.get();
                    p.positions = d_pos.get();
                    p.entries = o.entries.get();
                    p.ring = ring ? o.ring.get() : nullptr;
                    p.ring_slots = ring ? d_slots.get() : nullptr;
                    p.tokens = tokens;
                    p.heads = c.heads;
                    p.head_dim = c.head_dim;
                    p.rope_dim = c.rope_dim;
                    p.eps = eps;
                    return p;
                };

                Outputs fused = fresh();
                const cuda::AttentionInputsParams p = params(fused);
                const bool separate = (c.head_dim - c.rope_dim) % 64 != 0 || tokens * c.heads > cuda::kMaxFusedHeads;
                EXPECT_EQ(cuda::attention_inputs_path(p),
                          separate ? cuda::AttentionInputsPath::kSeparate : cuda::AttentionInputsPath::kFused)
                    << what;
                cuda::attention_inputs(p, nullptr);

                Outputs want = fresh();
                const cuda::AttentionInputsParams w = params(want);
                cuda::head_rms_norm({w.q, tokens, c.heads, c.head_dim, c.heads * c.head_dim, eps}, nullptr);
                const cuda::ApplyRopeParams ropes[] = {
                    {w.q, w.inv_freq, w.positions, tokens, c.heads, c.head_dim, c.rope_dim, c.heads * c.head_dim,
                     false},
                    {w.kv, w.inv_freq, w.positions, tokens, 1, c.head_dim, c.rope_dim, c.head_dim, false}};
                cuda::apply_ropes(ropes, nullptr);
                cuda::pack_kv_entries({w.kv, w.entries, nullptr, tokens, c.head_dim, c.rope_dim, c.head_dim}, nullptr);
                if (ring)
                    cuda::pack_kv_entries({w.kv, w.ring, w.ring_slots, tokens, c.head_dim, c.rope_dim, c.head_dim},
                                          nullptr);

                expect_bitwise_bf16(what + ": q", to_host(fused.q), to_host(want.q));
                expect_bitwise_bf16(what + ": kv", to_host(fused.kv), to_host(want.kv));
                expect_bitwise_bytes(what + ": entries", to_host(fused.entries), to_host(want.entries));
                expect_bitwise_bytes(what + ": ring", to_host(fused.ring), to_host(want.ring));
            }
}

TEST(GpuAttentionInputs, RejectsBadArguments) {
    DSV4_REQUIRE_GPU();
    cuda::DeviceBuffer<uint16_t> q(64), kv(64);
    cuda::DeviceBuffer<uint8_t> entries(256);
    cuda::DeviceBuffer<float> freq(8);
    cuda::DeviceBuffer<int32_t> pos(1);
    cuda::AttentionInputsParams p;
    p.q = reinterpret_cast<__nv_bfloat16*>(q.get());
    p.kv = reinterpret_cast<__nv_bfloat16*>(kv.get());
    p.inv_freq = freq.get();
    p.positions = pos.get();
    p.entries = entries.get();
    p.tokens = 1;
    p.heads = 1;
    p.head_dim = 32;
    p.rope_dim = 16;
    p.ring = entries.get();  // a ring without its slots
    EXPECT_THROW(cuda::attention_inputs(p, nullptr), Error);
    p.ring = nullptr;
    p.rope_dim = 15;  // odd
    EXPECT_THROW(cuda::attention_inputs(p, nullptr), Error);
    p.rope_dim = 48;  // past head_dim
    EXPECT_THROW(cuda::attention_inputs(p, nullptr), Error);
    p.rope_dim = 16;
    p.entries = entries.get() + 4;  // not 8-byte aligned
    EXPECT_THROW(cuda::attention_inputs(p, nullptr), Error);
}
