// dsv4 bench [--preset flash|pro] [--layers N] [--context C] [--steps S] [--seed X]: decode-step latency of a
// V4-Flash- or V4-Pro-shaped model on one or more GPUs against the bytes the step must read (DESIGN "Performance:
// how we know it is fast"). The weights are random, in their checkpoint formats (model/bench_weights.h; no checkpoint
// is written): FP8 e4m3 with E8M0 block scales for attention / shared-expert linears, MXFP4 routed experts, BF16
// embedding / head / router / compressor projections, F32 mHC mixers, sinks and position biases, as the synthetic
// writer stores them. Values are drawn through 65,536-entry tables of N(0, 1) samples quantized once to each format (a
// counter-based hash picks the entry), with power-of-two scales giving each linear a std of about 1/sqrt(fan_in): every
// value is finite and the forward stays finite. Everything but the routed experts is generated in host memory and
// uploaded by CudaModel; the routed experts (92% of V4-Flash's bytes) never exist on the host: each GPU generates the
// ones it holds in place, by the same rule (CudaOptions::random_experts_seed). The bench then measures, in one process:
//   1. device-to-device copy bandwidth (1 GiB buffer, bytes read + written, median of 10 copies) and the dense FP8
//      tensor-core rate (cuBLASLt block-scaled GEMM 8192^3, median of 10);
//   2. prefill of C random ids (tokens/s, wall clock around a synchronous forward, after a warm-up sequence), and
//      its FLOPs (model/prefill_flops.h) over that time against the FP8 rate;
//   3. S single-token decode steps after a few warm-up steps: CUDA events around CudaModel::forward, which ends
//      with the logits copy and its stream synchronization, so the time is the whole step as the engine serves it.
// It prints the bytes one decode step must read (weights by stage, KV entries attended, indexer keys scanned),
// the floor time at the measured copy bandwidth, the median step, achieved GB/s and the fraction of bandwidth.
// With --stages, each measured step (the single sequence and every --batch size) runs again with CudaModel's stage
// profiler on: CUDA events at the stage boundaries, recorded by event-record nodes of the replayed decode graph;
// the table gives each stage's GPU time per step and per layer, its share, and the bytes floor of what it reads,
// and checks that the stages add up to the step timed without the profiler.
// CUDA builds only.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "commands.h"
#include "core/error.h"
#include "ranks.h"
#include "model/synthetic_checkpoint.h"
#ifdef DSV4_WITH_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include "core/mix64.h"
#include "core/thread_pool.h"
#include "kernel_timeline.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/compressor/kv_entry_layout.h"
#include "kernels/cuda/gemm_fp8/gemm_fp8.h"
#include "kernels/cuda/smoke/device_info.h"
#include "model/bench_weights.h"
#include "model/decode_bytes.h"
#include "model/prefill_flops.h"
#include "model/weights.h"
#include "runtime/cuda/cuda_model.h"
#include "runtime/sampler.h"
#include "runtime/stage_profile.h"
#endif

