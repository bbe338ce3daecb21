#!/usr/bin/env bash
# One call on the GPU machine for a same-run A/B: builds this tree (dsv4 and the GPU tests) and, beside it, the
# tree of an older commit (dsv4 only), runs the GPU tests named by TESTS (a gtest filter; empty: none; parameterized
# suites are named Fixtures/Suite.Test/param, so match them as '*Suite*'), then each
# `dsv4 bench` argument list of BENCH_ARGS (separated by ';') on old and new alternately, REPEAT times, and prints
# every run's summary lines last. KERNELS (e.g. "mma"; empty: none) also runs `dsv4_bench_decode_kernels $KERNELS` on
# old and new alternately, REPEAT times, before the benches (its output hashes show whether the bits changed; several
# modes separated by ','). The tests run in SHARDS processes at once (tools/gpu_test_shards.sh), each under
# TEST_TIMEOUT seconds (default 300 here).
# Prepare the old tree on the CPU machine into an ignored folder the call carries:
#   mkdir -p out && git archive <commit> | gzip > out/old.tar.gz
# and carry ["out", ".embedded", ".httplib"] (REUSE_OLD=1: keep the old tree a warm machine already built). Full
# logs go to $OUT (one logs.tar.gz where they are more than 8 files: tools/bundle_logs.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/dsv4_gpu_ab}"
trap "bash '$PWD/tools/bundle_logs.sh' \"\$out\"" EXIT  # at most 8 files come back from $OUT
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DDSV4_CUDA_ARCHS=90a -DDSV4_HTTPLIB_ROOT="$PWD/.httplib")

old=/tmp/dsv4_old
# REUSE_OLD=1: a warm machine's old tree and build from the previous call stay (a second call within the idle time).
if [ -z "${REUSE_OLD:-}" ] || [ ! -x "$old/build-gpu/tools/dsv4/dsv4" ]; then
    rm -rf "$old" && mkdir -p "$old" && tar -xzf out/old.tar.gz -C "$old" && cp -r .embedded "$old/" 2>/dev/null
fi
(cd "$old" && cmake -S . -B build-gpu "${cmake_args[@]}" >"$out/old_configure.log" 2>&1 &&
    cmake --build build-gpu -j 6 --target dsv4 ${KERNELS:+dsv4_bench_decode_kernels} >"$out/old_build.log" 2>&1) &
old_pid=$!
cmake -S . -B build-gpu "${cmake_args[@]}" >"$out/configure.log" 2>&1 &&
    cmake --build build-gpu -j 10 --target dsv4 dsv4_gpu_tests ${KERNELS:+dsv4_bench_decode_kernels} \
        >"$out/build.log" 2>&1 || {
    tail -30 "$out/build.log"
    exit 1
}
if [ -n "${TESTS:-}" ]; then
    TEST_TIMEOUT=${TEST_TIMEOUT:-300} bash tools/gpu_test_shards.sh build-gpu/tests/dsv4_gpu_tests "$out"
    tests_summary=$(cat "$out/tests_summary.txt")
fi
wait $old_pid || {
    tail -30 "$out/old_build.log"
    exit 1
}
if [ -n "${KERNELS:-}" ]; then
    kernels_bin=$(find build-gpu -name dsv4_bench_decode_kernels -type f | head -1)
    for ((r = 1; r <= ${REPEAT:-1}; ++r)); do
        for mode in ${KERNELS//,/ }; do
            for side in old new; do
                bin="$kernels_bin"
                [ "$side" = old ] && bin="$old/$kernels_bin"
                echo "== run $r, $side: dsv4_bench_decode_kernels $mode"
                $bin "$mode" 2>&1 | tee "$out/kernels_${mode}_${side}_${r}.txt" |
                    grep -E "^[a-z0-9_+/ |]+ +[0-9]|BITWISE|bitwise" | head -"${LINES_PER_RUN:-40}"
            done
        done
    done
fi
IFS=';' read -ra benches <<<"${BENCH_ARGS:-}"
for ((r = 1; r <= ${REPEAT:-1}; ++r)); do
    for i in "${!benches[@]}"; do
        for side in old new; do
            bin=build-gpu/tools/dsv4/dsv4
            [ "$side" = old ] && bin="$old/build-gpu/tools/dsv4/dsv4"
            log="$out/bench_${i}_${side}_${r}.txt"
            # shellcheck disable=SC2086
            $bin bench ${benches[$i]} >"$log" 2>&1
            echo "== run $r, $side: dsv4 bench ${benches[$i]}"
            grep -E "^prefill|routed_experts|^decode step \(|x floor|^  +[0-9]+ +[0-9.]+ +[0-9]+ " "$log" | head -"${LINES_PER_RUN:-12}"
        done
    done
done
# Last, so that a long output's tail still says whether the tests passed.
[ -n "${tests_summary:-}" ] && echo "$tests_summary"
exit 0
