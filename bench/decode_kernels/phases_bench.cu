// Where a batch-1 step's latency-bound cluster kernels spend their time (dsv4_bench_decode_kernels phases): the mHC
// pre-mix with its norm (hc_mix_split_kernel, one token) and the sparse attention's cluster kernel (one token, 16
// heads a CTA, at the slot counts of V4-Flash's three layer kinds), the attention's inputs (q's head norm and RoPE,
// the kv entry) and the router with its routing (one launch; its split K's tile sums and the routing run in the CTAs
// that arrive last), each launched with a phase-clock buffer
// (kernels/cuda/common/phase_clock.cuh). Per mark: the time since the CTA's own start, mean and max over the CTAs and
// the repetitions (global timer, ns), and the CTAs' start skew. The kernels are warmed by a timed graph first; each
// measured launch follows a device synchronization, so its marks are the kernel alone, without a predecessor's tail.
#include "common.cuh"
#include "kernels/cuda/common/phase_clock.cuh"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/moe_routing/moe_routing.h"

namespace dsv4::bench {
namespace {

constexpr int kRepetitions = 5;

// Runs `launch(clock)` kRepetitions times with a phase-clock buffer for `ctas` CTAs and prints a row per mark: the
// time since the CTA's start, mean and max over the CTAs that reached the mark (a mark left at zero was not: e.g. the
// router's tile sums, made by a tile's last CTA only), and the phase, each such CTA's time since its previous mark.
void report_phases(const char* kernel, int64_t ctas, const std::vector<const char*>& marks,
                   const std::function<void(int, int64_t*)>& launch) {
    DeviceBuffer<int64_t> clock{size_t(ctas * kPhaseValues)};
    const size_t n = marks.size();
    std::vector<double> since(n, 0.0), phase(n, 0.0), worst(n, 0.0);
    std::vector<int64_t> reached(n, 0);
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
            size_t previous = 0;
            for (size_t i = 1; i < n; ++i) {
                if (v[2 * i] == 0) continue;
                since[i] += double(v[2 * i] - v[0]);
                phase[i] += double(v[2 * i] - v[2 * previous]);
                worst[i] = std::max(worst[i], double(v[2 * i] - v[0]));
                ++reached[i];
                previous = i;
                end = std::max(end, v[2 * i]);
            }
        }
        skew += double(last_start - first) / kRepetitions;
        span += double(end - first) / kRepetitions;
    }
    std::printf("%-24s %5lld CTAs: start skew %6.0f ns, first start to last end %6.0f ns\n", kernel, (long long)ctas,
                skew, span);
    for (size_t i = 1; i < n; ++i) {
        const double count = double(std::max<int64_t>(reached[i], 1));
        char who[32] = "";
        if (reached[i] != ctas * kRepetitions)
            std::snprintf(who, sizeof who, " [%lld CTAs]", (long long)(reached[i] / kRepetitions));
        std::printf("  %-40s %8.0f ns since the CTA's start (max %6.0f), this phase %6.0f%s\n", marks[i],
                    since[i] / count, worst[i], phase[i] / count, who);
    }
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
    {  // the attention's inputs of one token, V4-Flash's shapes (64 q heads of 512, rope 64), as a decode step's
        const int64_t heads = 64, dim = 512, rope = 64, entry = kv_entry_layout(dim, rope).bytes;
        DeviceBuffer<__nv_bfloat16> q{size_t(heads * dim)}, kv{size_t(dim)};
        DeviceBuffer<uint8_t> entries{size_t(entry)};
        fill_bf16<<<64, 256>>>(q.get(), q.size(), 21);
        fill_bf16<<<1, 256>>>(kv.get(), kv.size(), 22);
        const int32_t position = 4096;
        const DeviceBuffer<float> d_freq = rope_inv_freq(rope);
        DeviceBuffer<int32_t> d_pos{1};
        d_pos.upload(&position, 1);
        check_launch(0);
        auto params = [&](int64_t* clock) {  // in place, so each launch normalizes the last one's output again
            AttentionInputsParams p;
            p.q = q.get();
            p.kv = kv.get();
            p.inv_freq = d_freq.get();
            p.positions = d_pos.get();
            p.entries = entries.get();
            p.tokens = 1;
            p.heads = heads;
            p.head_dim = dim;
            p.rope_dim = rope;
            p.eps = 1e-6f;
            p.phase_clock = clock;
            return p;
        };
        const double us = graph_us([&](int, cudaStream_t s) { attention_inputs(params(nullptr), s); });
        std::printf("\nattention inputs, 1 token, 64 heads of 512: %.2f us a launch in a graph\n", us);
        report_phases("attention_inputs", heads / 8 + 1,
                      {"start", "1 cos/sin table (q CTAs)", "2 head norm factor (warp 0: loads, lane 0's sum)",
                       "3 head normalized, rotated, stored", "4 kv row rotated, coded (kv CTA)", "5 entry stored"},
                      [&](int, int64_t* clock) { attention_inputs(params(clock), nullptr); });
    }
    {  // the router and routing of one token, V4-Flash's shapes (256 experts over 4096 columns, top 6 by score)
        constexpr int64_t kExperts = 256, kDim = 4096, kTopK = 6;
        constexpr int kCopies = 32;  // 32 x 2 MB > L2: launch i reads gate copy i % kCopies, as the model's layers do
        DeviceBuffer<__nv_bfloat16> x{size_t(kDim)}, gate{size_t(kCopies * kExperts * kDim)};
        DeviceBuffer<float> bias{size_t(kExperts)}, logits{size_t(kExperts)}, weights{size_t(kTopK)};
        DeviceBuffer<int32_t> experts{size_t(kTopK)}, counts{size_t(kExperts)}, offsets{size_t(kExperts + 1)},
            sorted{size_t(kTopK)}, slot{size_t(kTopK)}, rows{size_t(kTopK)};
        fill_bf16<<<1024, 256>>>(gate.get(), gate.size(), 11);
        fill_bf16<<<16, 256>>>(x.get(), x.size(), 12);
        fill_f32<<<1, 256>>>(bias.get(), bias.size(), 13, 0.2f);
        check_launch(0);
        const int sms = multiprocessor_count();
        DeviceBuffer<int32_t> arrivals{size_t(router_scratch_ints(1, kExperts, kDim, sms))};
        DeviceBuffer<float> staged{size_t(std::max<int64_t>(router_scratch_floats(1, kExperts, kDim, sms), 1))};
        DSV4_CUDA_CHECK(cudaMemset(arrivals.get(), 0, arrivals.size() * sizeof(int32_t)));
        const RouterScratch scratch{arrivals.get(), staged.get(), int64_t(arrivals.size()),
                                    router_scratch_floats(1, kExperts, kDim, sms)};
        auto launch = [&](int i, int64_t* clock, cudaStream_t s) {
            Bf16LinearParams router;
            router.x = x.get();
            router.w = gate.get() + size_t(i % kCopies) * kExperts * kDim;
            router.y = logits.get();
            router.m = 1;
            router.n = kExperts;
            router.k = router.ldx = kDim;
            router.ldy = kExperts;
            MoeRoutingParams p;
            p.logits = logits.get();
            p.bias = bias.get();
            p.tid2eid = nullptr;
            p.token_ids = nullptr;
            p.experts = experts.get();
            p.weights = weights.get();
            p.expert_counts = counts.get();
            p.expert_offsets = offsets.get();
            p.sorted_assignment = sorted.get();
            p.assignment_slot = slot.get();
            p.row_index = rows.get();
            p.tokens = 1;
            p.num_experts = int32_t(kExperts);
            p.k = int32_t(kTopK);
            p.routed_scaling_factor = 2.5f;
            p.phase_clock = clock;
            router_and_routing(router, p, scratch, s);
        };
        const bf16_act_mma::Tiles tiles = bf16_linear_tiles(1, kExperts, kDim, sms);
        const int splits = detail::router_splits(tiles, 1, kExperts, kDim, sms);
        const double us = graph_us([&](int i, cudaStream_t s) { launch(i, nullptr, s); });
        std::printf("\nrouter and routing, 1 token, 256 experts x 4096, top 6 (%d-way split K): %.2f us a launch in a "
                    "graph\n",
                    splits, us);
        report_phases("router_and_routing", bf16_act_mma::split_tiles(tiles, 1, kExperts) * splits,
                      {"start", "1 blocks multiplied", "2 products staged, arrival counted", "3 tile summed, stored",
                       "4 arrival at the routing counted", "5 the token routed (top 6)", "6 counts and offsets",
                       "7 slots written"},
                      [&](int r, int64_t* clock) { launch(5 + r, clock, nullptr); });
    }
}

}  // namespace dsv4::bench
