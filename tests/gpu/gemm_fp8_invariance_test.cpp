// gemm_fp8's bitwise invariances (its tensor-core paths; see gemm_fp8_test.cpp for the comparison with cpu::linear): a
// row's output is the same alone and in calls of any row count, at another offset and under every tile shape (batch
// and chunk invariance), rows from the live count on are zero, the post-mix epilogue equals the GEMM then hc_post, a
// weight's columns are the same stacked under another weight, and a captured graph replays bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "gemm_fp8_test_common.h"
#include "gemm_test_common.h"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/gemm_fp8/gemm_fp8.h"
#include "kernels/cuda/gemm_fp8/gemm_fp8_kernels.h"
#include "kernels/cuda/mhc/mhc.h"

namespace dsv4::gpu_test {
namespace {

// Device operands of the row-invariance tests: `rows` rows of FP8 activations and an [n, k] FP8 weight.
struct Fp8Operands {
    DeviceFp8Act a;
    cuda::DeviceBuffer<uint8_t> w;
    cuda::DeviceBuffer<float> w_scale;
    int64_t n, k;
};

// spread_rows: row r's activations scaled by 2^((37 r) % 241 - 120), so that their UE8M0 scales times the weights'
// run from subnormal past 2^100: the warpgroup tile's promotion is one FFMA only where a scale lies in [2^-100,
// 2^100] (wgmma_linear.cuh, scale_exact), and its rows must keep the bits of the tiles that round the product first.
Fp8Operands make_operands(Rng& rng, int64_t rows, int64_t n, int64_t k, bool spread_rows = false) {
    const HostWeight w = random_fp8_weight(rng, n, k, true);
    std::vector<float> x = random_activations(rng, rows, k);
    if (spread_rows)
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = 0; i < k; ++i)
                x[size_t(r * k + i)] = round_bf16(x[size_t(r * k + i)] * std::ldexp(1.0f, int(r * 37 % 241) - 120));
    return {quantize_on_device(x, rows, k), to_device(w.data), weight_scales_on_device(w), n, k};
}

// fp8_gemm's parameters for rows [row0, row0 + rows) of `o` into y, with workspace `ws`, on `path`.
cuda::Fp8GemmParams operand_params(const Fp8Operands& o, int64_t row0, int64_t rows, uint16_t* y,
                                   const cuda::DeviceBuffer<uint8_t>& ws, cuda::Fp8GemmPath path) {
    cuda::Fp8GemmParams p;
    p.a = o.a.q.get() + row0 * o.k;
    p.a_scale = o.a.scale.get() + row0 * ((o.k + 127) / 128);
    p.w = o.w.get();
    p.w_scale = o.w_scale.get();
    p.y = reinterpret_cast<__nv_bfloat16*>(y);
    p.m = rows;
    p.n = o.n;
    p.k = o.k;
    p.workspace = ws.get();
    p.workspace_bytes = ws.bytes();
    p.path = path;
    return p;
}

// y of rows [row0, row0 + rows) through fp8_gemm on `path` with its own tiling, or through launch_fp8_mma with a
// given tile (block_m > 0); empty when the contract refuses that tile for this shape (decode tiles stage at most
// 96 KiB).
std::vector<uint16_t> run_rows(const cuda::CublasLt& lt, const Fp8Operands& o, int64_t row0, int64_t rows,
                               cuda::Fp8GemmPath path = cuda::Fp8GemmPath::kMma, int block_m = 0, int block_n = 0,
                               cudaStream_t stream = nullptr, const int32_t* rows_live = nullptr) {
    auto y = poisoned<uint16_t>(size_t(rows * o.n));
    const cuda::Fp8GemmConfig own = cuda::fp8_gemm_config(rows, o.n, o.k, device_sms(), path);
    cuda::DeviceBuffer<uint8_t> ws(std::max<size_t>(256, cuda::fp8_gemm_workspace_bytes(own, rows, o.n, o.k)));
    cuda::Fp8GemmParams p = operand_params(o, row0, rows, y.get(), ws, path);
    p.rows_live = rows_live;
    if (block_m == 0) {
        cuda::fp8_gemm(lt, p, stream);
    } else {
        cuda::Fp8GemmConfig config = cuda::fp8_gemm_config(rows, o.n, o.k, device_sms(), p.path);
        config.block_m = block_m;
        config.block_n = block_n;
        if (!cuda::fp8_gemm_can_implement(p, config).empty()) return {};
        DSV4_CUDA_CHECK(cuda::launch_fp8_mma(p, config, stream));
    }
    return to_host(y);
}

// On the device: 37 rows in one call equal each row computed alone (M = 1), bit for bit, at decode shapes.
TEST(GemmFp8, SkinnyRowsBitwiseIndependentOfM) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    cuda::CublasLt lt;
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{4096, 8192}, {2048, 4096}, {96, 528}}) {
        const Fp8Operands o = make_operands(rng, 37, n, k);
        const std::vector<uint16_t> all = run_rows(lt, o, 0, 37, cuda::Fp8GemmPath::kSkinny);
        for (int64_t r : {int64_t(0), int64_t(5), int64_t(36)}) {
            const std::vector<uint16_t> alone = run_rows(lt, o, r, 1, cuda::Fp8GemmPath::kSkinny);
            EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + r * n))
                << n << "x" << k << " row " << r << " alone differs from the 37-row call";
        }
    }
}

