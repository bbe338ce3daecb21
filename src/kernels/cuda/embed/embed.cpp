// Host-side contract checks of embed (embed.h); the kernel is in embed.cu.
#include "kernels/cuda/embed/embed.h"

#include "core/error.h"

namespace dsv4::cuda {

void embed(const EmbedParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.ids && p.table && p.streams, "embed: null pointer");
    DSV4_CHECK(p.tokens >= 0 && p.vocab > 0 && p.dim > 0 && p.n_hc > 0,
               "embed: bad shape tokens {} vocab {} dim {} n_hc {}", p.tokens, p.vocab, p.dim, p.n_hc);
    if (p.tokens) detail::launch_embed(p, stream);
}

}  // namespace dsv4::cuda
