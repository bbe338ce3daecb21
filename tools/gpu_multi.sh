#!/usr/bin/env bash
# One call on a machine of two or more GPUs (issues 12 and 10): build (Release, sm_90a), show how the GPUs are joined,
# run the tests of the multi-GPU path (TESTS, a ctest regex; "all" for every test but the server end-to-end
# groups; empty: none; the tests give every GPU of the machine a rank), then `dsv4 bench --gpus $GPUS` (default:
# every GPU, 0,1,...) with each of BENCH_ARGS (';'-separated argument lists, newlines
# count as spaces; default: 4 and 12 layers, batches 1-256, stage tables), each bench stopped after BENCH_TIMEOUT
# seconds (default 400) and the tests after 180 s each, so that one hang cannot spend the whole call.
# Carry `.embedded` and `.httplib` (tools/carry_httplib.sh). Full outputs go to $OUT; a summary is printed last.
# NCCL reports its set-up (NCCL_DEBUG_SUBSYS=INIT) into files of its own (its log goes to stdout otherwise, where
# rank 0's output is compared): the transport it chose between the GPUs is in the summary.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/dsv4_gpu_multi}"
trap "bash '$PWD/tools/bundle_logs.sh' \"\$out\"" EXIT  # at most 8 files come back from $OUT
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
nccl_logs=/tmp/dsv4_nccl_logs
rm -rf "$nccl_logs" && mkdir -p "$nccl_logs"
export NCCL_DEBUG="${NCCL_DEBUG:-INFO}" NCCL_DEBUG_SUBSYS="${NCCL_DEBUG_SUBSYS:-INIT}"
export NCCL_DEBUG_FILE="$nccl_logs/nccl.%h.%p.log"
nccl_transport() {  # the transports NCCL chose from rank 0 to rank 1, in the logs written since the last call
    cat "$nccl_logs"/nccl.* 2>/dev/null | grep -hoE "Channel 00/[0-9]+ : 0\[[^]]*\] -> 1\[[^]]*\] via [A-Za-z0-9/]+" |
        sort | uniq -c | head -4
    rm -f "$nccl_logs"/nccl.*
}
nvidia-smi --query-gpu=index,name,memory.total,clocks.sm,clocks.mem --format=csv,noheader >"$out/device.txt"
nvidia-smi topo -m >>"$out/device.txt" 2>&1
start=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSV4_CUDA_ARCHS=90a -DDSV4_HTTPLIB_ROOT="$PWD/.httplib" \
    >"$out/configure.log" 2>&1 && cmake --build build-gpu -j "$(nproc)" >"$out/build.log" 2>&1 || {
    tail -30 "$out/build.log"
    exit 1
}
echo "build: $(($(date +%s) - start)) s"
tests="${TESTS-EveryGpu|MultiProcess|ExpertParallel|CudaBatch}"
start=$(date +%s)
if [ "$tests" = all ]; then
    ctest --test-dir build-gpu -j 8 -E server_e2e --timeout 180 -V >"$out/ctest.log" 2>&1
elif [ -n "$tests" ]; then
    ctest --test-dir build-gpu -j 4 -R "$tests" --timeout 180 -V >"$out/ctest.log" 2>&1
fi
if [ -n "$tests" ]; then
    echo "tests ($tests): $(($(date +%s) - start)) s: $(grep -E 'tests passed' "$out/ctest.log" | tail -1)"
    grep -E "\((Failed|Timeout|SEGFAULT|Subprocess aborted)\)|\*\*\*Skipped|Not Run" "$out/ctest.log" | head -20
    grep -hE "\[ bitwise  \].*(GPUs|ranks)|killed|was stopped|rank [0-9] failed" "$out/ctest.log" | head -12
    nccl_transport
fi
# BENCH_ARGS: one or more `dsv4 bench --gpus $GPUS` argument lists separated by ';' (empty: no bench).
gpus="${GPUS:-$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd,)}"
bench_args="${BENCH_ARGS---layers 4,12 --batch 1,16,64,256 --stages}"
IFS=';' read -ra benches <<<"${bench_args//$'\n'/ }"
for i in "${!benches[@]}"; do
    args="${benches[$i]}"
    [ -z "${args// /}" ] && continue
    start=$(date +%s)
    timeout -k 20 "${BENCH_TIMEOUT:-400}" build-gpu/tools/dsv4/dsv4 bench --gpus "$gpus" $args >"$out/bench$i.txt" 2>&1
    echo "bench $i (--gpus $gpus $args): rc $? in $(($(date +%s) - start)) s"
    nccl_transport
    grep -E "^dsv4 bench|weights generated|uploaded|^prefill|^decode step|^floor|communication" "$out/bench$i.txt" | head -12
    grep -A6 "^  batch    step ms" "$out/bench$i.txt" | head -6
    grep -A8 "^per added layer" "$out/bench$i.txt" | head -8
    tail -2 "$out/bench$i.txt"
done
head -3 "$out/device.txt"
