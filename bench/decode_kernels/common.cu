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

const char* verdict(bool same) {
    if (!same) ++failures;
    return same ? "identical" : "DIFFER";
}

}  // namespace dsv4::bench
