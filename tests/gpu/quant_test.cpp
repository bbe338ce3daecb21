// The quantization kernels (kernels/cuda/quant) against the CPU reference of `model` numerics, bit for bit:
// FP8 GEMM-input quantization (codes, scales and dequantized values), the KV nope FP8 round trip, the indexer
// Hadamard + FP4 round trip, and the packed KV / indexer-key cache entries (decoded here on the host, unpacked on
// the device). Random inputs with odd sizes and partial blocks; outputs poisoned before every launch. The indexer
// dims beyond 32, 64 and 128 (2 .. 16, 256, 1024: small models) run the generic CTA-per-row kernel, and entries with
// an odd nope part (one pad byte before the rope values) are packed and decoded too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "gpu_test_util.h"
#include "kernels/cpu/quant_sim.h"
#include "kernels/cuda/quant/quant.h"
#include "kernels/cuda/rope/rope.h"

using namespace dsv4;
using namespace dsv4::gpu_test;

namespace {

// Rows of bf16 values whose scale varies per row over many binades (also below the 1e-4 amax floor), with a
// zero run in some rows so all-zero blocks occur.
std::vector<float> varied_rows(Rng& rng, int64_t rows, int64_t cols) {
    std::vector<float> x(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
        const float scale = std::ldexp(1.0f, int(rng.uniform(-24.0f, 12.0f))) * rng.uniform(0.5f, 1.0f);
        for (int64_t c = 0; c < cols; ++c) x[size_t(r * cols + c)] = round_bf16(rng.normal(scale));
        if (r % 3 == 1)
            for (int64_t c = 0; c < std::min<int64_t>(cols, 160); ++c) x[size_t(r * cols + c)] = 0.0f;
    }
    return x;
}

// The CPU reference of a row quantized in blocks (a trailing partial block is its own block).
void fp8_blocks(float* x, int64_t n, int64_t block) {
    for (int64_t b = 0; b < n; b += block) cpu::fp8_round_trip(x + b, std::min(block, n - b), std::min(block, n - b));
}

float fp8_block_scale(const float* x, int64_t n) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
    return ue8m0_ceil_pow2(std::max(amax, 1e-4f) * (1.0f / kE4M3Max));
}

// Model numerics of the indexer q/keys: Hadamard, bf16, FP4 round trip per 32.
void indexer_reference(float* x, int64_t n) {
    cpu::hadamard_transform(x, n);
    cpu::round_bf16(x, n);
    for (int64_t b = 0; b < n; b += 32) {
        const int64_t len = std::min<int64_t>(32, n - b);  // a dim below 32 is one partial block
        cpu::fp4_round_trip(x + b, len, len);
    }
}

// index_head_dims: the warp-per-row kernels (32, 64, 128) and the generic path (the others).
const std::vector<int64_t> kIndexerDims = {32, 64, 128, 2, 4, 8, 16, 256, 1024};

std::string indexer_path_name(int64_t dim) {
    return cuda::indexer_hadamard_path(dim) == cuda::IndexerHadamardPath::kGeneric ? " (generic)" : " (warp)";
}

}  // namespace

TEST(GpuQuant, ActQuantFp8MatchesCpuBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    for (int64_t rows : {1, 7, 33})
        for (int64_t cols : {64, 320, 1000, 7168}) {
            const int64_t stride = cols + 8 * (rows % 2), nb = (cols + 127) / 128;
            const std::vector<float> x = varied_rows(rng, rows, stride);
            auto d_x = to_device(to_bf16(x));
            auto d_q = poisoned<uint8_t>(size_t(rows * cols));
            auto d_s = poisoned<float>(size_t(rows * nb));
            cuda::act_quant_fp8(
                {reinterpret_cast<const __nv_bfloat16*>(d_x.get()), d_q.get(), d_s.get(), rows, cols, stride}, nullptr);
            const auto q = to_host(d_q);
            const auto s = to_host(d_s);

            std::vector<float> want_value(static_cast<size_t>(rows * cols)), got_value(want_value.size()),
                want_s(s.size());
            std::vector<uint8_t> want_q(q.size());
            for (int64_t r = 0; r < rows; ++r) {
                float* w = want_value.data() + r * cols;
                std::copy_n(x.data() + r * stride, cols, w);
                for (int64_t b = 0; b < nb; ++b)
                    want_s[size_t(r * nb + b)] = fp8_block_scale(w + b * 128, std::min<int64_t>(128, cols - b * 128));
                fp8_blocks(w, cols, 128);
                for (int64_t c = 0; c < cols; ++c) {
                    const size_t i = size_t(r * cols + c);
                    const float sc = want_s[size_t(r * nb + c / 128)];
                    want_q[i] = f32_to_e4m3(w[c] / sc);
                    got_value[i] = e4m3_to_f32(q[i]) * s[size_t(r * nb + c / 128)];
                }
            }
            const std::string what = "act_quant rows " + std::to_string(rows) + " cols " + std::to_string(cols);
            expect_bitwise_f32(what + " scales", s, want_s);
            expect_bitwise_bytes(what + " e4m3 codes", q, want_q);
            expect_bitwise_f32(what + " dequantized vs cpu::fp8_round_trip", got_value, want_value);
        }
}

