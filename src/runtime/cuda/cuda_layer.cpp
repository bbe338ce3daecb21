// One block of the GPU forward: the steps of CpuModel::block_forward (src/model/), same rounding points, same order
// (attention_forward: cuda_attention.cpp; moe_forward: cuda_moe.cpp); plus the linear dispatch of Precision (FP8 ->
// quantized input and FP8 GEMM, dense -> the chunk-invariant f32 dense_linear), the lanes and the observer downloads.
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/number_formats.h"
#include "kernels/cuda/bf16_linear/bf16_linear.h"
#include "kernels/cuda/convert/convert.h"
#include "kernels/cuda/dense_linear/dense_linear.h"
#include "kernels/cuda/gemm_fp8/gemm_fp8.h"
#include "kernels/cuda/grouped_linear/grouped_linear.h"
#include "kernels/cuda/mhc/mhc.h"
#include "kernels/cuda/quant/quant.h"
#include "runtime/cuda/cuda_model_impl.h"

namespace dsv4 {

cuda::HcMixParams CudaModel::Impl::hc_mix_params(const cuda::DeviceHc& hw, const bf16* streams, int64_t tokens) {
    cuda::HcMixParams p;
    p.streams = streams;
    p.fn = hw.fn;
    p.base = hw.base;
    p.scale = hw.scale;
    p.x_out = ws.x;
    p.mix = ws.mix;
    p.tokens = tokens;
    p.n_hc = config.hc_mult;
    p.dim = config.hidden_size;
    p.sinkhorn_iters = config.hc_sinkhorn_iters;
    p.hc_eps = float(config.hc_eps);
    p.norm_eps = float(config.rms_norm_eps);
    return p;
}

const float* CudaModel::Impl::inv_freq(int64_t layer) const {
    return config.compress_ratios[size_t(layer)] ? compress_inv_freq.get() : main_inv_freq.get();
}

void CudaModel::Impl::observe_host(std::string_view name, int64_t layer, const std::vector<float>& data, int64_t rows,
                                   int64_t cols) {
    observer(name, layer, data.data(), rows, cols);
}

void CudaModel::Impl::observe_bf16(std::string_view name, int64_t layer, const bf16* data, int64_t rows, int64_t cols) {
    if (!observer) return;
    std::vector<uint16_t> raw(static_cast<size_t>(rows * cols));
    DSV4_CUDA_CHECK(cudaMemcpyAsync(raw.data(), data, raw.size() * 2, cudaMemcpyDeviceToHost, stream->get()));
    stream->synchronize();
    std::vector<float> values(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) values[i] = bf16_to_f32(raw[i]);
    observe_host(name, layer, values, rows, cols);
}

Lane CudaModel::Impl::main_lane() const {
    return {stream->get(), {ws.act_q, ws.act_scale}, ws.y_f32, ws.gemm, ws.gemm_bytes};
}

Lane CudaModel::Impl::side_lane() const {
    return {side_stream->get(), ws.side_act, ws.side_y_f32, ws.side_gemm, ws.gemm_bytes};
}

void CudaModel::Impl::wait_for(cudaStream_t waiter, cudaStream_t producer, cuda::Event& event) {
    event.record(producer);
    DSV4_CUDA_CHECK(cudaStreamWaitEvent(waiter, event.get()));
}

void CudaModel::Impl::fork_side() { wait_for(side_stream->get(), stream->get(), *side_fork); }

void CudaModel::Impl::join_side() { wait_for(stream->get(), side_stream->get(), *side_join); }

void CudaModel::Impl::sinkhorn_on_side() {
    if (!pending_sinkhorn) return;
    fork_side();
    cuda::hc_sinkhorn(*pending_sinkhorn, side_lane().stream);
    pending_sinkhorn.reset();
}

void CudaModel::Impl::act_quant(const Lane& lane, const bf16* x, int64_t rows, int64_t cols) {
    cuda::ActQuantParams p;
    p.x = x;
    p.q = lane.act.q;
    p.scales = lane.act.scales;
    p.rows = rows;
    p.cols = cols;
    p.x_stride = cols;
    cuda::act_quant_fp8(p, lane.stream);
}

bool CudaModel::Impl::f32_on_tensor_cores(const cuda::DeviceMatrix& w) {
    return w.format == WeightFormat::kBF16 && w.rows % 8 == 0 && w.cols % 16 == 0;
}

Fp8Rows CudaModel::Impl::fp8_rows(const bf16* x, int64_t rows, int64_t cols, const Fp8Rows& quantized) {
    return fp8_rows(main_lane(), x, rows, cols, quantized);
}

Fp8Rows CudaModel::Impl::fp8_rows(const Lane& lane, const bf16* x, int64_t rows, int64_t cols,
                                  const Fp8Rows& quantized) {
    if (quantized.q) return quantized;
    act_quant(lane, x, rows, cols);
    return lane.act;
}

void CudaModel::Impl::linear_f32(const cuda::DeviceMatrix& w, const bf16* x, int64_t m, float* y, int64_t ldy,
                                 bool chains) {
    linear_f32(main_lane(), w, x, m, y, ldy, chains);
}

void CudaModel::Impl::linear_f32(const Lane& lane, const cuda::DeviceMatrix& w, const bf16* x, int64_t m, float* y,
                                 int64_t ldy, bool chains) {
    DSV4_CHECK(w.format == WeightFormat::kF32 || w.format == WeightFormat::kBF16,
               "linear_f32 needs a dense weight ({} given)", weight_format_name(w.format));
    ldy = ldy ? ldy : w.rows;
    // A bf16 weight: every product of two bf16 values is exact in f32, so the tensor cores' f32 block sums give the
    // reference's f32 dot product up to summation order (docs/numerics.md, "Dense f32 linears on the GPU").
    if (!chains && f32_on_tensor_cores(w)) {
        cuda::Bf16LinearParams p;
        p.x = x;
        p.w = static_cast<const bf16*>(w.data);
        p.y = y;
        p.m = m;
        p.n = w.rows;
        p.k = w.cols;
        p.ldx = w.cols;
        p.ldy = ldy;
        cuda::bf16_linear(p, lane.stream);  // throws if a stride or an alignment does not fit
        return;
    }
    cuda::DenseLinearParams p;
    p.type = w.format == WeightFormat::kF32 ? cuda::DenseType::kF32 : cuda::DenseType::kBF16;
    p.x = x;
    p.w = w.data;
    p.y = y;
    p.m = m;
    p.n = w.rows;
    p.k = w.cols;
    p.ldx = p.ldw = w.cols;
    p.ldy = ldy;
    cuda::dense_linear(p, lane.stream);
}

void CudaModel::Impl::linear(const cuda::DeviceMatrix& w, const bf16* x, int64_t m, bf16* y, const Fp8Rows& quantized) {
    linear(main_lane(), w, x, m, y, quantized);
}

// Every FP8 linear, whatever its row count, runs gemm_fp8's tensor-core path: fixed 128-column K blocks promoted to
// f32 in ascending order, so each output row has the same bits whatever M is and whichever rows share the launch
// (chunk and batch invariance; GemmFp8.MmaRowsBitwiseIndependentOfBatchAndTile). cuBLASLt's block-scaled path is
// faster for large M but picks its summation by shape: a row's bits would change with the batch. A K the tensor-core
// path does not take (K % 16 != 0, small models only) runs the generic path, batch-invariant too
// (cuda::fp8_gemm_path_for).
void CudaModel::Impl::linear(const Lane& lane, const cuda::DeviceMatrix& w, const bf16* x, int64_t m, bf16* y,
                             const Fp8Rows& quantized, const int32_t* rows_live, const cuda::HcPostParams* post) {
    DSV4_CHECK(!rows_live || w.format == WeightFormat::kFp8Block, "linear: rows_live needs an FP8 weight ({} given)",
               weight_format_name(w.format));
    if (w.format == WeightFormat::kFp8Block) {
        const Fp8Rows a = fp8_rows(lane, x, m, w.cols, quantized);
        cuda::Fp8GemmParams p;
        p.a = a.q;
        p.a_scale = a.scales;
        p.w = static_cast<const uint8_t*>(w.data);
        p.w_scale = w.scale;
        p.y = y;
        p.m = m;
        p.n = w.rows;
        p.k = w.cols;
        p.workspace = lane.gemm;
        p.workspace_bytes = lane.gemm_bytes;
        p.path = cuda::fp8_gemm_path_for(w.cols);
        p.rows_live = rows_live;
        if (post) p.post_mix = {post->mix, post->streams, post->out, int(post->n_hc)};
        cuda::fp8_gemm(*lt, p, lane.stream);
        return;
    }
    linear_f32(lane, w, x, m, lane.y_f32, 0, false);
    cuda::f32_to_bf16({lane.y_f32, y, m, w.rows, w.rows, w.rows}, lane.stream);
    if (post) cuda::hc_post(*post, lane.stream);
}

cuda::HcPostParams CudaModel::Impl::ready_post_mix() {
    sinkhorn_on_side();          // where the sub-layer did not launch it
    if (!observer) join_side();  // block()'s side_sinkhorn: the deferred Sinkhorn ran on the side lane
    return {ws.y, ws.streams, ws.mix, ws.streams_next, piece.tokens, config.hc_mult, config.hidden_size};
}

void CudaModel::Impl::grouped_linear(const cuda::DeviceMatrix& w, const bf16* x, int64_t m, int64_t groups, bf16* y) {
    const int64_t in = w.cols, out = w.rows / groups;
    if (w.format == WeightFormat::kFp8Block) {
        cuda::GroupedLinearParams p;
        p.x = x;
        p.w = static_cast<const uint8_t*>(w.data);
        p.w_scale = w.scale;
        p.y = y;
        p.m = m;
        p.groups = groups;
        p.in = in;
        p.out = out;
        cuda::grouped_linear(p, stream->get());
        return;
    }
    // Dense wo_a (the F32 fixtures): group g's rows of W on group g's slice of x, f32, then one bf16 cast.
    DSV4_CHECK(w.format == WeightFormat::kF32 || w.format == WeightFormat::kBF16, "grouped_linear: format {}",
               weight_format_name(w.format));
    const bool f32 = w.format == WeightFormat::kF32;
    for (int64_t g = 0; g < groups; ++g) {
        cuda::DenseLinearParams p;
        p.type = f32 ? cuda::DenseType::kF32 : cuda::DenseType::kBF16;
        p.x = x + g * in;
        p.w = static_cast<const uint8_t*>(w.data) + g * out * in * (f32 ? 4 : 2);
        p.y = ws.y_f32 + g * out;
        p.m = m;
        p.n = out;
        p.k = in;
        p.ldx = groups * in;
        p.ldw = in;
        p.ldy = groups * out;
        cuda::dense_linear(p, stream->get());
    }
    cuda::f32_to_bf16({ws.y_f32, y, m, groups * out, groups * out, groups * out}, stream->get());
}

// CpuModel::block_forward.
void CudaModel::Impl::block(int64_t layer) {
    const ModelConfig& c = config;
    const int64_t T = piece.tokens;
    const cuda::DeviceBlock& b = w.layers[size_t(layer)];
    const int64_t D = c.hidden_size, n_hc = c.hc_mult;
    cudaStream_t s = stream->get();
    // Only hc_post reads comb, so its Sinkhorn normalization is deferred and runs on the side lane beside the
    // sub-layer (pending_sinkhorn; joined before hc_post). An observer synchronizes the main stream to download, so
    // with one everything stays on the main lane.
    const bool side_sinkhorn = !observer;
    if (T == 0) {  // data-parallel attention, none of the piece's rows on this rank: its share of the experts only
        moe(layer);
        return;
    }
    auto hc_pre = [&](const cuda::DeviceHc& hw, const float* norm) {  // x, and x quantized for the FP8 GEMMs
        cuda::HcMixParams mix = hc_mix_params(hw, ws.streams, T);
        mix.defer_sinkhorn = side_sinkhorn;
        // The sub-layer's input norm runs inside hc_pre's kernel where it can (decode batches).
        cuda::hc_pre_norm(mix, {ws.x, norm, ws.x, T, D, D, D, float(c.rms_norm_eps), ws.x_fp8.q, ws.x_fp8.scales}, s);
        if (side_sinkhorn) pending_sinkhorn = mix;
    };
    auto hc_post = [&]() {  // of ws.y, or of the MoE's pending sum of routed and shared outputs
        const cuda::HcPostParams post = ready_post_mix();
        if (pending_combine)
            cuda::hc_post_of_moe(post, *pending_combine, s);
        else
            cuda::hc_post(post, s);
        pending_combine.reset();
        std::swap(ws.streams, ws.streams_next);
    };

    // 1. Attention sub-block.
    stages.mark("attn_hc_pre", layer);
    hc_pre(b.hc_attn, b.attn_norm);
    observe_bf16("attn_in", layer, ws.x, T, D);
    attention_post_mix = options.post_mix_in_wo_b;
    attention(layer);  // with attention_post_mix, wo_b's epilogue computes hc_post's streams
    observe_bf16("attn_out", layer, ws.y, T, D);
    stages.mark("attn_hc_post", layer);
    if (attention_post_mix)
        std::swap(ws.streams, ws.streams_next);
    else
        hc_post();
    attention_post_mix = false;

    // 2. MoE sub-block.
    stages.mark("ffn_hc_pre", layer);
    hc_pre(b.hc_ffn, b.ffn_norm);
    sinkhorn_on_side();
    observe_bf16("ffn_in", layer, ws.x, T, D);
    moe(layer);
    observe_bf16("ffn_out", layer, ws.y, T, D);
    stages.mark("ffn_hc_post", layer);
    hc_post();
    observe_bf16("streams", layer, ws.streams, T, n_hc * D);
}

}  // namespace dsv4
