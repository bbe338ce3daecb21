// The decode kernels' benches' shared parts (see common.cuh).
#include "common.cuh"

namespace dsv4::bench {

bool g_chosen_only = false;
int failures = 0;

__global__ void fill_bytes(uint8_t* p, size_t n, uint32_t seed, uint8_t avoid_mask, uint8_t avoid) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint8_t b = uint8_t(index_hash(i, seed));
        if ((b & avoid_mask) == avoid) b ^= 1;
        p[i] = b;
    }
}
__global__ void fill_codes(uint8_t* p, size_t n, uint32_t seed, uint32_t lo, uint32_t span, int shift) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        p[i] = uint8_t((lo + index_hash(i, seed) % span) << shift);
}
__global__ void fill_f32(float* p, size_t n, uint32_t seed, float scale) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        float s = 0.0f;
        for (uint32_t r = 0; r < 4; ++r) {
            uint32_t h = (uint32_t(i) * 4u + r) * 2654435761u ^ seed;
            h ^= h >> 16;
            h *= 0x7feb352du;
            h ^= h >> 15;
            s += float(h >> 8) * (1.0f / 16777216.0f) - 0.5f;
        }
        p[i] = s * scale;
    }
}
__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        p[i] = __float2bfloat16(float(int(h % 2001) - 1000) * (1.0f / 256));
    }
}
__global__ void fill_entries(uint8_t* kv, size_t entries, int entry_bytes, int rope_offset, int scale_offset,
                             int scale_end, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < entries * entry_bytes;
         i += size_t(gridDim.x) * blockDim.x) {
        const uint32_t h = index_hash(i, seed);
        const int at = int(i % entry_bytes);
        uint8_t b = uint8_t(h);
        if (at < rope_offset && (b & 0x7F) == 0x7F) b ^= 1;  // e4m3 NaN
        if (at >= rope_offset && at < scale_offset && at % 2) b = uint8_t(0x3F + (h >> 8) % 3 - 1) | (b & 0x80);
        if (at >= scale_offset) b = at < scale_end ? uint8_t(119 + (h >> 8) % 8) : 0;
        kv[i] = b;
    }
}

FlashMixer::FlashMixer(int64_t tokens_, bool head)
    : tokens(tokens_),
      rows(head ? kN : hc_pre_mix_size(kN)),
      fn(size_t(kCopies * rows * kWidth)),
      base(size_t(rows)),
      scale(3),
      streams(size_t(tokens_ * kWidth)) {
    fill_f32<<<1024, 256>>>(fn.get(), fn.size(), 1, 2.0f / 128.0f);
    fill_f32<<<1, 64>>>(base.get(), base.size(), 2, 1.0f);
    fill_f32<<<1, 64>>>(scale.get(), scale.size(), 3, 1.0f);
    fill_bf16<<<256, 256>>>(streams.get(), streams.size(), 4);
    check_launch(0);
}

HcMixParams FlashMixer::params(int i, __nv_bfloat16* x, float* mix) const {
    HcMixParams p;
    p.streams = streams.get();
    p.fn = fn.get() + size_t(i % kCopies) * size_t(rows * kWidth);
    p.base = base.get();
    p.scale = scale.get();
    p.x_out = x;
    p.mix = mix;
    p.tokens = tokens;
    p.n_hc = kN;
    p.dim = kDim;
    p.sinkhorn_iters = 20;
    p.hc_eps = 1e-6f;
    p.norm_eps = 1e-6f;
    return p;
}