// bf16 bits as an ordered integer (difference = distance in ulps).
int bf16_ordered(uint16_t b) {
    return (b & 0x8000) ? -int(b & 0x7FFF) : int(b);
}

// Row r of a call that started at row0 against row r computed alone; prints and checks the count of differing
// elements and the worst difference in bf16 ulps.
void expect_rows_bitwise(const std::string& what, const std::vector<uint16_t>& got, int64_t row0, int64_t rows,
                         const std::map<int64_t, std::vector<uint16_t>>& alone, int64_t n) {
    int64_t compared = 0, differing = 0, worst_ulps = 0, worst_row = -1;
    for (const auto& [r, ref] : alone) {
        if (r < row0 || r >= row0 + rows) continue;
        for (int64_t j = 0; j < n; ++j) {
            const uint16_t a = got[size_t((r - row0) * n + j)], b = ref[size_t(j)];
            ++compared;
            if (a == b) continue;
            ++differing;
            const int64_t ulps = std::abs(bf16_ordered(a) - bf16_ordered(b));
            if (ulps > worst_ulps) worst_ulps = ulps, worst_row = r;
        }
    }
    std::printf("[ bitwise  ] %s: %lld elements compared, %lld differ (worst %lld ulps, row %lld)\n", what.c_str(),
                (long long)compared, (long long)differing, (long long)worst_ulps, (long long)worst_row);
    EXPECT_GT(compared, 0) << what;
    EXPECT_EQ(differing, 0) << what;
}

// A row's bits do not depend on M, on the rows beside it, on where in a tile it lands, or on the tile shape:
// probe rows computed alone (M = 1) against 37-, 256- and 300-row calls, calls starting at other rows, and every
// tile shape forced, at decode and prefill shapes of V4-Flash and at odd ones (partial K block, partial tiles).
TEST(GemmFp8, MmaRowsBitwiseIndependentOfBatchAndTile) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    cuda::CublasLt lt;
    const int64_t total = 300;
    const std::vector<int64_t> probes = {0, 5, 7, 12, 15, 16, 36, 43, 63, 64, 70, 71, 100, 255, 262, 299};
    struct Call {
        int64_t row0, rows;
        int block_m, block_n;  // 0: fp8_gemm's choice
    };
    struct Shape {
        int64_t n, k;
        bool spread_rows;  // make_operands': activation scales from subnormal past 2^100
    };
    for (const auto& [n, k, spread_rows] : {Shape{4096, 8192, false}, Shape{2048, 4096, false},
                                            Shape{32768, 1024, false}, Shape{96, 528, false}, Shape{130, 272, false},
                                            Shape{2048, 1024, true}}) {
        const Fp8Operands o = make_operands(rng, total, n, k, spread_rows);
        std::map<int64_t, std::vector<uint16_t>> alone;
        for (int64_t r : probes) alone[r] = run_rows(lt, o, r, 1);
        for (const Call& c :
             {Call{0, 37, 0, 0}, Call{0, 256, 0, 0}, Call{7, 256, 0, 0}, Call{0, 300, 16, 8}, Call{0, 300, 16, 16},
              Call{3, 297, 64, 128}, Call{100, 1, 64, 128}, Call{262, 1, 16, 8}, Call{5, 1, 16, 16},
              Call{0, 300, 16, 32}, Call{299, 1, 16, 32}, Call{0, 300, 128, 128}, Call{3, 297, 128, 128},
              Call{100, 1, 128, 128}, Call{8, 8, 16, 16}, Call{60, 7, 16, 8}, Call{64, 9, 16, 32}}) {
            const std::vector<uint16_t> got =
                run_rows(lt, o, c.row0, c.rows, cuda::Fp8GemmPath::kMma, c.block_m, c.block_n);
            if (got.empty()) {  // e.g. 16 x 32 tiles of 300 rows at K = 8192: 128 KiB of staged products
                // ... but never the warpgroup tile where it can run: it must not drop out of the test unseen.
                ASSERT_FALSE(c.block_m == 128 && cuda::device_has_wgmma() && k % 128 == 0)
                    << "the 128 x 128 tile was refused at " << n << " x " << k << ", rows " << c.rows;
                continue;
            }
            const cuda::Fp8GemmConfig chosen =
                cuda::fp8_gemm_config(c.rows, n, k, device_sms(), cuda::Fp8GemmPath::kMma, cuda::device_has_wgmma());
            char what[160];
            std::snprintf(what, sizeof what, "mma %lldx%lld%s, rows %lld..%lld, tile %dx%d vs rows alone",
                          (long long)n, (long long)k, spread_rows ? " (spread rows)" : "", (long long)c.row0,
                          (long long)(c.row0 + c.rows - 1), c.block_m ? c.block_m : chosen.block_m,
                          c.block_m ? c.block_n : chosen.block_n);
            expect_rows_bitwise(what, got, c.row0, c.rows, alone, n);
        }
    }
}

