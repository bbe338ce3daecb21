#!/usr/bin/env bash
# One call on the GPU machine: build (Release, sm_90a) and list the kernels of one batch-1 decode step of
# `dsv4 bench` with their times, as Nsight Compute measures them one at a time (`--clock-control none`, caches
# flushed before each kernel, so every weight comes from DRAM as in a real step). The step is the first timed one of
# `dsv4 bench --profile-range` (a replay of the decode graph; ncu profiles its kernel nodes). Prints the kernels of
# one layer of each kind and a per-kernel-name summary (tools/kernel_table.py). Env: LAYERS (default 4), CONTEXT
# (default 4096), BUILD_DIR (default build-gpu). Carry `.embedded` and `.httplib` as for tools/gpu_perf.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/dsv4_kernel_profile}"
build="${BUILD_DIR:-build-gpu}"
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSV4_CUDA_ARCHS=90a -DDSV4_HTTPLIB_ROOT="$PWD/.httplib" \
    >"$out/configure.log" 2>&1 && cmake --build "$build" -j "$(nproc)" --target dsv4 >"$out/build.log" 2>&1 || {
    tail -30 "$out/build.log"
    exit 1
}
ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv --print-kernel-base function \
    "$build/tools/dsv4/dsv4" bench --layers "${LAYERS:-4}" --context "${CONTEXT:-4096}" --steps 1 --warmup 2 \
    --profile-range >"$out/ncu.csv" 2>"$out/ncu.err"
python3 tools/kernel_table.py "$out/ncu.csv"
