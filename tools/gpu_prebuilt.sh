#!/usr/bin/env bash
# Runs on the GPU machine binaries built here, for a call too short to build there (a fresh machine spends minutes
# compiling): `dsv4 bench` argument lists first (BENCH_ARGS, separated by ';', each run in turn REPEAT times: one
# A/B in one process image, e.g. "ARGS;ARGS --some-option"), then the GPU tests named by TESTS (a gtest filter; empty:
# none) in SHARDS processes (default 8) under TEST_TIMEOUT seconds each (default 240). Prepare the binaries here
# (x86-64 like that machine; the libraries it lacks travel with them) into the ignored folder out/ and carry ["out"]:
#   tools/gpu_prebuilt.sh --pack-base BASE_DIR  (optional: another build's dsv4, run before this one in every bench
#                                              while out/dsv4_base.tar.xz exists: delete it for plain runs; with
#                                              PACK_BENCHES, that build's bench/ binaries too, as NAME_base)
#   tools/gpu_prebuilt.sh --pack BUILD_DIR      (BUILD_DIR built with the sm_90a code, the default DSV4_CUDA_ARCHS;
#                                              PACK_BENCHES: bench/ binaries to carry too, run by the call's own command
#                                              from /tmp/dsv4_prebuilt once this script has unpacked them)
# FIRST_TESTS (a gtest filter) runs those GPU tests before anything else, so that a change that breaks its bits says
# so before the benches spend the call's time. KERNEL_TABLE=1 ends the benches with Nsight Compute's kernel table of a
# 4-layer batch-1 decode step (each kernel alone, caches flushed: tools/kernel_table.py) for each binary, base first,
# with KERNEL_TABLE_ARGS appended to that bench (e.g. a flag under test); the launch-order tables come back in $OUT.
# KERNELS (e.g. "single,prefill") runs `dsv4_bench_decode_kernels MODE $KERNEL_ARGS` for each mode first, the base's
# (if packed) and this build's alternately, REPEAT rounds (their output hashes show whether the bits changed);
# KERNEL_ARGS="--chosen-only" leaves out the prefill modes' warp-MMA reference rows (half their time).
# The tests read tests/fixtures/ at the source path they were built in; the call's tree is linked there.
set -uo pipefail
cd "$(dirname "$0")/.."
# xz's best preset finds the code two builds share across the archive (its window spans the binaries): two builds'
# packs 36 MB at the default preset, 17 MB at this one, where the tree and the carried folder may take 64 MiB together.
export XZ_OPT="${XZ_OPT:--9e -T0}"
if [ "${1:-}" = "--pack-base" ]; then
    # The dsv4 of another build (e.g. the parent commit's, in a worktree) as the A/B's base: out/dsv4_base.xz.
    base="${2:?usage: gpu_prebuilt.sh --pack-base BUILD_DIR}"
    mkdir -p out && strip -o /tmp/dsv4_base_pack "$base/tools/dsv4/dsv4" || exit 1
    git -C "$base/.." rev-parse --short HEAD >/tmp/dsv4_base_commit 2>/dev/null || echo "?" >/tmp/dsv4_base_commit
    extra=()
    for b in ${PACK_BENCHES:-}; do strip -o "/tmp/${b}_base" "$base/bench/$b" && extra+=("${b}_base") || exit 1; done
    tar -cJf out/dsv4_base.tar.xz -C /tmp dsv4_base_pack dsv4_base_commit "${extra[@]}" &&
        rm -f /tmp/dsv4_base_pack "${extra[@]/#//tmp/}"
    ls -la out/dsv4_base.tar.xz && exit 0
fi
if [ "${1:-}" = "--pack" ]; then
    build="${2:?usage: gpu_prebuilt.sh --pack BUILD_DIR}"
    stage=$(mktemp -d) && mkdir -p "$stage/lib" out
    strip -o "$stage/dsv4" "$build/tools/dsv4/dsv4" && strip -o "$stage/dsv4_gpu_tests" "$build/tests/dsv4_gpu_tests" || exit 1
    for b in ${PACK_BENCHES:-}; do strip -o "$stage/$b" "$build/bench/$b" || exit 1; done  # e.g. dsv4_bench_gemm
    # What that machine's image lacks (no cpp-httplib; fmt of another version): the libraries these resolve to here.
    for lib in libfmt.so libcpp-httplib.so libcupti.so; do  # CUPTI: dsv4 bench --timeline
        path=$(ldd "$stage/dsv4" | awk -v l="$lib" 'index($1, l) == 1 {print $3}')
        [ -n "$path" ] && cp -L "$path" "$stage/lib/$(basename "$path")"
    done
    grep -o 'DSV4_SOURCE_DIR=[^ ]*' "$build/build.ninja" | head -1 | sed 's/^DSV4_SOURCE_DIR=\\"\(.*\)\\"$/\1/; s/^DSV4_SOURCE_DIR="\(.*\)"$/\1/' >"$stage/source_dir"
    # The multi-process tests start dsv4 from the build directory they were compiled for (DSV4_BINARY_DIR).
    grep -o 'DSV4_BINARY_DIR=[^ ]*' "$build/build.ninja" | head -1 | sed 's/^DSV4_BINARY_DIR=\\"\(.*\)\\"$/\1/; s/^DSV4_BINARY_DIR="\(.*\)"$/\1/' >"$stage/binary_dir"
    git rev-parse --short HEAD >"$stage/commit"
    git diff --quiet HEAD || echo "+ uncommitted changes" >>"$stage/commit"
    tar -cJf out/prebuilt.tar.xz -C "$stage" . && rm -rf "$stage"
    ls -la out/prebuilt.tar.xz && exit 0