namespace dsv4::cli {

namespace {
// The command's options (both builds parse them; only a CUDA build runs the bench).
struct BenchArgs {
    std::string preset = "flash";
    std::vector<int64_t> layers = {2};  // one model per layer count; two or more also give the cost per added layer
    int64_t context = 4096, steps = 64, warmup = 8, chunk = 256;
    std::vector<int64_t> batches;  // batched decode: batch sizes to time (each sequence prefilled with batch_context)
    int64_t batch_context = 128;
    bool share_batch_prompt = false;  // prefill one batch prompt and copy its state to every sequence of a batch
    bool draw = false;  // batched steps draw each sequence's next id on the GPU instead of copying its logits
    uint64_t seed = 0;
    int threads = 0;
    bool stages = false;  // also the per-stage table of every measured step (CudaModel's stage profiler)
    bool equal_lane_priority = false;  // CudaOptions::prioritize_main_lane off (to measure what it buys)
    bool shared_expert_every_rank = false;  // CudaOptions::shared_expert_on_one_rank off (likewise)
    bool router_apart = false;              // CudaOptions::router_with_routing off (likewise)
    bool swiglu_apart = false;              // CudaOptions::swiglu_in_w2 off (likewise)
    bool post_mix_apart = false;            // CudaOptions::post_mix_in_wo_b off (likewise)
    bool expert_copies16 = false;           // CudaOptions::expert_tensor_copies off
    bool expert_fold_off = false;           // CudaOptions::expert_scale_fold off
    bool profile_range = false;  // cudaProfilerStart / Stop around the timed single-sequence steps
    std::string timeline;        // --timeline: CUPTI's kernel records of a few more single-sequence steps, to a file
    ParallelFlags parallel;  // --gpus ...: the model over several GPUs (ranks.h); rank 0 measures and prints
    std::string backend;     // --backend: only "cuda" (accepted for scripts that pass it to every model command)
    std::optional<parallel::RankInfo> rank;
    int device = 0;
};
}  // namespace

#ifdef DSV4_WITH_CUDA
namespace {

// The packed sizes of the GPU's cache entries and indexer keys (decode_bytes counts them).
CacheEntryBytes cache_entry_bytes(const ModelConfig& c) {
    return {double(cuda::main_entry_layout(c.head_dim, c.rope_head_dim).bytes()),
            double(cuda::IndexEntryLayout{c.index_head_dim}.bytes())};
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The median GPU time in ms of 10 runs of `op` on the legacy stream (CUDA events around each), after 3 warm-ups.
template <typename Op>
double median_event_ms(Op op) {
    cudaEvent_t e0, e1;
    DSV4_CUDA_CHECK(cudaEventCreate(&e0));
    DSV4_CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<double> ms;
    for (int i = 0; i < 13; ++i) {
        DSV4_CUDA_CHECK(cudaEventRecord(e0, 0));
        op();
        DSV4_CUDA_CHECK(cudaEventRecord(e1, 0));
        DSV4_CUDA_CHECK(cudaEventSynchronize(e1));
        float t = 0;
        DSV4_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        if (i >= 3) ms.push_back(t);
    }
    DSV4_CUDA_CHECK(cudaEventDestroy(e0));
    DSV4_CUDA_CHECK(cudaEventDestroy(e1));
    return median(ms);
}

// Device-to-device copy of a 1 GiB buffer; bytes read + written over the median time of 10 copies.
double copy_bandwidth_gbs() {
    const size_t bytes = size_t(1) << 30;
    void *src = nullptr, *dst = nullptr;
    DSV4_CUDA_CHECK(cudaMalloc(&src, bytes));
    DSV4_CUDA_CHECK(cudaMalloc(&dst, bytes));
    DSV4_CUDA_CHECK(cudaMemset(src, 0x5A, bytes));  // not zeros
    const double ms = median_event_ms(
        [&] { DSV4_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0)); });
    DSV4_CUDA_CHECK(cudaFree(src));
    DSV4_CUDA_CHECK(cudaFree(dst));
    return 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
}

// The dense FP8 tensor-core rate a prefill is held against: cuBLASLt's block-scaled FP8 GEMM (e4m3, f32 scales per
// 128 of A and per 128 x 128 of W: the V4 linear's format; the fastest FP8 path here, though not batch-invariant and
// not used by the executor) at 8192^3 on pseudo-random operands, the median of 10 runs after 3 warm-ups.
double fp8_dense_tflops() {
    const int64_t s = 8192;
    const size_t bytes = size_t(s * s);
    std::vector<uint8_t> host(bytes);
    uint32_t h = 0x9E3779B9u;
    for (auto& b : host) {
        h ^= h << 13, h ^= h >> 17, h ^= h << 5;
        b = uint8_t(h) & 0xBF;  // |x| < 2^1 and never the NaN codes 0x7F / 0xFF
    }
    cuda::DeviceBuffer<uint8_t> a{bytes}, w{bytes};
    a.upload(host.data(), bytes);
    w.upload(host.data(), bytes);
    const std::vector<float> ones(size_t(s * s / 128), 1.0f);
    cuda::DeviceBuffer<float> a_scale{size_t(s * s / 128)}, w_scale{size_t(s * s / 128 / 128)};
    a_scale.upload(ones.data(), a_scale.size());
    w_scale.upload(ones.data(), w_scale.size());
    cuda::DeviceBuffer<__nv_bfloat16> y{bytes};
    const cuda::Fp8GemmConfig config =
        cuda::fp8_gemm_config(s, s, s, cuda::multiprocessor_count(), cuda::Fp8GemmPath::kCublasLt);
    cuda::DeviceBuffer<uint8_t> workspace{cuda::fp8_gemm_workspace_bytes(config, s, s, s)};
    cuda::CublasLt lt;
    cuda::Fp8GemmParams p;
    p.a = a.get();
    p.a_scale = a_scale.get();
    p.w = w.get();
    p.w_scale = w_scale.get();
    p.y = y.get();
    p.m = p.n = p.k = s;
    p.workspace = workspace.get();
    p.workspace_bytes = workspace.size();
    p.path = cuda::Fp8GemmPath::kCublasLt;
    const double ms = median_event_ms([&] { cuda::fp8_gemm(lt, p, 0); });  // after the uploads: same stream
    return 2.0 * double(s) * double(s) * double(s) / (ms * 1e-3) / 1e12;
}

int64_t count_nonfinite(const std::vector<float>& v) {
    return std::count_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
}


// The stage profiler as a call every rank makes (LeaderBackend::control): the decode graphs of all ranks are
// re-captured with the event nodes, so every rank keeps running the same graphs.
void stage_control(Backend& local, const std::string& name, int64_t value) {
    DSV4_CHECK(name == "stage_profiling", "dsv4 bench: unknown control call '{}'", name);
    dynamic_cast<CudaModel&>(local).set_stage_profiling(value != 0);
}

// --stages: `step` (which returns its host-clock ms) again `warmup` (at least one: it captures the profiled decode
// graph) + `steps` times with the stage profiler on; the table of the timed steps and their median time.
struct StageRun {
    StageTable table;
    double step_ms = 0;
};

template <typename Step>
StageRun profile_stages(Backend& model, const BenchArgs& a, Step step) {
    CudaModel& local = dynamic_cast<CudaModel&>(local_model(model));
    control(model, stage_control, "stage_profiling", 1);
    std::vector<std::vector<StageTime>> recorded;
    std::vector<double> ms;
    for (int64_t i = 0; i < std::max<int64_t>(a.warmup, 1) + a.steps; ++i) {
        const double h = step();
        if (i < std::max<int64_t>(a.warmup, 1)) continue;
        recorded.push_back(local.stage_times());
        ms.push_back(h);
    }
    control(model, stage_control, "stage_profiling", 0);
    return {stage_table(recorded), median(ms)};
}

// The stage table of one measured step: `tokens` sequences selecting `experts` distinct routed experts in all;
// `step_ms` is the step timed without the profiler, by the host clock as the profiled steps.
void print_stages(const std::string& what, const StageRun& run, const std::map<std::string, DecodeStageFloor>& floors,
                  double tokens, double experts, double copy_gbs, double step_ms) {
    StageYardstick against{{}, copy_gbs, step_ms, run.step_ms};
    for (const auto& [stage, floor] : floors) against.floor_bytes[stage] = floor.bytes(tokens, experts);
    std::printf(
        "stages of the decode step, %s (GPU time between the CUDA events at consecutive stage boundaries, "
        "recorded inside the replayed decode graph; mean of %lld steps; MB = 1e6 B; the steps without and "
        "with the profiler by the host clock):\n%s",
        what.c_str(), (long long)run.table.steps, format_stage_table(run.table, against).c_str());
}

// One model's timings: the single-sequence decode step and each batch size's step, with the bytes each must move.
struct LayerRun {
    int64_t layers = 0;
    double step_ms = 0, bytes = 0;
    std::vector<double> batch_ms, batch_bytes;  // per BenchArgs::batches
    // --stages: the layers' GPU time per step (the block stages of the profiled step), single step and per batch.
    double step_layers_ms = 0;
    std::vector<double> batch_layers_ms;
};

// The GPU time per step of the stages that belong to a layer (every row but upload, embed, head, logits_copy): what
// the per-added-layer cost is made of, without the host time that the whole step's clock also holds at batches.
double layers_ms(const StageTable& table) {
    double ms = 0;
    for (const StageRow& row : table.rows)
        if (row.layers > 0) ms += row.ms;
    return ms;
}

// The model a run measures: its config, the bytes floors of its steps, and the backend (rank 0, or the only rank).
struct BenchModel {
    ModelConfig config;
    int ranks = 1;
    int64_t position = 0;            // the single-sequence steps' middle position
    DecodeBytes bytes, batch_bytes;  // one token at `position`; one token of a batch
    std::map<std::string, DecodeStageFloor> floors, batch_floors;
    // The host weights' bytes (the model's ModelWeights point into them), kept as long as the model.
    std::unique_ptr<ThreadPool> pool;
    std::unique_ptr<BenchWeights> host_weights;
    std::unique_ptr<Backend> owner;  // null on a rank other than 0: it made rank 0's calls on its share of the model
};

// The preset's config at `layers` layers, checked against the positions the run needs, and the run's header line.
ModelConfig bench_config(const BenchArgs& a, int64_t layers) {
    ModelConfig config = synthetic_preset(a.preset, layers);
    config.num_mtp_layers = 0;  // the forward does not run MTP layers; they are not uploaded
    config.mtp_compress_ratios.clear();
    std::string pattern;
    for (int64_t l = 0; l < config.num_layers; ++l) {
        const int64_t r = config.compress_ratios[size_t(l)];
        pattern += (l ? " " : "") + std::string(r == 0 ? "SWA" : (r == 4 ? "CSA" : "HCA")) +
                   (config.mlp_types[size_t(l)] == MlpType::kHashMoe ? "/hash" : "");
    }
    std::printf("dsv4 bench: preset %s, %lld layers (%s), context %lld, %lld decode steps (+%lld warm-up), seed %llu\n",
                a.preset.c_str(), (long long)config.num_layers, pattern.c_str(), (long long)a.context,
                (long long)a.steps, (long long)a.warmup, (unsigned long long)a.seed);
    std::fflush(stdout);
    return config;
}

// Single-sequence steps that --timeline traces after the timed ones.
constexpr int kTimelineSteps = 5;

// The positions a sequence of the run reaches: its prompt (or a batch's), then every decode step, timed or not.
int64_t bench_max_context(const BenchArgs& a, const ModelConfig& config) {
    const int64_t decode_steps = a.warmup + a.steps + (a.stages ? std::max<int64_t>(a.warmup, 1) + a.steps : 0) +
                                 (a.timeline.empty() ? 0 : kTimelineSteps);
    const int64_t max_context = std::max(a.context, a.batch_context) + decode_steps + 2;  // + warm-up steps
    DSV4_CHECK(max_context <= config.max_position_embeddings, "--context {} + steps exceeds the model's {} positions",
               a.context, config.max_position_embeddings);
    return max_context;
}

// Weights in host memory but the routed experts, their bytes floors, then the model, whose GPU generates the routed
// experts it holds (over several GPUs, every rank does this; only rank 0 returns with a model).
BenchModel make_bench_model(const BenchArgs& a, int64_t layers) {
    BenchModel m;
    m.config = bench_config(a, layers);
    const ModelConfig& config = m.config;
    const int64_t max_context = bench_max_context(a, config);
    auto t0 = std::chrono::steady_clock::now();
    m.pool = std::make_unique<ThreadPool>(a.threads);
    m.host_weights = std::make_unique<BenchWeights>(a.seed, *m.pool);
    m.ranks = a.rank ? a.rank->world : 1;
    const ExpertRange held = expert_range(config.n_routed_experts, a.rank ? a.rank->rank : 0, m.ranks);
    ModelWeights weights = m.host_weights->build(config, held, ExpertBytes::kDevice);
    std::printf("host weights generated: %.2f GB in %.1f s; the routed experts are generated on the GPU%s\n",
                double(m.host_weights->host_bytes()) / 1e9, seconds_since(t0),
                m.ranks > 1 ? fmt::format(" (this rank's, {}..{}, of {})", held.first, held.first + held.count - 1,
                                          config.n_routed_experts)
                                  .c_str()
                            : "");
    const CacheEntryBytes entry = cache_entry_bytes(config);
    m.position = a.context + a.warmup + a.steps / 2;  // the middle of the timed steps
    m.bytes = decode_bytes(config, weights, m.position, entry);
    m.batch_bytes = decode_bytes(config, weights, a.batch_context, entry);
    m.floors = decode_stage_floors(config, weights, m.position, entry);
    m.batch_floors = decode_stage_floors(config, weights, a.batch_context, entry);

    t0 = std::chrono::steady_clock::now();
    CudaOptions options;
    const int64_t max_batch = a.batches.empty() ? 1 : *std::max_element(a.batches.begin(), a.batches.end());
    options.device = a.device;
    options.max_sequences = std::max<int64_t>(2, max_batch);
    options.max_context = max_context;
    options.max_chunk_tokens = a.chunk;
    options.random_experts_seed = a.seed;
    options.prioritize_main_lane = !a.equal_lane_priority;
    options.shared_expert_on_one_rank = !a.shared_expert_every_rank;
    options.router_with_routing = !a.router_apart;
    options.swiglu_in_w2 = !a.swiglu_apart;
    options.post_mix_in_wo_b = !a.post_mix_apart;
    options.expert_tensor_copies = !a.expert_copies16;
    options.expert_scale_fold = !a.expert_fold_off;
    auto make = [&](const ExpertParallel& ep) -> std::unique_ptr<Backend> {
        options.expert_parallel = ep;
        return std::make_unique<CudaModel>(config, std::move(weights), Numerics::kModel, options);
    };
    if (a.rank) {
        const RunIdentity identity{
            fmt::format("bench preset {} layers {} seed {}", a.preset, config.num_layers, a.seed),
            fmt::format("context {} batch context {} shared {} steps {} warmup {} chunk {} batches {} stages {}",
                        a.context, a.batch_context, a.share_batch_prompt, a.steps, a.warmup, a.chunk,
                        fmt::join(a.batches, ","), a.stages)};
        m.owner = model_on_ranks(*a.rank, a.parallel.options, identity, make, stage_control);
        if (!m.owner) return m;
    } else {
        m.owner = make({});
    }
    std::printf("model uploaded in %.1f s%s\n", seconds_since(t0),
                m.ranks > 1 ? fmt::format(" (rank 0 of {}; the others mirror its calls)", m.ranks).c_str() : "");
    std::printf("routing: the model's own router on these weights and random token ids (score layers: top-%lld of "
                "the random gate's sqrtsoftplus scores plus bias; hash layers: random tid2eid rows of distinct "
                "experts); the batch floors count the distinct experts of B tokens each drawing %lld of %lld "
                "uniformly\n",
                (long long)config.num_experts_per_tok, (long long)config.num_experts_per_tok,
                (long long)config.n_routed_experts);
    return m;
}

// Random token ids of the model's vocabulary, from the seed.
class RandomIds {
  public:
    RandomIds(uint64_t seed, int64_t vocab) : next_(mix64(seed ^ 0x69647321ull)), vocab_(uint64_t(vocab)) {}
    int32_t operator()() { return int32_t(mix64(next_++) % vocab_); }

