#!/usr/bin/env bash
# One call on the GPU machine: build (Release, sm_90a) one bench target and run Nsight Compute's sections on chosen
# launches of one kernel in it, to see what bounds that kernel (bandwidth, stalls, occupancy). Env: TARGET (default
# dsv4_bench_decode_kernels), ARGS (its arguments), KERNEL (a regex of the kernel's name), SKIPS (launches of that
# kernel to skip before each profiled one, space-separated; default 0), SECTIONS (default: speed of light, memory,
# warp states, schedulers, occupancy, launch), NCU_EXTRA (more ncu options, e.g. "--print-details all"). Carry `.httplib` as for tools/gpu_perf.sh. Full reports go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/dsv4_ncu}"
build="${BUILD_DIR:-build-gpu}"
target="${TARGET:-dsv4_bench_decode_kernels}"
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSV4_CUDA_ARCHS=90a -DDSV4_HTTPLIB_ROOT="$PWD/.httplib" \
    >"$out/configure.log" 2>&1 && cmake --build "$build" -j "$(nproc)" --target "$target" >"$out/build.log" 2>&1 || {
    tail -30 "$out/build.log"
    exit 1
}
bin=$(find "$build" -name "$target" -type f | head -1)
sections=()
for s in ${SECTIONS:-SpeedOfLight MemoryWorkloadAnalysis WarpStateStats SchedulerStats Occupancy LaunchStats}; do
    sections+=(--section "$s")
done
for skip in ${SKIPS:-0}; do
    echo "== $target ${ARGS:-}: kernel ~ ${KERNEL:?}, launch $skip"
    # shellcheck disable=SC2086
    ncu --clock-control none -k "regex:$KERNEL" --launch-skip "$skip" --launch-count 1 "${sections[@]}" ${NCU_EXTRA:-} \
        "$bin" ${ARGS:-} >"$out/ncu_$skip.txt" 2>&1
    grep -vE '^==PROF==|^ +-+ +-+|^\s*$' "$out/ncu_$skip.txt" | grep -vE '^[a-z0-9+/ ]+ +[0-9]+ ' | head -"${LINES_PER_RUN:-120}"
done
