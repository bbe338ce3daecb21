// Synchronization finer than a CTA barrier, for kernels whose warpgroups run decoupled: named barriers (a subset of
// the CTA's threads, or one group waiting for another's arrival), mbarriers with a thread count (a phase completes
// once that many threads have arrived; waiters test a phase's parity), and the registers a warpgroup hands to the
// others (setmaxnreg). sm_90 only where noted.
#pragma once

#include <cstdint>

namespace dsv4::cuda {

// Named barrier `id` (1-15; 0 is __syncthreads') of `threads` threads (a multiple of 32): sync waits until that many
// have arrived, arrive counts this warp without waiting (one group waits for another's event: the other arrives
// after it).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// named_barrier_sync that also returns whether `pred` held for every one of the `threads` threads (__syncthreads_and
// for a subset of the CTA).
__device__ __forceinline__ bool named_barrier_and(int id, int threads, bool pred) {
    uint32_t all;
    asm volatile(
        "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n barrier.cta.red.and.pred q, %2, %3, p;\n"
        " selp.u32 %0, 1, 0, q;\n}"
        : "=r"(all)
        : "r"(uint32_t(pred)), "r"(id), "r"(threads)
        : "memory");
    return all != 0;
}

// One thread initializes (then mbarrier_inits_visible once, after the last); a CTA barrier must follow before any
// other thread uses the barriers.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, int threads) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(unsigned(__cvta_generic_to_shared(bar))),
                 "r"(threads));
#endif
}
__device__ __forceinline__ void mbarrier_inits_visible() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// This thread's arrival (release: its earlier writes are visible to the threads that wait for the phase).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(unsigned(__cvta_generic_to_shared(bar)))
                 : "memory");
#endif
}
// This thread's arrival, announcing `bytes` more that copies will complete on the barrier (the transaction count):
// the phase completes once every arrival is in and the bytes have landed, in either order.
__device__ __forceinline__ void mbarrier_arm(uint64_t* bar, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned b = unsigned(__cvta_generic_to_shared(bar));
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
#endif
}
// Waits until the phase of parity `parity` has completed (the n-th completion, counting from 0, has parity n & 1;
// a waiter may be at most one phase behind).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned b = unsigned(__cvta_generic_to_shared(bar));
    uint32_t done = 0;
    while (!done)
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
            : "=r"(done)
            : "r"(b), "r"(parity)
            : "memory");
#endif
}

// The warpgroup's registers per thread from here on (sm_90a; every warp of the warpgroup executes it): a producer
// gives registers back so that the consumers can take more than the launch's even share.
template <int kRegisters>
__device__ __forceinline__ void warpgroup_registers_decrease() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
#endif
}
template <int kRegisters>
__device__ __forceinline__ void warpgroup_registers_increase() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
#endif
}

}  // namespace dsv4::cuda