  private:
    uint64_t next_;
    uint64_t vocab_;
};

// A warm-up sequence: module loads, cuBLASLt handles and first-touch costs stay out of the numbers.
void warm_up(Backend& model, const BenchArgs& a, RandomIds& random_id) {
    SequenceState warm = model.new_sequence();
    std::vector<int32_t> ids(size_t(std::min<int64_t>(a.context, 2 * a.chunk)));
    for (auto& id : ids) id = random_id();
    model.forward(warm, ids, false);
    for (int i = 0; i < 2; ++i) {
        const int32_t id = random_id();
        model.forward(warm, std::span<const int32_t>(&id, 1), false);
    }
}

// The prefill of a --context prompt: tokens/s and its FLOPs' rate, and with --stages its last piece's stage table
// (the prompt run first with the profiler on, on a sequence released before the timed one is made: under
// data-parallel attention both then live on rank 0, whose stages the table shows). Returns the timed sequence.
SequenceState bench_prefill(Backend& model, const BenchArgs& a, const ModelConfig& config, RandomIds& random_id,
                            double copy_gbs, double fp8_tflops) {
    std::vector<int32_t> prompt(static_cast<size_t>(a.context));
    for (auto& id : prompt) id = random_id();
    int64_t bad = 0;
    std::string prefill_stages;
    if (a.stages) {
        control(model, stage_control, "stage_profiling", 1);
        SequenceState profiled = model.new_sequence();
        const auto t0 = std::chrono::steady_clock::now();
        bad += count_nonfinite(model.forward(profiled, prompt, false));
        const double profiled_ms = seconds_since(t0) * 1e3;
        const std::vector<std::vector<StageTime>> recorded{
            dynamic_cast<CudaModel&>(local_model(model)).stage_times()};
        const StageTable table = stage_table(recorded);
        control(model, stage_control, "stage_profiling", 0);
        const int64_t last = std::min(a.chunk, a.context);
        prefill_stages = fmt::format(
            "stages of the prefill's last piece ({} tokens at positions {}..{}; GPU time between the CUDA events at "
            "consecutive stage boundaries; the whole prefill with the profiler: {:.1f} ms):\n{}",
            last, a.context - last, a.context - 1, profiled_ms,
            format_stage_table(table, StageYardstick{{}, copy_gbs, table.ms, table.ms}));
    }
    SequenceState state = model.new_sequence();
    const auto t0 = std::chrono::steady_clock::now();
    bad += count_nonfinite(model.forward(state, prompt, false));
    const double prefill_s = seconds_since(t0);
    std::printf("prefill: %lld tokens in %.3f s = %.0f tokens/s (pieces of %lld tokens; wall clock, synchronous)\n",
                (long long)a.context, prefill_s, double(a.context) / prefill_s, (long long)a.chunk);
    const PrefillFlops flops = prefill_flops(config, a.context);
    std::printf(
        "prefill FLOPs: %.2f TFLOP (linears %.1f%%, routed experts %.1f%%, attention %.1f%%, indexer %.1f%%, "
        "head %.1f%%) = %.1f TFLOP/s = %.1f%% of the dense FP8 rate\n",
        flops.total() / 1e12, 100 * flops.linears / flops.total(), 100 * flops.routed / flops.total(),
        100 * flops.attention / flops.total(), 100 * flops.indexer / flops.total(), 100 * flops.head / flops.total(),
        flops.total() / prefill_s / 1e12, 100 * flops.total() / prefill_s / 1e12 / fp8_tflops);
    std::printf("%s", prefill_stages.c_str());
    DSV4_CHECK(bad == 0, "the synthetic model's prefill produced {} non-finite logits", bad);
    return state;
}

// The bytes one decode step reads, by kind, and their floor at the copy bandwidth.
void print_step_bytes(const BenchModel& m, double copy_gbs) {
    const DecodeBytes& bytes = m.bytes;
    const double total = bytes.total();
    auto line = [&](const char* what, double b, const char* note) {
        std::printf("  %-22s %10.2f MB  %5.1f%%  %s\n", what, b / 1e6, 100.0 * b / total, note);
    };
    std::printf("decode step bytes (one token at position %lld; MB = 1e6 B):\n", (long long)m.position);
    line("attention weights", bytes.attention, "wq_a, wq_b, wkv, wo_a, wo_b, norms, sinks");
    line("compressor/indexer", bytes.compressor, "compressor wkv/wgate, indexer wq_b/weights_proj/compressor");
    line("mHC mixers + norm", bytes.hc, "f32 hc_attn/hc_ffn per block, hc_head, final norm");
    line("router", bytes.router, "bf16 gate [E, D] per layer");
    line("shared expert", bytes.shared, "FP8 w1/w2/w3");
    line("routed experts", bytes.routed, "k x MXFP4 expert, exact: one token selects k distinct experts");
    line("lm_head", bytes.head, "bf16 [vocab, D]");
    line("embedding row", bytes.embed, "");
    line("KV entries", bytes.kv, "584 B each: window + min(topk, visible/4) CSA + visible/128 HCA");
    line("indexer keys", bytes.index_keys, "68 B each, visible/4 per CSA layer");
    std::printf("  %-22s %10.2f MB\n", "total", total / 1e6);
    std::printf("floor at copy bandwidth: %.3f ms\n", total / (copy_gbs * 1e9) * 1e3);
    if (m.ranks > 1)
        std::printf(
            "floor per GPU at copy bandwidth (everything but the routed experts on every GPU, the selected "
            "experts spread over the %d GPUs): %.3f ms\n",
            m.ranks, (total - bytes.routed + bytes.routed / m.ranks) / (copy_gbs * 1e9) * 1e3);
}

// --steps single-token decode steps of `state` after --warmup, timed by CUDA events around forward() (the logits'
// copy and host synchronization included), against the step's bytes; with --stages, the same steps profiled.
void bench_single_steps(Backend& model, const BenchArgs& a, const BenchModel& m, SequenceState& state,
                        RandomIds& random_id, double copy_gbs, LayerRun& run) {
    cudaEvent_t e0, e1;
    DSV4_CUDA_CHECK(cudaEventCreate(&e0));
    DSV4_CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<double> event_ms, host_ms;
    std::vector<float> logits;
    int64_t bad = 0;
    for (int64_t i = 0; i < a.warmup + a.steps; ++i) {
        const int32_t id = random_id();
        if (a.profile_range && i == a.warmup) DSV4_CUDA_CHECK(cudaProfilerStart());
        const auto h0 = std::chrono::steady_clock::now();
        DSV4_CUDA_CHECK(cudaEventRecord(e0, 0));
        logits = model.forward(state, std::span<const int32_t>(&id, 1), false);
        DSV4_CUDA_CHECK(cudaEventRecord(e1, 0));
        DSV4_CUDA_CHECK(cudaEventSynchronize(e1));
        const double h = seconds_since(h0) * 1e3;
        float t = 0;
        DSV4_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        bad += count_nonfinite(logits);
        if (i >= a.warmup) {
            event_ms.push_back(t);
            host_ms.push_back(h);
        }
    }
    if (a.profile_range) DSV4_CUDA_CHECK(cudaProfilerStop());
    if (!a.timeline.empty()) {  // the same steps again with every kernel's start and end recorded
        std::vector<double> traced_ms;
        KernelTimeline timeline;
        timeline.start();
        for (int i = 0; i < kTimelineSteps; ++i) {
            const int32_t id = random_id();
            DSV4_CUDA_CHECK(cudaEventRecord(e0, 0));
            logits = model.forward(state, std::span<const int32_t>(&id, 1), false);
            DSV4_CUDA_CHECK(cudaEventRecord(e1, 0));
            DSV4_CUDA_CHECK(cudaEventSynchronize(e1));
            float t = 0;
            DSV4_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
            traced_ms.push_back(t);
        }
        const int64_t kernels = timeline.stop_and_write(a.timeline);
        std::printf(
            "timeline: %lld kernels of %d traced steps written to %s (a traced step: median %.3f ms, CUDA "
            "events as below; tools/timeline_report.py reads it)\n",
            (long long)kernels, kTimelineSteps, a.timeline.c_str(), median(traced_ms));
    }
    DSV4_CUDA_CHECK(cudaEventDestroy(e0));
    DSV4_CUDA_CHECK(cudaEventDestroy(e1));

    const double step_ms = median(event_ms);
    const double total = m.bytes.total();
    const double floor_ms = total / (copy_gbs * 1e9) * 1e3;
    print_step_bytes(m, copy_gbs);
    std::printf("decode step (CUDA events around forward(), logits copy + host sync included): median %.3f ms, "
                "min %.3f, max %.3f over %lld steps; host clock median %.3f ms\n",
                step_ms, *std::min_element(event_ms.begin(), event_ms.end()),
                *std::max_element(event_ms.begin(), event_ms.end()), (long long)a.steps, median(host_ms));
    std::printf("achieved: %.0f GB/s = %.1f%% of copy bandwidth; measured / floor = %.2fx\n",
                total / (step_ms * 1e-3) / 1e9, 100.0 * total / (step_ms * 1e-3) / 1e9 / copy_gbs, step_ms / floor_ms);
    std::printf("non-finite logits: %lld\n", (long long)bad);
    DSV4_CHECK(bad == 0, "the synthetic model produced {} non-finite logits", bad);
    if (a.stages) {
        const StageRun stages = profile_stages(model, a, [&] {
            const int32_t id = random_id();
            const auto h0 = std::chrono::steady_clock::now();
            logits = model.forward(state, std::span<const int32_t>(&id, 1), false);
            const double h = seconds_since(h0) * 1e3;
            bad += count_nonfinite(logits);
            return h;
        });
        DSV4_CHECK(bad == 0, "the synthetic model produced {} non-finite logits with the stage profiler", bad);
        print_stages("batch 1 @ " + std::to_string(a.context), stages, m.floors, 1,
                     double(m.config.num_experts_per_tok), copy_gbs, median(host_ms));
        run.step_layers_ms = layers_ms(stages.table);
    }
    run.step_ms = step_ms;
    run.bytes = total;
}

// Batched decode: B sequences (prefilled together with batch_context random ids each, or copies of one prefilled
// prompt), one token each per step through forward_batch (one piece, one decode graph per B). Bytes per step: the
// dense weights once, the routed experts the B tokens select (expected distinct experts under uniform routing), the
// KV of B sequences at batch_context.
void bench_batches(Backend& model, const BenchArgs& a, const BenchModel& m, RandomIds& random_id, double copy_gbs,
                   LayerRun& run) {
    const ModelConfig& config = m.config;
    std::printf("batched decode (%lld timed steps after %lld warm-up; each sequence at ~%lld positions%s):\n",
                (long long)a.steps, (long long)a.warmup, (long long)a.batch_context,
                a.share_batch_prompt ? ", all copies of one prefilled prompt, each decoding its own random ids" : "");
    std::printf("  %5s %10s %12s %11s %10s %10s %8s\n", "batch", "step ms", "tokens/s", "bytes/step", "floor ms",
                "x floor", "finite");
    std::vector<std::pair<StageRun, double>> stage_runs;  // --stages: per batch size, with its step
    // Under data-parallel attention a copy stays on its source's GPU, so a shared prompt is prefilled once per
    // rank (new sequences go to the rank with the fewest) and the copies taken in turn from each.
    const int64_t prompt_sources = m.ranks > 1 && a.parallel.options.attention == "data-parallel" ? m.ranks : 1;
    for (int64_t B : a.batches) {
        std::vector<SequenceState> seqs;
        std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(B));
        std::vector<BatchItem> items;
        const int64_t sources = a.share_batch_prompt ? std::min(B, prompt_sources) : B;
        for (int64_t b = 0; b < B; ++b) {
            if (b < sources) seqs.push_back(model.new_sequence());
            prompts[size_t(b)].resize(size_t(a.batch_context));
            for (auto& id : prompts[size_t(b)]) id = random_id();
        }
        for (int64_t b = 0; b < sources; ++b) items.push_back({&seqs[size_t(b)], prompts[size_t(b)], false});
        model.forward_batch(items);
        // --share-batch-prompt: the rest are device copies of the prefilled states (copy_sequence)
        for (int64_t b = sources; b < B; ++b) seqs.push_back(model.copy_sequence(seqs[size_t(b % sources)]));
        std::vector<int32_t> next(static_cast<size_t>(B));
        std::vector<std::vector<float>> out;  // the logits, its vectors reused from step to step as the engine does
        std::vector<TokenDraw> draws(static_cast<size_t>(B));  // --draw
        std::mt19937_64 draw_generator(a.seed);
        int64_t nonfinite = 0;
        auto step = [&] {  // one token per sequence; ms of forward_batch by the host clock
            items.clear();
            for (int64_t b = 0; b < B; ++b) {
                next[size_t(b)] = random_id();
                items.push_back({&seqs[size_t(b)], std::span<const int32_t>(&next[size_t(b)], 1), false});
                if (a.draw) {
                    draws[size_t(b)] = {.greedy = false, .u = uniform_53(draw_generator)};
                    items.back().draw = &draws[size_t(b)];
                }
            }
            const auto h0 = std::chrono::steady_clock::now();
            model.forward_batch_into(items, out);
            const double h = seconds_since(h0) * 1e3;
            for (int64_t b = 0; b < B; ++b)
                nonfinite += a.draw ? draws[size_t(b)].id < 0 : count_nonfinite(out[size_t(b)]);
            return h;
        };
        std::vector<double> ms;
        for (int64_t i = 0; i < a.warmup + a.steps; ++i) {
            const double h = step();
            if (i >= a.warmup) ms.push_back(h);
        }
        if (a.stages) stage_runs.emplace_back(profile_stages(model, a, step), median(ms));
        const double step_b = batch_decode_bytes(config, m.batch_bytes, B);
        const double step_ms = median(ms), floor = step_b / (copy_gbs * 1e9) * 1e3;
        std::printf("  %5lld %10.3f %12.0f %9.1f MB %10.3f %9.2fx %8s\n", (long long)B, step_ms,
                    double(B) / (step_ms * 1e-3), step_b / 1e6, floor, step_ms / floor, nonfinite ? "NO" : "yes");
        DSV4_CHECK(nonfinite == 0, "batch {}: {} non-finite logits", B, nonfinite);
        run.batch_ms.push_back(step_ms);
        run.batch_bytes.push_back(step_b);
    }
    std::printf("  (host clock around forward_batch: upload, graph replay, %s and host synchronization)\n",
                a.draw ? "the draws on the GPU (temperature 1), the ids' copy" : "logits copy");
    for (size_t i = 0; i < stage_runs.size(); ++i) {
        const double B = double(a.batches[i]);
        const std::string what = "batch " + std::to_string(a.batches[i]) + " @ " + std::to_string(a.batch_context);
        print_stages(what, stage_runs[i].first, m.batch_floors, B, expected_distinct_experts(config, B), copy_gbs,
                     stage_runs[i].second);
        run.batch_layers_ms.push_back(layers_ms(stage_runs[i].first.table));
    }
}

