// Hopper's tensor-memory accelerator (cp.async.bulk.tensor, sm_90) into shared memory, completing on an mbarrier: one
// instruction copies a 2D box of rows out of a row-major matrix described by a tensor map (common/tensor_map.h), and
// the barrier's phase completes once the bytes announced with it have landed. For rings of stages: each slot has a
// barrier that one thread arms (the bytes to expect) as it issues the slot's copy, and the threads that consume the
// slot wait on its parity.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "kernels/cuda/common/cta_sync.cuh"

namespace dsv4::cuda {

// One thread: every barrier of a ring of kSlots, for one arrival (the arming thread's) a phase.
template <int kSlots>
__device__ __forceinline__ void init_stage_barriers(uint64_t* bars) {
    for (int i = 0; i < kSlots; ++i) mbarrier_init(bars + i, 1);
    mbarrier_inits_visible();
}

// One thread: arms `bar` for `bytes` (the box's) and copies the box at element (x, y) of the tensor `map` describes
// (a kernel parameter declared __grid_constant__, or in global memory) to shared `dst` (a shared-window address),
// landing as the map's swizzle places it. The slot was last read through ordinary loads, which a CTA barrier ordered
// before this call; the proxy fence orders them before the copy engine's writes.
__device__ __forceinline__ void tensor_copy_to_stage(unsigned dst, const CUtensorMap* map, int x, int y, int bytes,
                                                     uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned b = unsigned(__cvta_generic_to_shared(bar));
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        ::"r"(dst), "l"(map), "r"(x), "r"(y), "r"(b)
        : "memory");
#endif
}

// Waits for slot `slot`'s next phase; `parity` holds each slot's next phase bit (bit slot), flipped here.
__device__ __forceinline__ void wait_stage_barrier(uint64_t* bar, uint32_t& parity, int slot) {
    mbarrier_wait(bar, (parity >> slot) & 1u);
    parity ^= 1u << slot;
}

}  // namespace dsv4::cuda
