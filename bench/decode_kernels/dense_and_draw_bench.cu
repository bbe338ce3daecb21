// The small bf16 dense_linear calls at one token, and the GPU draws (sample_rows).
#include "common.cuh"

namespace dsv4::bench {

// dense_linear, bf16 W [n, 4096], one token: the router gate / compressor / indexer projections of a decode step.
void bench_dense(int64_t n) {
    const int64_t k = 4096;
    const size_t w_bytes = size_t(n * k * 2);
    const int copies = int(std::max<size_t>(1, (size_t(512) << 20) / w_bytes));
    DeviceBuffer<__nv_bfloat16> w{size_t(copies) * size_t(n * k)}, x{size_t(k)};
    fill_bf16<<<1024, 256>>>(w.get(), w.size(), 11);
    fill_bf16<<<16, 256>>>(x.get(), x.size(), 12);
    DeviceBuffer<float> y{size_t(n)}, y_ref{size_t(n)};
    check_launch(0);
    auto params = [&](int i, float* out) {
        DenseLinearParams p;
        p.type = DenseType::kBF16;
        p.x = x.get();
        p.w = w.get() + size_t(i % copies) * size_t(n * k);
        p.y = out;
        p.m = 1;
        p.n = n;
        p.k = k;
        p.ldx = k;
        p.ldw = k;
        p.ldy = n;
        return p;
    };
    const double us = graph_us([&](int i, cudaStream_t s) { dense_linear(params(i, y.get()), s); });
    dense_linear(params(0, y.get()), nullptr);
    detail::launch_dense_linear_tiled(params(0, y_ref.get()), nullptr);
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    std::printf("dense_linear bf16 N %5lld K 4096 M 1: %7.2f us, %6.0f GB/s   staged vs tiled %s\n", (long long)n, us,
                double(w_bytes) / (us * 1e-6) / 1e9, verdict(same_bits(y, y_ref)));
}

// sample_rows at V4's vocabulary: `rows` draws from model-like logits (N(0, 2.5) and a few far above). The kernel
// overwrites its rows with the weights, so each timed launch gets a fresh copy (made before its start event); one
// launch per timing, median of 9.
void bench_draw(int64_t rows, const char* mode) {
    constexpr int64_t V = 129280;
    const size_t n = size_t(rows * V);
    DeviceBuffer<float> pristine(n), logits(n);
    fill_f32<<<1024, 256>>>(pristine.get(), n, 7u, 5.0f);  // ~N(0, 2.9)
    std::vector<RowDraw> host(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
        RowDraw& d = host[size_t(r)];
        d.greedy = std::strcmp(mode, "greedy") == 0;
        d.temperature = 1.0f;
        d.min_p = std::strcmp(mode, "min_p 0.05") == 0 ? 0.05f : 0.0f;
        d.u = double(r + 1) / double(rows + 2);
        d.logits_row = int32_t(r);
    }
    DeviceBuffer<RowDraw> draws(host.size());
    draws.upload(host.data(), host.size());
    DeviceBuffer<int32_t> ids(static_cast<size_t>(rows));
    DeviceBuffer<uint8_t> scratch(sample_rows_scratch_bytes(rows, V));
    Stream stream;
    std::vector<double> us;
    for (int i = 0; i < 10; ++i) {
        DSV4_CUDA_CHECK(
            cudaMemcpyAsync(logits.get(), pristine.get(), n * sizeof(float), cudaMemcpyDeviceToDevice, stream.get()));
        Event start, stop;
        start.record(stream.get());
        SampleParams p;
        p.logits = logits.get();
        p.draws = draws.get();
        p.ids = ids.get();
        p.scratch = scratch.get();
        p.draws_count = rows;
        p.vocab = V;
        sample_rows(p, stream.get());
        stop.record(stream.get());
        stream.synchronize();
        if (i > 0) us.push_back(double(stop.elapsed_since(start)) * 1e3);
    }
    std::sort(us.begin(), us.end());
    std::printf("%-6s %6lld %-12s %10.1f\n", "draw", (long long)rows, mode, us[us.size() / 2]);
}

}  // namespace dsv4::bench
