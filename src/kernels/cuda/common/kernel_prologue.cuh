// The device side of programmatic dependent launch (programmatic_launch.h). Both are no-ops for a kernel launched
// plainly (no prerequisite grid to wait for, no dependent asking) and below sm_90.
#pragma once

namespace dsv4::cuda {

// Blocks until every prerequisite grid has completed and its memory is visible; the first read of an input written
// by an earlier kernel (and the first global write) must come after it.
__device__ __forceinline__ void wait_for_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next kernel of the stream, if launched programmatically, start on free SMs now (it still waits for this
// one to finish before reading what it wrote). Called first thing by the kernels that precede a weight-fetching one.
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" :::);
#endif
}

}  // namespace dsv4::cuda
