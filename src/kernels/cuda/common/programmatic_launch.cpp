#include "kernels/cuda/common/programmatic_launch.h"

namespace dsv4::cuda {
namespace {
thread_local bool programmatic = false;
}  // namespace

bool programmatic_launches() {
    return programmatic;
}

ProgrammaticLaunches::ProgrammaticLaunches(bool on) : previous_(programmatic) {
    programmatic = on;
}

ProgrammaticLaunches::~ProgrammaticLaunches() {
    programmatic = previous_;
}

}  // namespace dsv4::cuda
