// Host-side contract checks of apply_rope (rope.h); the kernel is in rope.cu.
#include "kernels/cuda/rope/rope.h"

#include "core/error.h"

namespace dsv4::cuda {

RopePath rope_path(const ApplyRopeParams& p) {
    const bool paired = p.head_dim % 2 == 0 && p.token_stride % 2 == 0 && p.rope_dim <= 1024 &&
                        reinterpret_cast<uintptr_t>(p.x) % 4 == 0;
    return paired ? RopePath::kPaired : RopePath::kGeneric;
}

void apply_rope(const ApplyRopeParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.x && p.inv_freq && p.positions, "apply_rope: null pointer");
    DSV4_CHECK(p.tokens >= 0 && p.heads > 0, "apply_rope: bad shape [{}, {}, {}]", p.tokens, p.heads, p.head_dim);
    DSV4_CHECK(p.rope_dim > 0 && p.rope_dim % 2 == 0 && p.rope_dim <= p.head_dim,
               "apply_rope: rope_dim {} must be even and at most head_dim {}", p.rope_dim, p.head_dim);
    DSV4_CHECK(p.token_stride >= p.heads * p.head_dim, "apply_rope: token stride {} is less than heads * head_dim {}",
               p.token_stride, p.heads * p.head_dim);
    DSV4_CHECK(reinterpret_cast<uintptr_t>(p.x) % 2 == 0, "apply_rope: x is not 2-byte aligned");
    if (p.tokens) detail::launch_apply_rope(p, rope_path(p), stream);
}

}  // namespace dsv4::cuda