// One model of `layers` layers: prefill, single-sequence decode steps, then each batch size.
LayerRun run_model(const BenchArgs& a, int64_t layers, double copy_gbs, double fp8_tflops) {
    LayerRun run;
    run.layers = layers;
    BenchModel m = make_bench_model(a, layers);
    if (!m.owner) return run;  // a rank other than 0: it made rank 0's calls on its share of the model
    Backend& model = *m.owner;
    RandomIds random_id(a.seed, m.config.vocab_size);
    warm_up(model, a, random_id);
    {
        SequenceState state = bench_prefill(model, a, m.config, random_id, copy_gbs, fp8_tflops);
        bench_single_steps(model, a, m, state, random_id, copy_gbs, run);
    }  // its pool slot back for the batches
    if (!a.batches.empty()) bench_batches(model, a, m, random_id, copy_gbs, run);
    return run;
}

void run_bench(const BenchArgs& a) {
    DSV4_CHECK(cuda::device_count() > 0, "dsv4 bench needs a CUDA GPU; none was found");
    DSV4_CUDA_CHECK(cudaSetDevice(a.device));
    std::printf("device: %s%s\n", cuda::describe_device(a.device).c_str(),
                a.rank ? fmt::format(" (rank 0 of {} ranks, one GPU each)", a.rank->world).c_str() : "");
    // Copy bandwidth, before a model takes the memory: the limit every floor below is measured against.
    const double copy_gbs = copy_bandwidth_gbs();
    std::printf("device-to-device copy (1 GiB, read + write, median of 10): %.0f GB/s\n", copy_gbs);
    const double fp8_tflops = fp8_dense_tflops();
    std::printf("dense FP8 tensor-core rate (cuBLASLt block-scaled e4m3 GEMM 8192^3, median of 10): %.0f TFLOP/s\n",
                fp8_tflops);
    std::vector<LayerRun> runs;
    for (int64_t layers : a.layers) runs.push_back(run_model(a, layers, copy_gbs, fp8_tflops));  // one model at a time
    if (runs.size() < 2 || (a.rank && !a.rank->leader())) return;

    // The cost of one more layer: the difference between the smallest and the largest model over the layers between
    // them, so the lm_head, embedding and per-step overheads cancel. Its floor: the bytes those layers add.
    const LayerRun& lo =
        *std::min_element(runs.begin(), runs.end(), [](auto& x, auto& y) { return x.layers < y.layers; });
    const LayerRun& hi =
        *std::max_element(runs.begin(), runs.end(), [](auto& x, auto& y) { return x.layers < y.layers; });
    DSV4_CHECK(hi.layers > lo.layers, "--layers: give two different layer counts for the cost per layer");
    const double n = double(hi.layers - lo.layers);
    std::printf(
        "per added layer (%lld -> %lld layers; the layer pattern's mix of SWA/CSA/HCA and hash/score layers):\n",
        (long long)lo.layers, (long long)hi.layers);
    // With --stages, also the difference of the layers' GPU time in the profiled steps (5-10 % slower than plain
    // ones: the event nodes), which the host's handling of a batch's logits does not move.
    const bool staged = a.stages;
    std::printf("  %14s %12s %12s %12s %9s%s\n", "batch @ context", "ms / layer", "MB / layer", "floor ms", "x floor",
                staged ? "   GPU ms / layer (stages)  x floor" : "");
    auto row = [&](int64_t batch, int64_t context, double ms_lo, double ms_hi, double b_lo, double b_hi,
                   double gpu_lo, double gpu_hi) {
        const double ms = (ms_hi - ms_lo) / n, bytes = (b_hi - b_lo) / n, floor = bytes / (copy_gbs * 1e9) * 1e3;
        std::printf("  %6lld @ %6lld %12.4f %12.2f %12.4f %8.2fx", (long long)batch, (long long)context, ms,
                    bytes / 1e6, floor, ms / floor);
        if (staged) std::printf(" %26.4f %8.2fx", (gpu_hi - gpu_lo) / n, (gpu_hi - gpu_lo) / n / floor);
        std::printf("\n");
    };
    row(1, a.context, lo.step_ms, hi.step_ms, lo.bytes, hi.bytes, lo.step_layers_ms,
        hi.step_layers_ms);                        // the single-sequence step (CUDA events)
    for (size_t i = 0; i < a.batches.size(); ++i)  // the batched steps (host clock)
        row(a.batches[i], a.batch_context, lo.batch_ms[i], hi.batch_ms[i], lo.batch_bytes[i], hi.batch_bytes[i],
            staged ? lo.batch_layers_ms[i] : 0.0, staged ? hi.batch_layers_ms[i] : 0.0);
}

}  // namespace
#endif