TEST(GpuQuant, KvNopeFp8RoundTripMatchesCpuBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    struct Shape {
        int64_t head_dim, nope;
    };
    for (int64_t rows : {1, 7, 33})
        for (Shape sh : {Shape{512, 448}, Shape{96, 64}, Shape{228, 164}}) {
            const std::vector<float> x = varied_rows(rng, rows, sh.head_dim);
            std::vector<float> want = x;
            for (int64_t r = 0; r < rows; ++r) fp8_blocks(want.data() + r * sh.head_dim, sh.nope, 64);
            auto d_x = to_device(to_bf16(x));
            cuda::kv_nope_fp8_round_trip({reinterpret_cast<__nv_bfloat16*>(d_x.get()), rows, sh.nope, sh.head_dim},
                                         nullptr);
            expect_bitwise_bf16("kv nope fp8 rows " + std::to_string(rows) + " nope " + std::to_string(sh.nope) +
                                    " (rope dims untouched)",
                                to_host(d_x), to_bf16(want));
        }
}

TEST(GpuQuant, IndexerRotateFp4MatchesCpuBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    for (int64_t dim : kIndexerDims)
        for (int64_t rows : {1, 7, 33}) {
            const int64_t stride = dim + 16;
            const std::vector<float> x = varied_rows(rng, rows, stride);
            std::vector<float> want = x;
            for (int64_t r = 0; r < rows; ++r) indexer_reference(want.data() + r * stride, dim);
            auto d_x = to_device(to_bf16(x));
            cuda::indexer_rotate_fp4({reinterpret_cast<__nv_bfloat16*>(d_x.get()), rows, dim, stride}, nullptr);
            expect_bitwise_bf16("indexer rotate fp4 dim " + std::to_string(dim) + indexer_path_name(dim) + " rows " +
                                    std::to_string(rows),
                                to_host(d_x), to_bf16(want));
        }
}

// The indexer's queries: RoPE of each head's last rope_dim values in the rotation's launch equals apply_rope and then
// the rotation, bit for bit, on every kernel path (a pair across two lanes at dim 32, within a lane above, the
// generic kernel's shared row), rope_dim a part of the row or all of it.
TEST(GpuQuant, IndexerRopeInTheRotationEqualsApplyRopeThenRotationBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    for (int64_t dim : kIndexerDims)
        for (int64_t rope_dim : {std::max<int64_t>(2, dim / 2), dim})
            for (int64_t heads : {1, 3, 8}) {
                const int64_t tokens = 5, rows = tokens * heads;
                const std::vector<float> x = varied_rows(rng, rows, dim);
                std::vector<int32_t> positions(static_cast<size_t>(tokens));
                for (int32_t& p : positions) p = int32_t(rng.uniform(0.0f, 300000.0f));
                std::vector<float> inv_freq(static_cast<size_t>(rope_dim / 2));
                for (size_t i = 0; i < inv_freq.size(); ++i)
                    inv_freq[i] = std::pow(10000.0f, -2.0f * float(i) / float(rope_dim));
                auto d_positions = to_device(positions);
                auto d_inv_freq = to_device(inv_freq);
                auto d_want = to_device(to_bf16(x));
                auto d_got = to_device(to_bf16(x));
                auto* want = reinterpret_cast<__nv_bfloat16*>(d_want.get());
                auto* got = reinterpret_cast<__nv_bfloat16*>(d_got.get());
                cuda::ApplyRopeParams rope;
                rope.x = want;
                rope.inv_freq = d_inv_freq.get();
                rope.positions = d_positions.get();
                rope.tokens = tokens;
                rope.heads = heads;
                rope.head_dim = dim;
                rope.rope_dim = rope_dim;
                rope.token_stride = heads * dim;
                cuda::apply_rope(rope, nullptr);
                cuda::indexer_rotate_fp4({want, rows, dim, dim}, nullptr);
                cuda::IndexerRotateParams fused{got, rows, dim, dim};
                fused.rope_inv_freq = d_inv_freq.get();
                fused.positions = d_positions.get();
                fused.rope_dim = rope_dim;
                fused.rope_heads = heads;
                cuda::indexer_rotate_fp4(fused, nullptr);
                expect_bitwise_bf16("indexer rope + rotate dim " + std::to_string(dim) + indexer_path_name(dim) +
                                        " rope_dim " + std::to_string(rope_dim) + " heads " + std::to_string(heads),
                                    to_host(d_got), to_host(d_want));
            }
}

