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
    mbarrier_arm(bar, bytes);
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        ::"r"(dst), "l"(map), "r"(x), "r"(y), "r"(b)
        : "memory");
#endif
}

// Bulk copies between the shared memories of a cluster's CTAs (sm_90): a CTA pushes a block of its shared memory into
// another's, completing on the receiver's mbarrier, which its own thread armed for the bytes of all the pushes it
// expects (mbarrier_arm; a push may land before the arming: the transaction count goes negative until then). The
// receiver's barrier must be initialized and made visible (mbarrier_inits_visible, then a cluster barrier) before any
// push names it. The pushing thread keeps its CTA alive until its pushes have read their source
// (bulk_copies_read_done).

// `p` (this CTA's shared memory) as the same offset in the shared memory of the cluster's CTA `rank`.
__device__ __forceinline__ unsigned cluster_shared_address(const void* p, int rank) {
    unsigned out = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                 : "=r"(out)
                 : "r"(unsigned(__cvta_generic_to_shared(p))), "r"(rank));
#endif
    return out;
}
// Every thread that wrote shared memory a push will read, before the CTA barrier that precedes the push: orders its
// writes before the copy engine's reads.
__device__ __forceinline__ void shared_writes_before_bulk_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from this CTA's `src` to `dst` of another CTA (a
// cluster_shared_address), completing on that CTA's barrier `bar` (likewise).
__device__ __forceinline__ void bulk_copy_to_cluster_shared(unsigned dst, const void* src, int bytes, unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
        "r"(unsigned(__cvta_generic_to_shared(src))), "r"(bytes), "r"(bar)
        : "memory");
#endif
}
// The thread's bulk copies issued so far as one group; then, before the CTA may exit, wait until they have read their
// sources.
__device__ __forceinline__ void bulk_copies_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#endif
}
__device__ __forceinline__ void bulk_copies_read_done() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
#endif
}

// One 4-byte word from a register into another CTA's shared memory `dst` (a cluster_shared_address), completing on
// that CTA's barrier `bar` (likewise) as 4 bytes of its transaction count: the pushes above for values a thread holds.
// The receiver waits on its barrier instead of a cluster barrier; the sender need not wait for anything.
__device__ __forceinline__ void store_to_cluster_shared(unsigned dst, uint32_t value, unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(dst), "r"(value),
                 "r"(bar)
                 : "memory");
#endif
}

// Waits for slot `slot`'s next phase; `parity` holds each slot's next phase bit (bit slot), flipped here.
__device__ __forceinline__ void wait_stage_barrier(uint64_t* bar, uint32_t& parity, int slot) {
    mbarrier_wait(bar, (parity >> slot) & 1u);
    parity ^= 1u << slot;
}

}  // namespace dsv4::cuda