// Fp8GemmParams::rows_live: rows before the device count keep the bits of the call without it, rows from it on are
// +0 (over a poisoned output), for counts below, inside and past the rows, on fp8_gemm's own tiles and the forced
// 16- and 64-row tiles; the warpgroup tile, which does not take it, refuses.
TEST(GemmFp8, RowsFromTheLiveCountOnAreZero) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    cuda::CublasLt lt;
    struct Tile {
        int block_m, block_n;  // 0: fp8_gemm's choice
    };
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 2048}, {130, 272}}) {
        const Fp8Operands o = make_operands(rng, 37, n, k);
        for (int64_t rows : {int64_t(1), int64_t(5), int64_t(16), int64_t(37)}) {
            for (const Tile& tile : {Tile{0, 0}, Tile{16, 16}, Tile{64, 128}}) {
                const std::vector<uint16_t> all =
                    run_rows(lt, o, 0, rows, cuda::Fp8GemmPath::kMma, tile.block_m, tile.block_n);
                if (all.empty()) continue;  // a decode tile staging more than it may
                for (int32_t live : {-1, 0, 1, int32_t(rows / 2), int32_t(rows), int32_t(rows + 3)}) {
                    const auto d_live = to_device(std::vector<int32_t>{live});
                    const std::vector<uint16_t> got = run_rows(lt, o, 0, rows, cuda::Fp8GemmPath::kMma, tile.block_m,
                                                               tile.block_n, nullptr, d_live.get());
                    ASSERT_EQ(got.size(), all.size());
                    const int64_t kept = std::clamp<int64_t>(live, 0, rows);
                    int64_t wrong = 0;
                    for (int64_t i = 0; i < rows * n; ++i)
                        wrong += got[size_t(i)] != (i / n < kept ? all[size_t(i)] : uint16_t{0});
                    EXPECT_EQ(wrong, 0) << n << "x" << k << ", " << rows << " rows, tile " << tile.block_m << "x"
                                        << tile.block_n << ", live " << live;
                }
            }
        }
    }
    if (cuda::device_has_wgmma()) {
        const Fp8Operands o = make_operands(rng, 256, 4096, 4096);
        const auto d_live = to_device(std::vector<int32_t>{256});
        EXPECT_TRUE(run_rows(lt, o, 0, 256, cuda::Fp8GemmPath::kMma, 128, 128, nullptr, d_live.get()).empty())
            << "the warpgroup tile must refuse rows_live";
    }
}

