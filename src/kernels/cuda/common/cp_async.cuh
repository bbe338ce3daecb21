// Asynchronous global -> shared copies (sm_80+ cp.async), shared by the kernels that stage operands in shared memory:
// a copy is issued, joins the thread's open group at commit, and lands when a wait says so; until then the thread
// may issue more loads or compute. Addresses are shared-window addresses (smem_addr).
#pragma once

#include <cstdint>

namespace dsv4::cuda {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return unsigned(__cvta_generic_to_shared(p));
}
// 16 bytes, L2 only; `src_bytes` < 16 copies that many and zero-fills the rest.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
// 8 and 4 bytes (through L1: cp.async.cg takes 16 only).
__device__ __forceinline__ void cp_async8(unsigned dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async4(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Until at most N of the thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// Until every copy the thread issued has landed, committed or not.
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

}  // namespace dsv4::cuda
