#!/usr/bin/env bash
# Configures and builds dsv4 (CUDA included) into build/ (or $DSV4_BUILD_DIR). Extra arguments go to CMake.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
build_dir="${DSV4_BUILD_DIR:-build}"
cuda_flag=()
if ! command -v nvcc >/dev/null 2>&1; then
    echo "build: no nvcc found: the CUDA backend is NOT built (install the CUDA toolkit to build it)" >&2
    cuda_flag=(-DDSV4_CUDA=OFF)
fi
cmake -S . -B "$build_dir" -G Ninja "${cuda_flag[@]}" "$@" >/dev/null
cmake --build "$build_dir" -j "${DSV4_JOBS:-$(nproc)}"
