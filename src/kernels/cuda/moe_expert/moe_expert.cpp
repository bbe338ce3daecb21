// Host-side contract of the MoE glue launchers (see moe_expert.h); kernels in moe_expert.cu.
#include "kernels/cuda/moe_expert/moe_expert.h"

#include "core/error.h"

namespace dsv4::cuda {

void swiglu(const SwigluParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.rows >= 0 && p.inter > 0, "swiglu: rows {} inter {}", p.rows, p.inter);
    DSV4_CHECK(p.gate_up_stride == 0 || p.gate_up_stride >= p.inter, "swiglu: gate/up row stride {} below inter {}",
               p.gate_up_stride, p.inter);
    if (p.rows == 0) return;
    DSV4_CHECK(p.gate && p.up && p.out, "swiglu: null pointer");
    DSV4_CHECK((p.routing_weights == nullptr) == (p.sorted_assignment == nullptr),
               "swiglu: routing weights and sorted assignments come together");
    DSV4_CHECK(!p.q == !p.q_scales, "swiglu: a quantized output needs both its codes and its scales");
    DSV4_CHECK(!p.zero_rows || p.zero_cols > 0, "swiglu: zero_rows without a width");
    detail::launch_swiglu(p, stream);
}

void check_moe_combine(const char* op, const MoeCombineParams& p) {
    DSV4_CHECK(p.tokens >= 0 && p.dim > 0 && p.k > 0 && p.k <= kMaxCombineK, "{}: tokens {} dim {} k {}", op, p.tokens,
               p.dim, p.k);
    DSV4_CHECK(p.tokens == 0 || (p.routed && p.experts && p.assignment_slot && p.shared && p.out), "{}: null pointer",
               op);
}

void moe_combine(const MoeCombineParams& p, cudaStream_t stream) {
    check_moe_combine("moe_combine", p);
    if (p.tokens) detail::launch_moe_combine(p, stream);
}

void dense_expert_gemm(const DenseExpertGemmParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.experts > 0 && p.n > 0 && p.k > 0 && p.max_slots >= 0, "dense_expert_gemm: experts {} n {} k {}",
               p.experts, p.n, p.k);
    DSV4_CHECK(p.max_slots <= 65535 * 64, "dense_expert_gemm: {} slots for one launch", p.max_slots);
    if (p.max_slots == 0) return;
    DSV4_CHECK(p.x && p.expert_offsets && p.w && p.y, "dense_expert_gemm: null pointer");
    detail::launch_dense_expert_gemm(p, stream);
}

}  // namespace dsv4::cuda
