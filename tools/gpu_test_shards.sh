#!/usr/bin/env bash
# Runs the GPU tests named by TESTS (a gtest filter) on the GPU machine in SHARDS processes at once (gtest's sharding;
# default 8), each under TEST_TIMEOUT seconds (default 240): their CPU references are single-threaded, so one process
# ran the GPU suite in well over 7 minutes, most of it in a few MoeGemm cases. Usage: gpu_test_shards.sh TEST_BINARY
# OUT_DIR. Leaves OUT_DIR/tests.log (every shard's log) and OUT_DIR/tests_summary.txt; prints the failures, then the
# summary line. Used by gpu_ab.sh and gpu_prebuilt.sh.
set -uo pipefail
binary="${1:?usage: gpu_test_shards.sh TEST_BINARY OUT_DIR}"
out="${2:?usage: gpu_test_shards.sh TEST_BINARY OUT_DIR}"
shards=${SHARDS:-8}
pids=()
for ((i = 0; i < shards; ++i)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "${TEST_TIMEOUT:-240}" "$binary" \
        --gtest_filter="$TESTS" >"$out/tests_$i.log" 2>&1 &
    pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
cat "$out"/tests_*.log >"$out/tests.log" && rm -f "$out"/tests_*.log
grep -E "^\[  FAILED|Failure" "$out/tests.log" | head -20
count() { grep -hE "^\[  $1 *\] [0-9]+ tests?" "$out/tests.log" | awk '{s += $4} END {print s + 0}'; }
echo "tests ($TESTS, $shards shards): rc $rc, $(count PASSED) passed, $(count FAILED) failed, $(count SKIPPED) skipped" |
    tee "$out/tests_summary.txt"
