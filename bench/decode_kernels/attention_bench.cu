// The attention benches: attention_inputs against the launches it replaces, and the sparse attention's paths.
#include "common.cuh"

namespace dsv4::bench {

// The attention's inputs of `tokens` rows at V4-Flash shapes (64 heads of 512, rope 64): attention_inputs against
// the launches it replaces (head_rms_norm, apply_ropes on q and kv, pack_kv_entries into the chunk's entries and,
// with `ring`, into ring entries), each of those also timed alone; outputs compared bitwise from the same inputs.
void bench_inputs(int64_t tokens, bool ring) {
    const int64_t heads = 64, d = 512, rope = 64, entry = kv_entry_layout(d, rope).bytes;
    DeviceBuffer<__nv_bfloat16> q0{size_t(tokens * heads * d)}, kv0{size_t(tokens * d)};
    fill_bf16<<<256, 256>>>(q0.get(), q0.size(), 21);
    fill_bf16<<<256, 256>>>(kv0.get(), kv0.size(), 22);
    DeviceBuffer<__nv_bfloat16> q{q0.size()}, kv{kv0.size()}, q_ref{q0.size()}, kv_ref{kv0.size()};
    DeviceBuffer<uint8_t> entries{size_t(tokens * entry)}, ring_entries{size_t(2 * tokens * entry)};
    DeviceBuffer<uint8_t> entries_ref{entries.size()}, ring_ref{ring_entries.size()};
    std::vector<int32_t> positions, slots;
    for (int64_t t = 0; t < tokens; ++t) {
        positions.push_back(int32_t(4096 + 37 * t));
        slots.push_back(int32_t(2 * t + 1));
    }
    const DeviceBuffer<float> d_freq = rope_inv_freq(rope);
    DeviceBuffer<int32_t> d_pos{positions.size()}, d_slots{slots.size()};
    d_pos.upload(positions.data(), positions.size());
    d_slots.upload(slots.data(), slots.size());
    check_launch(0);
    auto fused = [&](__nv_bfloat16* qp, __nv_bfloat16* kvp, uint8_t* e, uint8_t* r, cudaStream_t s) {
        AttentionInputsParams p;
        p.q = qp;
        p.kv = kvp;
        p.inv_freq = d_freq.get();
        p.positions = d_pos.get();
        p.entries = e;
        p.ring = ring ? r : nullptr;
        p.ring_slots = ring ? d_slots.get() : nullptr;
        p.tokens = tokens;
        p.heads = heads;
        p.head_dim = d;
        p.rope_dim = rope;
        p.eps = 1e-6f;
        attention_inputs(p, s);
    };
    auto norm = [&](__nv_bfloat16* qp, cudaStream_t s) { head_rms_norm({qp, tokens, heads, d, heads * d, 1e-6f}, s); };
    auto ropes = [&](__nv_bfloat16* qp, __nv_bfloat16* kvp, cudaStream_t s) {
        const ApplyRopeParams r[] = {{qp, d_freq.get(), d_pos.get(), tokens, heads, d, rope, heads * d, false},
                                     {kvp, d_freq.get(), d_pos.get(), tokens, 1, d, rope, d, false}};
        apply_ropes(r, s);
    };
    auto packs = [&](__nv_bfloat16* kvp, uint8_t* e, uint8_t* r, cudaStream_t s) {
        pack_kv_entries({kvp, e, nullptr, tokens, d, rope, d}, s);
        if (ring) pack_kv_entries({kvp, r, d_slots.get(), tokens, d, rope, d}, s);
    };
    // Bits: both from the same inputs.
    auto reset = [&](DeviceBuffer<__nv_bfloat16>& qd, DeviceBuffer<__nv_bfloat16>& kvd, DeviceBuffer<uint8_t>& e,
                     DeviceBuffer<uint8_t>& r) {
        DSV4_CUDA_CHECK(cudaMemcpy(qd.get(), q0.get(), q0.bytes(), cudaMemcpyDeviceToDevice));
        DSV4_CUDA_CHECK(cudaMemcpy(kvd.get(), kv0.get(), kv0.bytes(), cudaMemcpyDeviceToDevice));
        DSV4_CUDA_CHECK(cudaMemset(e.get(), 0xA5, e.bytes()));
        DSV4_CUDA_CHECK(cudaMemset(r.get(), 0x5A, r.bytes()));
    };
    reset(q, kv, entries, ring_entries);
    reset(q_ref, kv_ref, entries_ref, ring_ref);
    fused(q.get(), kv.get(), entries.get(), ring_entries.get(), nullptr);
    norm(q_ref.get(), nullptr);
    ropes(q_ref.get(), kv_ref.get(), nullptr);
    packs(kv_ref.get(), entries_ref.get(), ring_ref.get(), nullptr);
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    auto same = [](const auto& a, const auto& b) {
        std::vector<uint8_t> x(a.bytes()), y(b.bytes());
        DSV4_CUDA_CHECK(cudaMemcpy(x.data(), a.get(), x.size(), cudaMemcpyDeviceToHost));
        DSV4_CUDA_CHECK(cudaMemcpy(y.data(), b.get(), y.size(), cudaMemcpyDeviceToHost));
        return x == y;
    };
    const bool bits = same(q, q_ref) && same(kv, kv_ref) && same(entries, entries_ref) && same(ring_entries, ring_ref);
    if (!bits) ++failures;
    // Times (in place, so the launches repeat on their own outputs: the same work each time).
    const double norm_us = graph_us([&](int, cudaStream_t s) { norm(q_ref.get(), s); });
    const double rope_us = graph_us([&](int, cudaStream_t s) { ropes(q_ref.get(), kv_ref.get(), s); });
    const double pack_us =
        graph_us([&](int, cudaStream_t s) { packs(kv_ref.get(), entries_ref.get(), ring_ref.get(), s); });
    const double separate_us = graph_us([&](int, cudaStream_t s) {
        norm(q_ref.get(), s);
        ropes(q_ref.get(), kv_ref.get(), s);
        packs(kv_ref.get(), entries_ref.get(), ring_ref.get(), s);
    });
    const double fused_us =
        graph_us([&](int, cudaStream_t s) { fused(q.get(), kv.get(), entries.get(), ring_entries.get(), s); });
    const double bytes = 2.0 * double(q0.bytes() + kv0.bytes()) + double(tokens * entry) * (ring ? 2 : 1);
    std::printf("%-6s %6lld %5s %9.1f %9.1f %9.1f %11.1f %9.1f %9.0f   %s\n", "inputs", (long long)tokens,
                ring ? "yes" : "no", norm_us, rope_us, pack_us, separate_us, fused_us, bytes / (fused_us * 1e-6) / 1e9,
                bits ? "same" : "DIFFER");
}

// Sparse attention of `tokens` decode tokens over `slots` cache entries each (V4-Flash: 64 heads of 512, rope 64;
// CSA 128 + 512 slots, HCA 128 + context / 128), the splits combined by one cluster per token (kCluster) against
// the three kernels through the workspace (kKernels). Entries are spread over 75 MB (> L2) and each launch reads
// another of 8 index sets.
void bench_attention(int32_t tokens, int32_t slots, bool prefill) {
    const FlashAttentionInputs in(tokens, slots);
    const int32_t heads = in.kHeads, d = in.kDim;
    const SparseAttentionPlan& plan = in.plan;
    DeviceBuffer<uint16_t> out_cluster{size_t(tokens) * heads * d}, out_kernels{size_t(tokens) * heads * d};
    auto params = [&](int i, SparseAttentionCombine combine, uint16_t* out) { return in.params(i, combine, out); };
    // The three kernels, then the cluster with 64 and with 16 heads per CTA, each against the kernels' bits.
    const double kernels_us = graph_us([&](int i, cudaStream_t s) {
        sparse_attention(params(i, SparseAttentionCombine::kKernels, out_kernels.get()), s);
    });
    sparse_attention(params(0, SparseAttentionCombine::kKernels, out_kernels.get()), nullptr);
    if (prefill) {  // a prefill piece: the kernels against the sequential kernel (no workspace)
        const double sequential_us = graph_us([&](int i, cudaStream_t s) {
            sparse_attention(params(i, SparseAttentionCombine::kSequential, out_cluster.get()), s);
        });
        sparse_attention(params(0, SparseAttentionCombine::kSequential, out_cluster.get()), nullptr);
        DSV4_CUDA_CHECK(cudaDeviceSynchronize());
        const bool auto_sequential =
            detail::sparse_attention_takes_sequential(params(0, SparseAttentionCombine::kAuto, out_cluster.get()));
        std::printf("%-6d %6d %6d %11s %12.2f %12.2f %12s   %-9s %s %016llx\n", tokens, slots, plan.splits, "-",
                    kernels_us, sequential_us, "(sequential)", auto_sequential ? "sequential" : "kernels",
                    verdict(same_bits(out_cluster, out_kernels)),
                    (unsigned long long)device_bytes_hash(out_cluster));
        return;
    }
    double cluster_us[2] = {0.0, 0.0};
    int64_t resident[2] = {0, 0};
    bool same = true;
    for (int v = 0; v < 2; ++v) {
        const int32_t heads = v == 0 ? 64 : kNarrowClusterHeads;
        auto cluster = [&](int i) {
            SparseAttentionParams p = params(i, SparseAttentionCombine::kCluster, out_cluster.get());
            p.cluster_heads = heads;
            return p;
        };
        resident[v] = detail::sparse_attention_resident_clusters(cluster(0), heads);
        if (!resident[v]) continue;
        cluster_us[v] = graph_us([&](int i, cudaStream_t s) { sparse_attention(cluster(i), s); });
        sparse_attention(cluster(0), nullptr);
        DSV4_CUDA_CHECK(cudaDeviceSynchronize());
        same = same && same_bits(out_cluster, out_kernels);
    }
    const int32_t automatic =
        detail::sparse_attention_cluster_heads(params(0, SparseAttentionCombine::kAuto, out_cluster.get()));
    char choice[16];
    std::snprintf(choice, sizeof choice, automatic ? "cluster%d" : "kernels", automatic);
    std::printf("%-6d %6d %6d %5lld/%-5lld %12.2f %12.2f %12.2f   %-9s %s\n", tokens, slots, plan.splits,
                (long long)resident[0], (long long)resident[1], kernels_us, cluster_us[0], cluster_us[1], choice,
                verdict(same));
}

}  // namespace dsv4::bench