TEST(GpuQuant, PackedIndexerKeysDecodeToCpuRoundTrip) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    for (int64_t dim : kIndexerDims)
        for (int64_t rows : {1, 7, 33}) {
            const int64_t bytes = cuda::indexer_key_bytes(dim), n_slots = 2 * rows;
            const std::vector<float> x = varied_rows(rng, rows, dim);
            std::vector<int32_t> slots(static_cast<size_t>(rows));
            for (int64_t r = 0; r < rows; ++r) slots[size_t(r)] = int32_t(2 * (rows - 1 - r) + 1);  // reversed, gaps
            auto d_x = to_device(to_bf16(x));
            auto d_slots = to_device(slots);
            std::vector<std::vector<uint8_t>> caches;
            for (uint8_t poison_byte : {uint8_t(0xFF), uint8_t(0x00)}) {  // every byte of a packed code is valid
                auto d_cache = poisoned<uint8_t>(size_t(n_slots * bytes), poison_byte);
                cuda::pack_indexer_keys(
                    {reinterpret_cast<const __nv_bfloat16*>(d_x.get()), d_cache.get(), d_slots.get(), rows, dim, dim},
                    nullptr);
                caches.push_back(to_host(d_cache));
            }
            const std::string what =
                "indexer keys dim " + std::to_string(dim) + indexer_path_name(dim) + " rows " + std::to_string(rows);
            std::vector<uint8_t> written[2];
            std::vector<float> got, want;
            for (int64_t r = 0; r < rows; ++r) {
                std::vector<float> ref(x.begin() + r * dim, x.begin() + (r + 1) * dim);
                indexer_reference(ref.data(), dim);
                want.insert(want.end(), ref.begin(), ref.end());
                for (int k = 0; k < 2; ++k) {
                    const uint8_t* e = caches[size_t(k)].data() + slots[size_t(r)] * bytes;
                    written[k].insert(written[k].end(), e, e + bytes);
                }
                const uint8_t* e = caches[0].data() + slots[size_t(r)] * bytes;
                for (int64_t i = 0; i < dim; ++i) {
                    const uint8_t nibble = (e[i / 2] >> (4 * (i % 2))) & 0xF;
                    got.push_back(e2m1_to_f32(nibble) * e8m0_to_f32(e[dim / 2 + i / 32]));
                }
            }
            expect_bitwise_bytes(what + " written under two poisons", written[0], written[1]);
            expect_bitwise_f32(what + " decoded vs cpu Hadamard + FP4", got, want);
        }
}

