#!/usr/bin/env bash
# One call on a machine of two or more GPUs (issue 12): build (Release, sm_90a), show how the GPUs are joined,
# run the tests of the multi-GPU path (TESTS, a ctest regex; "all" for every test but the server end-to-end
# groups), then `dsv4 bench --gpus 0,1` with each of BENCH_ARGS (';'-separated argument lists; default: 4 and 12
# layers, batches 1-256, stage tables).
# Carry `.embedded` and `.httplib` (tools/carry_httplib.sh). Full outputs go to $OUT; a summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/dsv4_gpu_multi}"
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
nvidia-smi --query-gpu=index,name,memory.total,clocks.sm,clocks.mem --format=csv,noheader >"$out/device.txt"
nvidia-smi topo -m >>"$out/device.txt" 2>&1
start=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSV4_CUDA_ARCHS=90a -DDSV4_HTTPLIB_ROOT="$PWD/.httplib" \
    >"$out/configure.log" 2>&1 && cmake --build build-gpu -j "$(nproc)" >"$out/build.log" 2>&1 || {
    tail -30 "$out/build.log"
    exit 1
}
echo "build: $(($(date +%s) - start)) s"
tests="${TESTS:-TwoGpus|MultiProcess|ExpertParallel|CudaBatch}"
start=$(date +%s)
if [ "$tests" = all ]; then
    ctest --test-dir build-gpu -j 8 -E server_e2e --output-on-failure >"$out/ctest.log" 2>&1
elif [ -n "$tests" ]; then
    ctest --test-dir build-gpu -j 4 -R "$tests" --output-on-failure >"$out/ctest.log" 2>&1
fi
echo "tests ($tests): $(($(date +%s) - start)) s: $(grep -E 'tests passed' "$out/ctest.log" | tail -1)"
grep -E "\(Failed\)|\(Timeout\)|\(SEGFAULT\)" "$out/ctest.log" | head -20
grep -hE "^\[ bitwise  \].*(GPUs|ranks)|killed|was stopped" "$out/ctest.log" | head -12
# BENCH_ARGS: one or more `dsv4 bench --gpus 0,1` argument lists separated by ';' (empty: no bench).
IFS=';' read -ra benches <<<"${BENCH_ARGS---layers 4,12 --batch 1,16,64,256 --stages}"
for i in "${!benches[@]}"; do
    args="${benches[$i]}"
    [ -z "${args// /}" ] && continue
    start=$(date +%s)
    build-gpu/tools/dsv4/dsv4 bench --gpus 0,1 $args >"$out/bench$i.txt" 2>&1
    echo "bench $i ($args): rc $? in $(($(date +%s) - start)) s"
    grep -E "^dsv4 bench|weights generated|uploaded|^prefill|^decode step|^floor|communication" "$out/bench$i.txt" | head -12
    grep -A6 "^  batch    step ms" "$out/bench$i.txt" | head -6
    grep -A8 "^per added layer" "$out/bench$i.txt" | head -8
    tail -2 "$out/bench$i.txt"
done
head -3 "$out/device.txt"