fi

out="${OUT:-/tmp/dsv4_gpu_prebuilt}"
trap "bash '$PWD/tools/bundle_logs.sh' \"\$out\"" EXIT  # at most 8 files come back from $OUT
mkdir -p "$out"
bin=/tmp/dsv4_prebuilt
rm -rf "$bin" && mkdir -p "$bin" && tar -xJf out/prebuilt.tar.xz -C "$bin" || exit 1
src=$(cat "$bin/source_dir")
if [ -n "$src" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"; fi
bdir=$(cat "$bin/binary_dir" 2>/dev/null)
if [ -n "$bdir" ] && [ ! -e "$bdir/tools/dsv4/dsv4" ]; then mkdir -p "$bdir/tools/dsv4" && ln -s "$bin/dsv4" "$bdir/tools/dsv4/dsv4"; fi
export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "binaries of $(tr '\n' ' ' <"$bin/commit"); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"

# With out/dsv4_base.tar.xz (--pack-base), each bench runs with the base binary first, then with this build's: an
# A/B in one call, alternating, REPEAT rounds.
binaries=("$bin/dsv4")
if [ -f out/dsv4_base.tar.xz ]; then
    tar -xJf out/dsv4_base.tar.xz -C "$bin" && binaries=("$bin/dsv4_base_pack" "$bin/dsv4")
    echo "base binary of $(cat "$bin/dsv4_base_commit") runs first in each pair"
fi
if [ -n "${FIRST_TESTS:-}" ]; then
    timeout "${TEST_TIMEOUT:-240}" "$bin/dsv4_gpu_tests" --gtest_filter="$FIRST_TESTS" >"$out/first_tests.log" 2>&1
    echo "first tests ($FIRST_TESTS): rc $?"
    grep -E "^\[  (FAILED|PASSED) |Failure" "$out/first_tests.log" | head -12
fi
kernel_modes="${KERNELS:-}"
for ((r = 1; r <= ${REPEAT:-1}; ++r)); do
    for mode in ${kernel_modes//,/ }; do
        for k in "$bin/dsv4_bench_decode_kernels_base" "$bin/dsv4_bench_decode_kernels"; do
            [ -x "$k" ] || continue
            name=$([ "$k" = "$bin/dsv4_bench_decode_kernels" ] && echo "dsv4" || echo "base")
            echo "== run $r, $name: dsv4_bench_decode_kernels $mode"
            # shellcheck disable=SC2086
            "$k" "$mode" ${KERNEL_ARGS:-} 2>&1 | tee "$out/kernels_${mode}_${name}_${r}.txt" |
                grep -E "^[a-z0-9_+/ |]+ +[0-9]|BITWISE|bitwise" | head -"${LINES_PER_RUN:-40}"
        done
    done
done
IFS=';' read -ra benches <<<"${BENCH_ARGS:-}"
for ((r = 1; r <= ${REPEAT:-1}; ++r)); do
    for i in "${!benches[@]}"; do
        for b in "${binaries[@]}"; do
            name=$([ "$b" = "$bin/dsv4" ] && echo "dsv4" || echo "base")
            log="$out/bench_${i}_${r}_${name}.txt"
            # shellcheck disable=SC2086
            "$b" bench ${benches[$i]} >"$log" 2>&1
            echo "== run $r, $name: dsv4 bench ${benches[$i]} (rc $?)"
            grep -E "^prefill|routed_experts|q_proj|o_proj|sparse_attn|^decode step \(|x floor|^  +[0-9]+ +[0-9.]+ +[0-9]+ |rror" \
                "$log" | head -"${LINES_PER_RUN:-12}"
        done
    done
done
if [ "${KERNEL_TABLE:-0}" = 1 ]; then
    for b in "${binaries[@]}"; do
        name=$([ "$b" = "$bin/dsv4" ] && echo "dsv4" || echo "base")
        # shellcheck disable=SC2086
        timeout 120 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
            --print-kernel-base function "$b" bench --layers 4 --context 4096 --steps 1 --warmup 2 --profile-range \
            ${KERNEL_TABLE_ARGS:-} >"$out/kernels_$name.csv" 2>"$out/kernels_$name.err"
        echo "== kernel table, $name"
        python3 tools/kernel_table.py "$out/kernels_$name.csv" >"$out/kernels_$name.txt" 2>&1
        head -"${LINES_PER_RUN:-12}" "$out/kernels_$name.txt"
    done
fi
[ -n "${TESTS:-}" ] && bash tools/gpu_test_shards.sh "$bin/dsv4_gpu_tests" "$out"
exit 0
