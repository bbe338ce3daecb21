#!/usr/bin/env bash
# compute-sanitizer (memcheck and racecheck) over whole GPU forward passes. `forward`: prefill of the first 40 ids
# of two quantized fixtures, then 3 decode steps (graph replays), through `dsv4 generate --backend cuda`.
# `batched`: the batched forward through its GPU tests: memcheck over 16 sequences prefilled and decoded together
# and the paged pool's interleaved growth; racecheck over the 4-sequence case (one prompt across two pieces,
# decode graphs at B = 4 and 3, the paged pool) on two fixtures, since racecheck did not finish the 16-sequence
# case in 150 s. Usage: tools/gpu_sanitize.sh [forward] [batched] (both when none is named). Run on the GPU
# machine (`forward` needs python3 with safetensors to read the fixture's ids); logs go to $OUT when set. One
# line per run: its exit status, its seconds and the sanitizer's summary line.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/dsv4_sanitize}"
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(forward batched)
wants() { [[ " ${sections[*]} " == *" $1 "* ]]; }
targets=()
wants forward && targets+=(dsv4)
wants batched && targets+=(dsv4_gpu_tests)
cmake -S . -B build-san -G Ninja -DDSV4_CUDA_ARCHS=90a -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
    cmake --build build-san -j "$(nproc)" --target "${targets[@]}" >"$out/build-san.log" 2>&1 ||
    { echo "build failed (log: $out/build-san.log)"; exit 1; }
status=0

# Runs compute-sanitizer with tool $1 on the rest of the command line into log $log; prints one line for $name.
sanitize() {
    local tool=$1 start=$SECONDS rc
    shift
    compute-sanitizer --tool "$tool" --error-exitcode 9 "$@" >"$log" 2>&1
    rc=$?
    status=$((status | rc))
    echo "$name $tool rc=$rc $((SECONDS - start))s $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)"
}

if wants forward; then
    for fixture in native-mxfp4-mtp native-nvfp4; do
        ids="$out/$fixture.ids"
        python3 -c "from safetensors.numpy import load_file; import sys
print(' '.join(map(str, load_file(sys.argv[1])['input_ids'][:40])))" "tests/fixtures/$fixture/golden.safetensors" >"$ids"
        for tool in memcheck racecheck; do
            name=$fixture log="$out/$fixture-$tool.log"
            sanitize "$tool" build-san/tools/dsv4/dsv4 generate -q --backend cuda --numerics model \
                -m "tests/fixtures/$fixture" --ids-file "$ids" -n 4 --greedy --print-ids
        done
    done
fi
if wants batched; then
    for fixture in native_nvfp4 hf_tiny_hc2_hca16; do
        name="batched-4-$fixture" log="$out/batched-4-$fixture-racecheck.log"
        sanitize racecheck build-san/tests/dsv4_gpu_tests --gtest_filter="*CudaBatch.FourSequencesEqualAlone/$fixture"
    done
    name=batched-16 log="$out/batched-16-memcheck.log"
    sanitize memcheck build-san/tests/dsv4_gpu_tests \
        --gtest_filter='*CudaBatch.SixteenMixedLengthSequencesEqualAlone/native_nvfp4:*PagedPool*'
fi
exit $status
