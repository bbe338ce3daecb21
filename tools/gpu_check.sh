#!/usr/bin/env bash
# One call on the GPU machine: configure and build everything with CUDA, run every test (GPU tests included),
# and print a short table last. The GPU machine has no network: it does not run scripts/setup.sh; carry
# `.embedded/tokenizer.json` (the installed tokenizer) with the call. The fixtures are in the tree
# (tests/fixtures/) and travel with it. Extra arguments go to CMake; CTEST_ARGS (e.g. "-E server_e2e": that
# machine has no `openai` package) to ctest. Logs go to $OUT when set.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/dsv4_gpu_check}"
trap "bash '$PWD/tools/bundle_logs.sh' \"\$out\"" EXIT  # at most 8 files come back from $OUT
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/device.txt"
start=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >"$out/configure.log" 2>&1 &&
    cmake --build build-gpu -j "$(nproc)" >"$out/build.log" 2>&1
build_rc=$?
build_s=$(($(date +%s) - start))
tail -5 "$out/build.log"

start=$(date +%s)
ctest --test-dir build-gpu -j 8 --output-on-failure ${CTEST_ARGS:-} --output-junit "$out/ctest-junit.xml" >"$out/ctest.log" 2>&1
test_rc=$?
test_s=$(($(date +%s) - start))
grep -E "tests passed|tests failed|Skipped|Failed|\(Failed\)" "$out/ctest.log" | tail -15

printf '\n%-24s %s\n' "check" "result"
printf '%-24s %s\n' "device" "$(cat "$out/device.txt")"
printf '%-24s %s (%ss)\n' "build (CUDA sm_90a)" "$([ $build_rc -eq 0 ] && echo ok || echo FAILED)" "$build_s"
printf '%-24s %s (%ss)\n' "tests" "$([ $test_rc -eq 0 ] && echo ok || echo FAILED): $(grep -E 'tests passed' "$out/ctest.log" | tail -1)" "$test_s"
printf '%-24s %s\n' "skipped" "$(python3 scripts/skip_summary.py "$out/ctest-junit.xml")"
exit $((build_rc | test_rc))
