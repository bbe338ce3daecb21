// Programmatic dependent launch (PDL, sm_90): a kernel launched with it may start while the previous kernel of its
// stream is still running, once every CTA of that one has allowed it (kernel_prologue.cuh's
// allow_dependent_launch) or exited; it then waits for that kernel's completion and memory at
// wait_for_prerequisites. What a kernel does before that wait must not depend on its predecessors: it may read only
// what no kernel of the step writes (weights) and write nothing but its registers and shared memory. So a kernel
// launched here first fetches its weights, then waits, then reads its inputs: its weights' first round trips overlap
// the previous kernel's tail and its own launch, which a plain boundary serializes (~2 us each at batch 1,
// docs/perf.md "Kernel boundaries"). Captured into a CUDA graph as a programmatic edge.
//
// On for this thread's launches while a ProgrammaticLaunches scope with `on` lives (CudaOptions::
// programmatic_launch, around a forward's launches); elsewhere launch_kernel is a plain launch. Only kernels that
// call wait_for_prerequisites before their first read of an input may be launched through launch_kernel.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace dsv4::cuda {

// Whether this thread's launch_kernel calls ask for programmatic dependent launch now.
bool programmatic_launches();

class ProgrammaticLaunches {
  public:
    explicit ProgrammaticLaunches(bool on);
    ~ProgrammaticLaunches();
    ProgrammaticLaunches(const ProgrammaticLaunches&) = delete;
    ProgrammaticLaunches& operator=(const ProgrammaticLaunches&) = delete;

  private:
    bool previous_;
};

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialization where
// programmatic_launches() holds.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          Args&&... args) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = &attribute;
    config.numAttrs = programmatic_launches() ? 1 : 0;
    return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace dsv4::cuda
