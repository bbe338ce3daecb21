// The MoE half of a GPU block: the steps of moe_forward (src/model/moe.cpp), same rounding points, same order:
// the shared expert on the side lane, the router and routing on the device, the routed experts (this rank's, under
// expert parallelism), their exchange, and the combine handed to the mHC post-mix (cuda_layer.cpp). Tested through
// tests/gpu/cuda_model_test.cpp and cuda_layer_test.cpp against the CPU, expert_parallel_test.cpp and
// every_gpu_test.cpp against one GPU.
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/bf16_linear/bf16_linear.h"
#include "kernels/cuda/gemm_fp8/gemm_fp8.h"
#include "kernels/cuda/moe_expert/moe_expert.h"
#include "kernels/cuda/moe_gemm/moe_gemm.h"
#include "kernels/cuda/moe_routing/moe_routing.h"
#include "runtime/cuda/cuda_model_impl.h"
#include "runtime/cuda/top_k_margin.h"

namespace dsv4 {

bool CudaModel::Impl::shared_expert_on_one_rank(const cuda::DeviceMoe& m) const {
    auto fp8_mma = [](const cuda::DeviceMatrix& w) {
        return w.format == WeightFormat::kFp8Block && cuda::fp8_gemm_path_for(w.cols) == cuda::Fp8GemmPath::kMma;
    };
    const bool stacked = options.stacked_projections && m.s1_s3.data;
    return options.shared_expert_on_one_rank && options.expert_parallel.ranks > 1 && !data_parallel() &&
           piece.tokens > 0 && piece.tokens <= kSharedExpertOnOneRankTokens && fp8_mma(m.s2) &&
           (stacked ? fp8_mma(m.s1_s3) : fp8_mma(m.s1) && fp8_mma(m.s3));
}

void CudaModel::Impl::shared_expert(const Lane& lane, const cuda::DeviceMoe& m, bf16* out, const int32_t* rows_live) {
    const int64_t T = piece.tokens, I = m.s1.rows;
    cuda::SwigluParams p;
    if (options.stacked_projections && m.s1_s3.data) {
        // [T, 2 I]: gate in [0, I), up in [I, 2 I)
        linear(lane, m.s1_s3, ws.x, T, ws.shared_gate_up, ws.x_fp8, rows_live);
        p.gate = ws.shared_gate_up;
        p.up = ws.shared_gate_up + I;
        p.gate_up_stride = 2 * I;
    } else {
        linear(lane, m.s1, ws.x, T, ws.shared_gate_up, ws.x_fp8, rows_live);
        linear(lane, m.s3, ws.x, T, ws.shared_gate_up + T * I, ws.x_fp8, rows_live);
        p.gate = ws.shared_gate_up;
        p.up = ws.shared_gate_up + T * I;
        p.gate_up_stride = I;
    }
    p.out = ws.shared_hidden;
    p.rows = T;
    p.inter = I;
    p.limit = float(config.swiglu_limit);
    p.q = lane.act.q;  // s2's FP8 input, quantized as the rows are written
    p.q_scales = lane.act.scales;
    p.row_count = rows_live;  // rows past it: neither computed nor read by s2
    cuda::swiglu(p, lane.stream);
    linear(lane, m.s2, ws.shared_hidden, T, out, lane.act, rows_live);
}

// moe_forward: x = ws.x [T, D] -> ws.y [T, D]. Under data-parallel attention the routed experts run over every
// rank's rows (ws.moe_x, gathered; `Tm` of them, this rank's from row piece.moe_first on), the shared expert and the
// combine over this rank's own.
void CudaModel::Impl::moe(int64_t layer) {
    const ModelConfig& c = config;
    const int64_t T = piece.tokens, Tm = piece.moe_tokens;
    const cuda::DeviceMoe& m = w.layers[size_t(layer)].ffn;
    const int64_t D = c.hidden_size, E = c.n_routed_experts, k = c.num_experts_per_tok, I = c.moe_intermediate_size;
    cudaStream_t s = stream->get();
    const ExpertParallel& ep = options.expert_parallel;

    // The shared expert on the side lane, beside everything up to the combine: it reads only ws.x and ws.x_fp8,
    // which nothing before the combine writes, and writes only its own buffers. On one rank only
    // (CudaOptions::shared_expert_on_one_rank): after the routing that chooses the rank, into the rows after the
    // slots, which the exchange sums (every other rank writes them +0).
    const bool shared_on_one_rank = shared_expert_on_one_rank(m);
    const int64_t slots = Tm * k;
    bf16* const shared_out = shared_on_one_rank ? ws.routed_out + slots * D : ws.shared_out;
    if (T > 0 && !shared_on_one_rank) {
        fork_side();
        shared_expert(side_lane(), m, shared_out);
    }

    if (data_parallel()) {  // the experts' input: every rank's rows, rank-major
        stages.mark("expert_gather", layer);
        const RankCollectives::Rows rows[] = {
            {ws.x, ws.moe_x, D * int64_t(sizeof(bf16))},
            {ws.x_fp8.q, ws.moe_x_fp8.q, D},
            {ws.x_fp8.scales, ws.moe_x_fp8.scales, (D + 127) / 128 * int64_t(sizeof(float))}};
        ep.comm->gather_rows(rows, piece.rank_tokens, s);
    }

    // Router (f32) and the device permutation: one launch for a decode step's few tokens, where the last of the
    // router's CTAs routes (the same bits as the two launches).
    stages.mark("router", layer);
    cuda::MoeRoutingParams rp;
    rp.logits = ws.router_logits;
    rp.bias = m.bias;
    rp.tid2eid = m.tid2eid;
    rp.token_ids = ws.moe_ids;
    rp.experts = ws.experts;
    rp.weights = ws.routing_weights;
    rp.expert_counts = ws.counts;
    rp.expert_offsets = ws.offsets;
    rp.sorted_assignment = ws.sorted;
    rp.assignment_slot = ws.assignment_slot;
    rp.row_index = ws.row_index;
    rp.tokens = int32_t(Tm);
    rp.num_experts = int32_t(E);
    rp.k = int32_t(k);
    rp.vocab = int32_t(c.vocab_size);
    rp.routed_scaling_factor = float(c.routed_scaling_factor);
    if (shared_on_one_rank) {
        rp.shared_rows = ws.shared_rows;
        rp.ranks = int32_t(ep.ranks);
        rp.rank = int32_t(ep.rank);
    }
    if (options.router_with_routing && Tm > 0 && f32_on_tensor_cores(m.gate) &&
        cuda::detail::moe_routing_fits_one_block(rp)) {
        cuda::Bf16LinearParams router;
        router.x = ws.moe_x;
        router.w = static_cast<const bf16*>(m.gate.data);
        router.y = ws.router_logits;
        router.m = Tm;
        router.n = m.gate.rows;
        router.k = m.gate.cols;
        router.ldx = m.gate.cols;
        router.ldy = m.gate.rows;
        cuda::router_and_routing(router, rp, ws.router_scratch, s);
    } else {
        linear_f32(m.gate, ws.moe_x, Tm, ws.router_logits);
        cuda::moe_routing(rp, s);
    }
    if (shared_on_one_rank) {
        fork_side();
        shared_expert(side_lane(), m, shared_out, ws.shared_rows);
    }
    if (observer) {  // selection margins from the device's router logits (this rank's rows), as route_tokens does
        std::vector<float> logits(static_cast<size_t>(T * E)), bias(static_cast<size_t>(E)),
            margin(static_cast<size_t>(T), std::numeric_limits<float>::infinity());
        DSV4_CUDA_CHECK(cudaMemcpyAsync(logits.data(), ws.router_logits + piece.moe_first * E, logits.size() * 4,
                                        cudaMemcpyDeviceToHost, s));
        if (m.bias) DSV4_CUDA_CHECK(cudaMemcpyAsync(bias.data(), m.bias, bias.size() * 4, cudaMemcpyDeviceToHost, s));
        stream->synchronize();
        if (m.bias)
            for (int64_t t = 0; t < T; ++t) {
                std::vector<float> biased(static_cast<size_t>(E));
                for (int64_t e = 0; e < E; ++e) {
                    const float z = logits[size_t(t * E + e)];
                    biased[size_t(e)] = std::sqrt(z > 20.0f ? z : std::log1p(std::exp(z))) + bias[size_t(e)];
                }
                margin[size_t(t)] = top_k_margin(biased.data(), E, k);
            }
        observe_host("ffn.router_margin", layer, margin, T, 1);
    }

    // Routed experts on the gathered slots: gate/up (one launch for both FP4 matrices), SwiGLU with the routing
    // weight, down. Under expert parallelism this GPU runs the slots of its experts only: the offsets from its first
    // expert on, its `held` experts (the weights' index 0 is expert held.first).
    stages.mark("routed_experts", layer);
    const int32_t* held_offsets = ws.offsets + held.first;
    auto is_fp4 = [](const cuda::DeviceExperts& e) {
        return e.format == WeightFormat::kFp4Mx || e.format == WeightFormat::kNvfp4;
    };
    // The FP4 experts' product of x, or with `swiglu` of the SwiGLU of W1 x and W3 x, which the kernel computes.
    auto fp4_params = [&](const cuda::DeviceExperts& e, const bf16* x, int64_t rows, int64_t cols,
                          const int32_t* row_index, bf16* y, const cuda::DeviceExperts* second, bf16* y_second,
                          const Fp8Rows& quantized, const cuda::MoeGemmSwiglu* swiglu) {
        cuda::MoeGemmParams p;
        if (swiglu) {
            p.swiglu = *swiglu;
        } else {
            const Fp8Rows a = fp8_rows(x, rows, cols, quantized);
            p.a = a.q;
            p.a_scale = a.scales;
        }
        p.row_index = row_index;
        p.expert_offsets = held_offsets;
        p.format = e.format == WeightFormat::kFp4Mx ? cuda::ExpertFormat::kMxfp4 : cuda::ExpertFormat::kNvfp4;
        p.w = static_cast<const uint8_t*>(e.data);
        p.w_scale = e.scale;
        p.w_global = e.global;
        p.tensor_copies = options.expert_tensor_copies;
        p.fold_scales = options.expert_scale_fold;
        p.y = y;
        if (second) p.second = {static_cast<const uint8_t*>(second->data), second->scale, second->global, y_second};
        p.experts = held.count;
        p.n = e.rows;
        p.k = e.cols;
        // A token reaches an expert at most once (score routing picks k distinct experts; hash rows were checked
        // distinct at load), so no expert holds more than T slots.
        p.max_slots_per_expert = int(m.tid2eid && !hash_rows_distinct ? slots : Tm);
        // Twice the mean over all experts: under balanced routing few active experts hold more.
        p.expected_slots_per_expert = int((2 * slots + E - 1) / E);
        // Under uniform routing each held expert is empty with probability (1 - 1/E)^slots.
        p.expected_active_experts =
            int(std::lround(double(held.count) * (1.0 - std::pow(1.0 - 1.0 / double(E), double(slots)))));
        return p;
    };
    auto experts = [&](const cuda::DeviceExperts& e, const bf16* x, int64_t rows, int64_t cols,
                       const int32_t* row_index, bf16* y, const cuda::DeviceExperts* second, bf16* y_second,
                       const Fp8Rows& quantized) {
        if (is_fp4(e)) {
            cuda::moe_gemm(fp4_params(e, x, rows, cols, row_index, y, second, y_second, quantized, nullptr), s);
            return;
        }
        for (int i = 0; i < (second ? 2 : 1); ++i) {
            const cuda::DeviceExperts& ei = i ? *second : e;
            cuda::DenseExpertGemmParams p;
            p.x = x;
            p.row_index = row_index;
            p.expert_offsets = held_offsets;
            p.w = ei.data;
            p.w_f32 = ei.format == WeightFormat::kF32;
            p.y = i ? y_second : y;
            p.experts = held.count;
            p.n = ei.rows;
            p.k = ei.cols;
            p.max_slots = slots;
            cuda::dense_expert_gemm(p, s);
        }
    };
    DSV4_CHECK(m.w1.format == m.w3.format && m.w1.rows == m.w3.rows && m.w1.cols == m.w3.cols,
               "w1 and w3 of layer {} differ in format or shape", layer);
    experts(m.w1, ws.moe_x, Tm, D, ws.row_index, ws.gate, &m.w3, ws.up, ws.moe_x_fp8);
    cuda::SwigluParams sw;
    sw.gate = ws.gate;
    sw.up = ws.up;
    sw.out = ws.hidden;
    sw.routing_weights = ws.routing_weights;
    sw.sorted_assignment = ws.sorted;
    sw.row_first = held_offsets;
    sw.row_count = held_offsets + held.count;
    sw.rows = slots;
    sw.inter = I;
    sw.limit = float(c.swiglu_limit);
    sw.q = ws.act_q;  // w2's input, quantized as the rows are written (only the held experts' rows: w2 reads no other)
    sw.q_scales = ws.act_scale;
    if (ep.ranks > 1) {  // the other ranks' slots: +0 for the exchange's sum
        sw.zero_rows = ws.routed_out;
        sw.zero_cols = D;
    }
    // w2 computes its input from W1 x and W3 x where its kernel can (a batch-1 decode step on one GPU without an
    // observer, which reads the SwiGLU's bf16 rows): one launch fewer, the same bits (CudaOptions::swiglu_in_w2).
    bool swiglu_in_w2 = false;
    if (is_fp4(m.w2) && ep.ranks == 1 && !observer && options.swiglu_in_w2) {
        const cuda::MoeGemmSwiglu input{sw.gate, sw.up, 0, sw.routing_weights, sw.sorted_assignment, sw.limit};
        const cuda::MoeGemmParams down =
            fp4_params(m.w2, nullptr, slots, I, nullptr, ws.routed_out, nullptr, nullptr, {}, &input);
        swiglu_in_w2 = cuda::moe_gemm_computes_swiglu(down);
        if (swiglu_in_w2) cuda::moe_gemm(down, s);
    }
    if (!swiglu_in_w2) {
        cuda::swiglu(sw, s);
        experts(m.w2, ws.hidden, slots, I, nullptr, ws.routed_out, nullptr, nullptr, {ws.act_q, ws.act_scale});
    }
    if (ep.ranks > 1) {  // every slot from the rank that holds its expert; x + 0 is x, so the sum is exact
        stages.mark("expert_exchange", layer);
        if (shared_on_one_rank) join_side();  // the shared expert's rows, summed with the slots
        ep.comm->sum_bf16(ws.routed_out, (slots + (shared_on_one_rank ? T : 0)) * D, s);
    }
    if (T == 0) return;

    // The shared expert's end: what remains of it after the routed experts (and their exchange).
    stages.mark("shared_expert", layer);
    join_side();

    // Sum in f32 (routed in ascending expert order, then the shared expert), bf16: this rank's rows. Computed by the
    // kernel of the hc_post that reads it, unless an observer reads it here.
    cuda::MoeCombineParams cp;
    cp.routed = ws.routed_out;
    cp.experts = ws.experts + piece.moe_first * k;
    cp.assignment_slot = ws.assignment_slot + piece.moe_first * k;
    cp.shared = shared_out;
    cp.out = ws.y;
    cp.tokens = T;
    cp.dim = D;
    cp.k = int32_t(k);
    if (observer) {
        stages.mark("moe_combine", layer);
        cuda::moe_combine(cp, s);
        return;
    }
    pending_combine = cp;
}

}  // namespace dsv4
