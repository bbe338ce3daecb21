// Host-side contract checks of the mHC launchers (mhc.h); the kernels are in mhc.cu (the mixes), mhc_sinkhorn.cu and
// mhc_post.cu.
#include "kernels/cuda/mhc/mhc.h"

#include "core/error.h"

namespace dsv4::cuda {
namespace {

void check_mix(const char* op, const HcMixParams& p) {
    DSV4_CHECK(p.streams && p.fn && p.base && p.scale && p.x_out && p.mix, "{}: null pointer", op);
    DSV4_CHECK(p.n_hc >= 1 && p.n_hc <= kMaxHcMult, "{}: n_hc {} outside [1, {}]", op, p.n_hc, kMaxHcMult);
    DSV4_CHECK(p.tokens >= 0 && p.dim > 0, "{}: bad shape tokens {} dim {}", op, p.tokens, p.dim);
}

}  // namespace

void hc_pre(const HcMixParams& p, cudaStream_t stream) {
    check_mix("hc_pre", p);
    // 0 computes as 1, as in both references: the first column normalization always runs.
    DSV4_CHECK(p.sinkhorn_iters >= 0, "hc_pre: sinkhorn_iters {} must be >= 0", p.sinkhorn_iters);
    if (p.tokens) detail::launch_hc_mix(p, false, stream);
}

void hc_pre_norm(const HcMixParams& p, const RmsNormParams& norm, cudaStream_t stream) {
    check_mix("hc_pre_norm", p);
    DSV4_CHECK(p.sinkhorn_iters >= 0, "hc_pre_norm: sinkhorn_iters {} must be >= 0", p.sinkhorn_iters);
    DSV4_CHECK(norm.x == p.x_out && norm.y == p.x_out, "hc_pre_norm: the norm must be of hc_pre's x, in place");
    DSV4_CHECK(norm.rows == p.tokens && norm.dim == p.dim && norm.x_stride == p.dim && norm.y_stride == p.dim,
               "hc_pre_norm: the norm's shape [{}, {}] (strides {}, {}) is not x's [{}, {}]", norm.rows, norm.dim,
               norm.x_stride, norm.y_stride, p.tokens, p.dim);
    DSV4_CHECK(!norm.q == !norm.q_scales, "hc_pre_norm: quantized output needs both its codes and its scales");
    if (p.tokens) detail::launch_hc_mix(p, false, stream, detail::HcMixPath::kAuto, &norm);
}

void hc_sinkhorn(const HcMixParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.mix, "hc_sinkhorn: null mix");
    DSV4_CHECK(p.n_hc >= 1 && p.n_hc <= kMaxHcMult, "hc_sinkhorn: n_hc {} outside [1, {}]", p.n_hc, kMaxHcMult);
    DSV4_CHECK(p.tokens >= 0, "hc_sinkhorn: bad token count {}", p.tokens);
    if (p.tokens) detail::launch_hc_sinkhorn(p, stream);
}

void hc_head(const HcMixParams& p, cudaStream_t stream) {
    check_mix("hc_head", p);
    if (p.tokens) detail::launch_hc_mix(p, true, stream);
}

namespace {
void check_post(const char* op, const HcPostParams& p) {
    DSV4_CHECK(p.streams && p.mix && p.out, "{}: null pointer", op);
    DSV4_CHECK(p.n_hc >= 1 && p.n_hc <= kMaxHcMult, "{}: n_hc {} outside [1, {}]", op, p.n_hc, kMaxHcMult);
    DSV4_CHECK(p.tokens >= 0 && p.dim > 0, "{}: bad shape tokens {} dim {}", op, p.tokens, p.dim);
    DSV4_CHECK(static_cast<const void*>(p.out) != static_cast<const void*>(p.streams), "{}: out may not alias streams",
               op);
}
}  // namespace

void hc_post(const HcPostParams& p, cudaStream_t stream) {
    check_post("hc_post", p);
    DSV4_CHECK(p.f, "hc_post: null f");
    if (p.tokens) detail::launch_hc_post(p, stream);
}

void hc_post_of_moe(const HcPostParams& p, const MoeCombineParams& combine, cudaStream_t stream) {
    check_post("hc_post_of_moe", p);
    DSV4_CHECK(combine.tokens == p.tokens && combine.dim == p.dim,
               "hc_post_of_moe: the combine's shape [{}, {}] is not the post's [{}, {}]", combine.tokens, combine.dim,
               p.tokens, p.dim);
    check_moe_combine("hc_post_of_moe", combine);
    if (!detail::hc_specialised(p.n_hc)) {
        moe_combine(combine, stream);
        HcPostParams post = p;
        post.f = combine.out;
        hc_post(post, stream);
        return;
    }
    if (p.tokens) detail::launch_hc_post_of_moe(p, combine, stream);
}

}  // namespace dsv4::cuda