// Fp8GemmParams::post_mix: the product's mHC post-mix computed where each tile stores y has the bits of the product
// followed by cuda::hc_post (y itself unchanged), on every 16- and 64-row tile, with rows_live (dead rows post-mix a
// zero y, as hc_post of them does), n_hc 2 and 4, and through fp8_gemm where hc_post runs after the product instead
// (the warpgroup tile, the skinny path, n_hc 3).
TEST(GemmFp8, PostMixEpilogueEqualsGemmThenHcPostBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    cuda::CublasLt lt;
    struct Case {
        int64_t n, k, rows;
        int block_m, block_n;  // 0: fp8_gemm's own choice (its fallback where the tile has no epilogue)
        cuda::Fp8GemmPath path;
    };
    const cuda::Fp8GemmPath kMma = cuda::Fp8GemmPath::kMma;
    std::vector<Case> cases = {{4096, 8192, 1, 0, 0, kMma},
                               {4096, 8192, 5, 16, 16, kMma},
                               {4096, 2048, 16, 16, 32, kMma},
                               {130, 272, 3, 16, 8, kMma},
                               {130, 272, 37, 64, 128, kMma},
                               {4096, 2048, 100, 64, 128, kMma},
                               {4096, 1024, 7, 0, 0, cuda::Fp8GemmPath::kSkinny}};
    if (cuda::device_has_wgmma()) cases.push_back({4096, 4096, 512, 0, 0, kMma});  // the warpgroup tile
    for (const Case& c : cases)
        for (int n_hc : {2, 3, 4}) {
            if (n_hc == 3 && c.block_m != 0) continue;  // no epilogue for n_hc 3: fp8_gemm runs hc_post after it
            const Fp8Operands o = make_operands(rng, c.rows, c.n, c.k);
            const int64_t mix_size = (2 + n_hc) * n_hc;
            std::vector<float> mix(size_t(c.rows * mix_size));
            for (float& v : mix) v = rng.uniform(-1.5f, 1.5f);
            const auto d_mix = to_device(mix);
            const auto streams = to_device(random_bf16(rng, c.rows * n_hc * c.n));
            const auto d_live = to_device(std::vector<int32_t>{int32_t(c.rows / 2)});
            for (bool live : {false, true}) {
                if (live && (c.path != kMma || c.block_m == 0)) continue;  // rows_live: the mma tiles only
                const cuda::Fp8GemmConfig own =
                    cuda::fp8_gemm_config(c.rows, o.n, o.k, device_sms(), c.path, cuda::device_has_wgmma());
                cuda::DeviceBuffer<uint8_t> ws(
                    std::max<size_t>(256, cuda::fp8_gemm_workspace_bytes(own, c.rows, o.n, o.k)));
                auto run = [&](bool fused, std::vector<uint16_t>& out) {
                    auto y = poisoned<uint16_t>(size_t(c.rows * o.n));
                    auto streams_out = poisoned<uint16_t>(size_t(c.rows * n_hc * o.n));
                    cuda::Fp8GemmParams p = operand_params(o, 0, c.rows, y.get(), ws, c.path);
                    p.rows_live = live ? d_live.get() : nullptr;
                    const cuda::HcPostParams post{p.y,         reinterpret_cast<const __nv_bfloat16*>(streams.get()),
                                                  d_mix.get(), reinterpret_cast<__nv_bfloat16*>(streams_out.get()),
                                                  c.rows,      n_hc,
                                                  o.n};
                    if (fused) p.post_mix = {post.mix, post.streams, post.out, n_hc};
                    if (c.block_m == 0) {
                        cuda::fp8_gemm(lt, p, nullptr);
                    } else {
                        cuda::Fp8GemmConfig config = own;
                        config.block_m = c.block_m;
                        config.block_n = c.block_n;
                        ASSERT_EQ(cuda::fp8_gemm_can_implement(p, config), "");
                        DSV4_CUDA_CHECK(cuda::launch_fp8_mma(p, config, nullptr));
                    }
                    if (!fused) cuda::hc_post(post, nullptr);
                    out = to_host(streams_out);
                    const std::vector<uint16_t> y_host = to_host(y);
                    out.insert(out.end(), y_host.begin(), y_host.end());
                };
                std::vector<uint16_t> fused, apart;
                run(true, fused);
                run(false, apart);
                expect_bitwise_bf16("post-mix epilogue " + std::to_string(c.rows) + "x" + std::to_string(c.n) + "x" +
                                        std::to_string(c.k) + " tile " + std::to_string(c.block_m) + "x" +
                                        std::to_string(c.block_n) + " n_hc " + std::to_string(n_hc) +
                                        (live ? " rows_live" : "") + " (streams, then y)",
                                    fused, apart);
            }
        }
}

