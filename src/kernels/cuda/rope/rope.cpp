// Host-side contract checks of apply_rope (rope.h); the kernel is in rope.cu.
#include "kernels/cuda/rope/rope.h"

#include "core/error.h"

namespace dsv4::cuda {

RopePath rope_path(const ApplyRopeParams& p) {
    const bool paired = p.head_dim % 2 == 0 && p.token_stride % 2 == 0 && p.rope_dim <= 1024 &&
                        reinterpret_cast<uintptr_t>(p.x) % 4 == 0;
    return paired ? RopePath::kPaired : RopePath::kGeneric;
}

namespace {

void check(const ApplyRopeParams& p) {
    DSV4_CHECK(p.x && p.inv_freq && p.positions, "apply_rope: null pointer");
    DSV4_CHECK(p.tokens >= 0 && p.heads > 0, "apply_rope: bad shape [{}, {}, {}]", p.tokens, p.heads, p.head_dim);
    DSV4_CHECK(p.rope_dim > 0 && p.rope_dim % 2 == 0 && p.rope_dim <= p.head_dim,
               "apply_rope: rope_dim {} must be even and at most head_dim {}", p.rope_dim, p.head_dim);
    DSV4_CHECK(p.token_stride >= p.heads * p.head_dim, "apply_rope: token stride {} is less than heads * head_dim {}",
               p.token_stride, p.heads * p.head_dim);
    DSV4_CHECK(reinterpret_cast<uintptr_t>(p.x) % 2 == 0, "apply_rope: x is not 2-byte aligned");
}

}  // namespace

void apply_rope(const ApplyRopeParams& p, cudaStream_t stream) {
    check(p);
    if (p.tokens) detail::launch_apply_ropes(std::span(&p, 1), rope_path(p), stream);
}

void apply_ropes(std::span<const ApplyRopeParams> ropes, cudaStream_t stream) {
    DSV4_CHECK(!ropes.empty() && ropes.size() <= kMaxRopes, "apply_ropes: {} tensors (1 to {} per launch)",
               ropes.size(), kMaxRopes);
    bool one_path = true, any_tokens = false;
    for (const ApplyRopeParams& p : ropes) {
        check(p);
        one_path = one_path && rope_path(p) == rope_path(ropes.front());
        any_tokens = any_tokens || p.tokens > 0;
    }
    if (!any_tokens) return;
    if (one_path) {
        detail::launch_apply_ropes(ropes, rope_path(ropes.front()), stream);
        return;
    }
    for (const ApplyRopeParams& p : ropes) apply_rope(p, stream);
}

}  // namespace dsv4::cuda