void add_bench_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("bench", "Decode-step latency of a V4-Flash-shaped model with random weights (GPU)");
    auto a = std::make_shared<BenchArgs>();
    cmd->add_option("--preset", a->preset, "Model shapes (flash: V4-Flash, pro: V4-Pro)")->check(CLI::IsMember({"flash", "pro"}));
    cmd->add_option("--layers", a->layers,
                    "Trunk layers, continuing the preset's layer pattern; two or more counts (e.g. 4,12) also give "
                    "the cost per added layer against its floor")
        ->delimiter(',')
        ->check(CLI::PositiveNumber);
    cmd->add_option("--context", a->context, "Prefill tokens before the timed decode steps")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--steps", a->steps, "Timed decode steps (median reported)")->check(CLI::PositiveNumber);
    cmd->add_option("--warmup", a->warmup, "Untimed decode steps before them")->check(CLI::NonNegativeNumber);
    cmd->add_option("--chunk", a->chunk, "Prefill piece length (CudaOptions::max_chunk_tokens, at most 65535)")
        ->check(CLI::Range(int64_t{1}, kMaxChunkTokens));
    cmd->add_option("--batch", a->batches, "Also time batched decode steps at these batch sizes (e.g. 1,8,32)")
        ->delimiter(',')
        ->check(CLI::PositiveNumber);
    cmd->add_option("--batch-context", a->batch_context, "Prefill tokens of each sequence of a batch")
        ->check(CLI::PositiveNumber);
    cmd->add_flag("--share-batch-prompt", a->share_batch_prompt,
                  "Prefill one --batch-context prompt and copy its state to every sequence of a batch (long contexts "
                  "at large batches without prefilling B prompts); each sequence still decodes its own random ids");
    cmd->add_flag("--draw", a->draw,
                  "Batched steps draw every sequence's next token on the GPU (temperature 1: the serving path) "
                  "instead of copying the logits to the host");
    cmd->add_option("--seed", a->seed, "Seed of the random weights and ids");
    cmd->add_option("--threads", a->threads, "Host threads generating the weights (0: all cores)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_flag("--stages", a->stages,
                  "Also time every measured step with the stage profiler on and print its per-stage table (GPU time "
                  "per step and per layer, share, bytes floor)");
    cmd->add_flag("--equal-lane-priority", a->equal_lane_priority,
                  "Give the side lane the main stream's scheduling priority (CudaOptions::prioritize_main_lane off; "
                  "the same bits, to measure what the priority buys)");
    cmd->add_flag("--shared-expert-every-rank", a->shared_expert_every_rank,
                  "With --gpus and replicated attention: every rank computes the shared expert of a short step "
                  "(CudaOptions::shared_expert_on_one_rank off; the same bits, to measure what it buys)");
    cmd->add_flag("--router-apart", a->router_apart,
                  "Run a decode step's router and routing as two launches (CudaOptions::router_with_routing off; the "
                  "same bits, to measure what the one launch buys)");
    cmd->add_flag("--post-mix-apart", a->post_mix_apart,
                  "Run the attention's mHC post-mix as its own launch (CudaOptions::post_mix_in_wo_b off; the same "
                  "bits, to measure what computing it in wo_b's epilogue buys)");
    cmd->add_flag(
        "--expert-copies16", a->expert_copies16,
        "Copy the batch-1 routed-expert passes' weight stages by 16-byte cp.async instead of one tensor-map "
        "copy a stage (CudaOptions::expert_tensor_copies off; the same bits, to measure what the copies buy)");
    cmd->add_flag("--expert-fold-off", a->expert_fold_off,
                  "Promote the block scales of prefill's wide routed-expert passes instead of folding them into the "
                  "weights (CudaOptions::expert_scale_fold off; to measure what the fold buys)");
    cmd->add_flag("--swiglu-apart", a->swiglu_apart,
                  "Run the routed experts' SwiGLU as its own launch (CudaOptions::swiglu_in_w2 off; the same bits, to "
                  "measure what computing it in w2 buys)");
    cmd->add_option("--timeline", a->timeline,
                    "After the timed single-sequence decode steps, trace 5 more with CUPTI's kernel records and write "
                    "each kernel's start, end, lane and name to this file (tools/timeline_report.py makes tables of "
                    "it)");
    cmd->add_flag("--profile-range", a->profile_range,
                  "Open the CUDA profiler's range (cudaProfilerStart / Stop) around the timed single-sequence decode "
                  "steps only, for `ncu --profile-from-start off` (tools/gpu_kernel_profile.sh)");
    add_parallel_options(cmd, a->parallel);
    // Accepted so that scripts can give every model command the same `--backend cuda`; the bench runs only there.
    cmd->add_option("--backend", a->backend, "cuda (the only backend the bench measures)")
        ->check(CLI::IsMember({"cuda"}));
    cmd->callback([a] {
#ifdef DSV4_WITH_CUDA
        if (std::optional<int> code = start_ranks(a->parallel, a->rank, a->device)) {
            std::fflush(stdout);
            std::fflush(stderr);
            std::exit(*code);
        }
        run_bench(*a);
#else
        fail("dsv4 bench needs a CUDA build of dsv4 (configure with -DDSV4_CUDA=ON) and a GPU");
#endif
    });
}

}  // namespace dsv4::cli