// A weight's outputs have the same bits whether it runs alone or stacked by rows with another weight of the same
// input (CudaModel runs wq_a | wkv and the shared expert's w1 | w3 as one GEMM, device_weights.h): the stack's
// columns [0, top) against the top part alone and [top, top + bottom) against the bottom part alone (its data and
// scale rows offset into the stack, top % 128 == 0), at 1 to 300 rows, on the mma path with fp8_gemm's own tiles
// (decode tiles with staged products, 64 x 128 tiles) and on the generic path.
TEST(GemmFp8, ColumnsBitwiseIndependentOfStacking) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    cuda::CublasLt lt;
    struct Stack {
        int64_t top, bottom, k;
        cuda::Fp8GemmPath path;
    };
    const auto mma = cuda::Fp8GemmPath::kMma, generic = cuda::Fp8GemmPath::kGeneric;
    for (const Stack& st : {Stack{1024, 512, 4096, mma}, Stack{2048, 2048, 4096, mma}, Stack{128, 128, 256, mma},
                            Stack{128, 80, 272, mma}, Stack{128, 40, 40, generic}, Stack{256, 33, 100, generic}}) {
        const int64_t n = st.top + st.bottom, kb = (st.k + 127) / 128, rows = 300;
        const Fp8Operands o = make_operands(rng, rows, n, st.k);
        for (int64_t m : {int64_t(1), int64_t(3), int64_t(16), int64_t(37), rows}) {
            // y [m, cols] of weight rows [w_row, w_row + cols) of the stack.
            auto run = [&](int64_t w_row, int64_t cols) {
                auto y = poisoned<uint16_t>(size_t(m * cols));
                cuda::Fp8GemmParams p;
                p.a = o.a.q.get();
                p.a_scale = o.a.scale.get();
                p.w = o.w.get() + w_row * st.k;
                p.w_scale = o.w_scale.get() + w_row / 128 * kb;
                p.y = reinterpret_cast<__nv_bfloat16*>(y.get());
                p.m = m;
                p.n = cols;
                p.k = st.k;
                p.path = st.path;
                cuda::fp8_gemm(lt, p, nullptr);
                return to_host(y);
            };
            const std::vector<uint16_t> stacked = run(0, n), top = run(0, st.top), bottom = run(st.top, st.bottom);
            int64_t differ = 0;
            for (int64_t r = 0; r < m; ++r)
                for (int64_t j = 0; j < n; ++j) {
                    const uint16_t alone =
                        j < st.top ? top[size_t(r * st.top + j)] : bottom[size_t(r * st.bottom + j - st.top)];
                    differ += stacked[size_t(r * n + j)] != alone;
                }
            std::printf("[ bitwise  ] %s %lld | %lld x %lld, M=%lld: stacked vs alone, %lld of %lld elements differ\n",
                        cuda::fp8_gemm_path_name(st.path), (long long)st.top, (long long)st.bottom, (long long)st.k,
                        (long long)m, (long long)differ, (long long)(m * n));
            EXPECT_EQ(differ, 0) << st.top << " | " << st.bottom << " x " << st.k << " M=" << m;
        }
    }
}

// The mma path records into a CUDA graph in global capture mode (no allocation, no synchronization, no host
// decision on device values) and the replay gives the eager bits, at M = 37 (decode tiles, > 48 KiB of staged
// shared memory) and M = 100 (64 x 128 tiles).
TEST(GemmFp8, MmaCapturedGraphReplaysBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    cuda::CublasLt lt;
    const Fp8Operands o = make_operands(rng, 100, 4096, 8192);
    const std::vector<uint16_t> eager37 = run_rows(lt, o, 0, 37), eager100 = run_rows(lt, o, 0, 100);
    cuda::Stream stream;
    auto y37 = poisoned<uint16_t>(size_t(37 * o.n)), y100 = poisoned<uint16_t>(size_t(100 * o.n));
    cuda::Fp8GemmParams p;
    p.a = o.a.q.get();
    p.a_scale = o.a.scale.get();
    p.w = o.w.get();
    p.w_scale = o.w_scale.get();
    p.n = o.n;
    p.k = o.k;
    p.path = cuda::Fp8GemmPath::kMma;
    struct Graph {
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        ~Graph() {
            if (exec) cudaGraphExecDestroy(exec);
            if (graph) cudaGraphDestroy(graph);
        }
    } g;
    DSV4_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal));
    p.m = 37;
    p.y = reinterpret_cast<__nv_bfloat16*>(y37.get());
    cuda::fp8_gemm(lt, p, stream.get());
    p.m = 100;
    p.y = reinterpret_cast<__nv_bfloat16*>(y100.get());
    cuda::fp8_gemm(lt, p, stream.get());
    DSV4_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &g.graph));
    DSV4_CUDA_CHECK(cudaGraphInstantiate(&g.exec, g.graph, 0));
    DSV4_CUDA_CHECK(cudaGraphLaunch(g.exec, stream.get()));
    stream.synchronize();
    EXPECT_TRUE(to_host(y37) == eager37) << "M = 37 replay differs from the eager launch";
    EXPECT_TRUE(to_host(y100) == eager100) << "M = 100 replay differs from the eager launch";
}

}  // namespace
}  // namespace dsv4::gpu_test