FlashAttentionInputs::FlashAttentionInputs(int32_t tokens_, int32_t slots_)
    : tokens(tokens_), slots(slots_), plan(plan_sparse_attention(kHeads, kDim, slots_)) {
    const MainEntryLayout layout = main_entry_layout(kDim, kRope);
    const size_t entries = size_t(75) * 1000 * 1000 / size_t(layout.bytes());
    kv = DeviceBuffer<uint8_t>{entries * size_t(layout.bytes())};
    fill_entries<<<1024, 256>>>(kv.get(), entries, int(layout.bytes()), int(layout.rope_offset()),
                                int(layout.scale_offset()), int(layout.scale_offset() + layout.scales()), 13);
    q = DeviceBuffer<__nv_bfloat16>{size_t(tokens) * kHeads * kDim};
    fill_bf16<<<256, 256>>>(q.get(), q.size(), 14);
    std::vector<int32_t> idx(size_t(kSets) * tokens * slots);
    uint32_t h = 15;
    for (int32_t& v : idx) {
        h = h * 1664525u + 1013904223u;
        v = int32_t(h % uint32_t(entries));
    }
    indices = DeviceBuffer<int32_t>{idx.size()};
    indices.upload(idx.data(), idx.size());
    sink = DeviceBuffer<float>{size_t(kHeads)};
    fill_f32<<<1, 64>>>(sink.get(), sink.size(), 16, 1.0f);
    workspace = DeviceBuffer<float>{size_t(std::max<int64_t>(1, tokens * plan.workspace_floats_per_token))};
    check_launch(0);
}

SparseAttentionParams FlashAttentionInputs::params(int i, SparseAttentionCombine combine, uint16_t* out) const {
    SparseAttentionParams p;
    p.q = reinterpret_cast<const uint16_t*>(q.get());
    p.kv = kv.get();
    p.indices = indices.get() + size_t(i % kSets) * tokens * slots;
    p.sink = sink.get();
    p.out = out;
    p.workspace = workspace.get();
    p.workspace_floats = tokens * plan.workspace_floats_per_token;
    p.tokens = tokens;
    p.heads = kHeads;
    p.head_dim = kDim;
    p.rope_dim = kRope;
    p.slots = slots;
    p.splits = plan.splits;
    p.scale = 1.0f / std::sqrt(float(kDim));
    p.combine = combine;
    return p;
}

uint64_t device_bytes_hash(const std::vector<const DeviceBuffer<__nv_bfloat16>*>& buffers) {
    uint64_t hash = 1469598103934665603ull;
    for (const DeviceBuffer<__nv_bfloat16>* b : buffers) hash = device_bytes_hash(*b, hash);
    return hash;
}

MoeCombineParams combine_params(const DeviceBuffer<__nv_bfloat16>& routed, const DeviceBuffer<int32_t>& experts,
                                const DeviceBuffer<int32_t>& slots, const DeviceBuffer<__nv_bfloat16>& shared,
                                DeviceBuffer<__nv_bfloat16>& out, int64_t tokens, int64_t dim, int64_t k) {
    MoeCombineParams p;
    p.routed = routed.get();
    p.experts = experts.get();
    p.assignment_slot = slots.get();
    p.shared = shared.get();
    p.out = out.get();
    p.tokens = tokens;
    p.dim = dim;
    p.k = int32_t(k);
    return p;
}

double graph_us(const std::function<void(int, cudaStream_t)>& launch) {
    // The cases fill and upload their inputs on the legacy stream, which does not order work on a non-blocking one.
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    Stream stream;
    launch(0, stream.get());  // one-time host work (attributes, occupancy) outside the capture
    stream.synchronize();
    cudaGraph_t graph = nullptr;
    DSV4_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kLaunches; ++i) launch(i, stream.get());
    DSV4_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &graph));
    cudaGraphExec_t exec = nullptr;
    DSV4_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    DSV4_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
    std::vector<double> us;
    for (int r = 0; r < kReplays; ++r) {
        Event start, stop;
        start.record(stream.get());
        DSV4_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
        stop.record(stream.get());
        stream.synchronize();
        us.push_back(double(stop.elapsed_since(start)) * 1e3 / kLaunches);
    }
    DSV4_CUDA_CHECK(cudaGraphExecDestroy(exec));
    DSV4_CUDA_CHECK(cudaGraphDestroy(graph));
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
}

DeviceBuffer<float> rope_inv_freq(int64_t rope_dim) {
    std::vector<float> freq(size_t(rope_dim / 2));
    for (size_t i = 0; i < freq.size(); ++i) freq[i] = std::pow(10000.0f, -2.0f * float(i) / float(rope_dim));
    DeviceBuffer<float> d_freq{freq.size()};
    d_freq.upload(freq.data(), freq.size());
    return d_freq;
}

const char* verdict(bool same) {
    if (!same) ++failures;
    return same ? "identical" : "DIFFER";
}

}  // namespace dsv4::bench
