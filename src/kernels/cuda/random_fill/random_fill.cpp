// Host-side contract checks of random_table_fill (random_fill.h); the kernel is in random_fill.cu.
#include "kernels/cuda/random_fill/random_fill.h"

#include "core/error.h"

namespace dsv4::cuda {

void random_table_fill(const RandomTableFillParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.count >= 0, "random_table_fill: count {} is negative", p.count);
    if (p.count == 0) return;
    DSV4_CHECK(p.table && p.out, "random_table_fill: null pointer");
    detail::launch_random_table_fill(p, stream);
}

}  // namespace dsv4::cuda