TEST(GpuQuant, PackedKvEntriesDecodeToCpuRoundTrip) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    struct Shape {
        int64_t head_dim, rope;
    };
    EXPECT_EQ(cuda::kv_entry_layout(512, 64).bytes, 584);
    for (int64_t rows : {1, 7, 33})
        for (Shape sh : {Shape{512, 64}, Shape{96, 32}, Shape{80, 16}, Shape{228, 64}, Shape{33, 16}, Shape{40, 12},
                         Shape{257, 6}, Shape{32, 32}}) {
            const cuda::KvEntryLayout l = cuda::kv_entry_layout(sh.head_dim, sh.rope);
            const int64_t n_slots = 2 * rows + 1, stride = sh.head_dim + 8;
            const std::vector<float> x = varied_rows(rng, rows, stride);
            std::vector<int32_t> slots(static_cast<size_t>(rows));
            for (int64_t r = 0; r < rows; ++r) slots[size_t(r)] = int32_t(2 * (rows - 1 - r) + 1);
            auto d_x = to_device(to_bf16(x));
            auto d_slots = to_device(slots);
            auto d_cache = poisoned<uint8_t>(size_t(n_slots * l.bytes));
            cuda::pack_kv_entries({reinterpret_cast<const __nv_bfloat16*>(d_x.get()), d_cache.get(), d_slots.get(),
                                   rows, sh.head_dim, sh.rope, stride},
                                  nullptr);
            auto d_out = poisoned<uint16_t>(size_t(rows * sh.head_dim));
            cuda::unpack_kv_entries({d_cache.get(), d_slots.get(), reinterpret_cast<__nv_bfloat16*>(d_out.get()), rows,
                                     sh.head_dim, sh.rope, sh.head_dim},
                                    nullptr);
            const auto cache = to_host(d_cache);
            // Rows with a negative slot are not stored: packing other rows to -1 leaves every byte as it was.
            auto d_skip = to_device(std::vector<int32_t>(static_cast<size_t>(rows), -1));
            cuda::pack_kv_entries({reinterpret_cast<const __nv_bfloat16*>(d_out.get()), d_cache.get(), d_skip.get(),
                                   rows, sh.head_dim, sh.rope, sh.head_dim},
                                  nullptr);
            expect_bitwise_bytes("kv entries: rows with slot -1 are not stored", to_host(d_cache), cache);

            std::vector<float> want, decoded;
            std::vector<uint8_t> pad, zeros;
            for (int64_t r = 0; r < rows; ++r) {
                std::vector<float> ref(x.begin() + r * stride, x.begin() + r * stride + sh.head_dim);
                fp8_blocks(ref.data(), l.nope, 64);
                want.insert(want.end(), ref.begin(), ref.end());
                const uint8_t* e = cache.data() + slots[size_t(r)] * l.bytes;
                for (int64_t i = 0; i < l.nope; ++i)
                    decoded.push_back(e4m3_to_f32(e[i]) * e8m0_to_f32(e[l.scale_offset + i / 64]));
                for (int64_t i = 0; i < l.rope; ++i) {
                    uint16_t b;
                    std::memcpy(&b, e + l.rope_offset + 2 * i, 2);
                    decoded.push_back(bf16_to_f32(b));
                }
                pad.insert(pad.end(), e + l.scale_offset + l.n_scales, e + l.bytes);
                if (l.rope_offset > l.nope) pad.push_back(e[l.nope]);  // the byte after an odd nope part
            }
            zeros.assign(pad.size(), 0);
            const std::string what =
                "kv entries head_dim " + std::to_string(sh.head_dim) + " rows " + std::to_string(rows);
            expect_bitwise_f32(what + " decoded on the host vs cpu FP8 round trip", decoded, want);
            expect_bitwise_bytes(what + " zero padding", pad, zeros);
            expect_bitwise_bf16(what + " unpacked on the device", to_host(d_out), to_bf16(want));
        }
}

TEST(GpuQuant, LaunchersRejectBadContracts) {
    DSV4_REQUIRE_GPU();
    EXPECT_THROW(cuda::indexer_rotate_fp4({nullptr, 1, 96, 96}, nullptr), Error);
    __nv_bfloat16* any = reinterpret_cast<__nv_bfloat16*>(uintptr_t(64));
    EXPECT_THROW(cuda::indexer_rotate_fp4({any, 1, 96, 96}, nullptr), Error) << "96 is no power of two";
    EXPECT_THROW(cuda::indexer_rotate_fp4({any, 1, 1, 1}, nullptr), Error) << "dim 1 has no packed pair";
    EXPECT_THROW(cuda::act_quant_fp8({nullptr, nullptr, nullptr, 1, 128, 128}, nullptr), Error);
    uint8_t* fake = reinterpret_cast<uint8_t*>(uintptr_t(64));
    EXPECT_THROW(
        cuda::pack_kv_entries({reinterpret_cast<const __nv_bfloat16*>(fake), fake, nullptr, 1, 96, 98, 96}, nullptr),
        Error)
        << "rope_dim above head_dim";
}
