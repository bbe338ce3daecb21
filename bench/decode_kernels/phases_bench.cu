// Where a batch-1 step's latency-bound cluster kernels spend their time (dsv4_bench_decode_kernels phases): the mHC
// pre-mix with its norm (hc_mix_split_kernel, one token) and the sparse attention's cluster kernel (one token, 16
// heads a CTA, at the slot counts of V4-Flash's three layer kinds), each launched with a phase-clock buffer
// (kernels/cuda/common/phase_clock.cuh). Per mark: the time since the CTA's own start, mean and max over the CTAs and
// the repetitions (global timer, ns), and the CTAs' start skew. The kernels are warmed by a timed graph first; each
// measured launch follows a device synchronization, so its marks are the kernel alone, without a predecessor's tail.
#include "common.cuh"
#include "kernels/cuda/common/phase_clock.cuh"

namespace dsv4::bench {
namespace {

constexpr int kRepetitions = 5;

// Runs `launch(clock)` kRepetitions times with a phase-clock buffer for `ctas` CTAs and prints a row per mark.
void report_phases(const char* kernel, int64_t ctas, const std::vector<const char*>& marks,
                   const std::function<void(int, int64_t*)>& launch) {
    DeviceBuffer<int64_t> clock{size_t(ctas * kPhaseValues)};
    std::vector<double> mean(kPhaseMarks, 0.0), worst(kPhaseMarks, 0.0);
    double skew = 0.0, span = 0.0;
    for (int r = 0; r < kRepetitions; ++r) {
        DSV4_CUDA_CHECK(cudaMemset(clock.get(), 0, clock.size() * sizeof(int64_t)));
        DSV4_CUDA_CHECK(cudaDeviceSynchronize());
        launch(r, clock.get());
        DSV4_CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<int64_t> host(clock.size());
        clock.download(host.data(), host.size());
        int64_t first = INT64_MAX, last_start = 0, end = 0;
        for (int64_t c = 0; c < ctas; ++c) {
            const int64_t* v = host.data() + c * kPhaseValues;
            first = std::min(first, v[0]);
            last_start = std::max(last_start, v[0]);
            for (size_t i = 1; i < marks.size(); ++i) {
                const double ns = double(v[2 * i] - v[0]);
                mean[i] += ns / double(ctas * kRepetitions);
                worst[i] = std::max(worst[i], ns);
            }
            end = std::max(end, v[2 * (marks.size() - 1)]);
        }
        skew += double(last_start - first) / kRepetitions;
        span += double(end - first) / kRepetitions;
    }
    std::printf("%-24s %5lld CTAs: start skew %6.0f ns, first start to last end %6.0f ns\n", kernel, (long long)ctas,
                skew, span);
    for (size_t i = 1; i < marks.size(); ++i)
        std::printf("  %-40s %8.0f ns since the CTA's start (max %6.0f), this phase %6.0f\n", marks[i], mean[i],
                    worst[i], mean[i] - mean[i - 1]);
}

}  // namespace

void bench_phases() {
    {  // hc_pre with its norm at one token, V4-Flash's shapes, as the model launches it (hc_pre_norm's split kernel)
        const FlashMixer mixer(1, false);
        const int64_t dim = mixer.kDim;
        DeviceBuffer<float> mix{size_t(mixer.rows)}, weight{size_t(dim)}, q_scales{size_t(dim / 128)};
        fill_f32<<<16, 256>>>(weight.get(), weight.size(), 5, 1.0f);
        DeviceBuffer<__nv_bfloat16> x{size_t(dim)};
        DeviceBuffer<uint8_t> q{size_t(dim)};
        check_launch(0);
        const RmsNormParams norm{x.get(), weight.get(), x.get(), 1, dim, dim, dim, 1e-6f, q.get(), q_scales.get()};
        auto params = [&](int i, int64_t* clock) {
            HcMixParams p = mixer.params(i, x.get(), mix.get());
            p.defer_sinkhorn = true;
            p.phase_clock = clock;
            return p;
        };
        const double us = graph_us([&](int i, cudaStream_t s) { hc_pre_norm(params(i, nullptr), norm, s); });
        std::printf("\nhc_pre_norm, 1 token: %.2f us a launch in a graph\n", us);
        report_phases(
            "hc_mix_split_kernel", 16,
            {"start", "1 chains (mixer and stream loads, fmaf)", "2 trees in the CTA",
             "3 cluster wait, quarter sums pushed and received", "4 the mix (warp 0)",
             "5 collapse, x pushed to rank 0", "6 norm factor (rank 0's chains, pushed back)",
             "7 x normalized, quantized, stored"},
            [&](int r, int64_t* clock) { hc_pre_norm(params(7 + r, clock), norm, nullptr); });
    }
    for (int32_t slots :
         {128, 160, 640}) {  // sparse attention of one token: SWA, HCA at 4k (128 + 32), CSA (128 + 512)
        const FlashAttentionInputs in(1, slots);
        DeviceBuffer<float> inv_freq{size_t(in.kRope / 2)};
        fill_f32<<<1, 32>>>(inv_freq.get(), inv_freq.size(), 17, 0.1f);
        const int32_t position = 4095;
        DeviceBuffer<int32_t> positions{1};
        positions.upload(&position, 1);
        DeviceBuffer<uint16_t> out{size_t(in.kHeads) * in.kDim};
        check_launch(0);
        const SparseAttentionPlan& plan = in.plan;
        auto params = [&](int i, int64_t* clock) {
            SparseAttentionParams p = in.params(i, SparseAttentionCombine::kCluster, out.get());
            p.cluster_heads = kNarrowClusterHeads;
            p.inverse_rope_inv_freq = inv_freq.get();
            p.positions = positions.get();
            p.phase_clock = clock;
            return p;
        };
        const double us = graph_us([&](int i, cudaStream_t s) { sparse_attention(params(i, nullptr), s); });
        std::printf("\nsparse attention, 1 token, %d slots (%d splits), 16 heads a CTA: %.2f us a launch in a graph\n",
                    slots, plan.splits, us);
        report_phases(
            "sparse_attention_cluster", int64_t(in.kHeads / kNarrowClusterHeads) * plan.splits,
            {"start", "1 q issued, the split's keys checked", "2 max pass (tile in, dequantized, QK)",
             "3 maxima pushed and received", "4 P V pass, denominators", "5 partial O pushed and received",
             "6 combine, inverse RoPE, stores (thread 0)", "7 the pushes out have read"},
            [&](int r, int64_t* clock) { sparse_attention(params(3 + r, clock), nullptr); });
    }
}

}  // namespace dsv4::bench
