#!/usr/bin/env bash
# compute-sanitizer (memcheck and racecheck) over whole GPU forward passes: prefill of the first 40 ids of two
# quantized fixtures, then 3 decode steps (graph replays), through `dsv4 generate --backend cuda`; and the batched
# forward (16 sequences prefilled and decoded together, the paged pool) through its GPU tests. Run on the GPU
# machine (needs python3 with safetensors to read the fixture's ids); logs go to $OUT when set. One line per run.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/dsv4_sanitize}"
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B build-san -G Ninja -DDSV4_CUDA_ARCHS=90a -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
    cmake --build build-san -j "$(nproc)" --target dsv4 dsv4_gpu_tests >/dev/null || { echo "build failed"; exit 1; }
status=0
for fixture in native-mxfp4-mtp native-nvfp4; do
    ids="$out/$fixture.ids"
    python3 -c "from safetensors.numpy import load_file; import sys
print(' '.join(map(str, load_file(sys.argv[1])['input_ids'][:40])))" "tests/fixtures/$fixture/golden.safetensors" >"$ids"
    for tool in memcheck racecheck; do
        log="$out/$fixture-$tool.log"
        compute-sanitizer --tool "$tool" --error-exitcode 9 build-san/tools/dsv4/dsv4 generate -q --backend cuda \
            --numerics model -m "tests/fixtures/$fixture" --ids-file "$ids" -n 4 --greedy --print-ids >"$log" 2>&1
        rc=$?
        status=$((status | rc))
        echo "$fixture $tool rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)"
    done
done
batched='*CudaBatch.SixteenMixedLengthSequencesEqualAlone/native_nvfp4:*PagedPool*'
for tool in memcheck racecheck; do
    log="$out/batched-$tool.log"
    compute-sanitizer --tool "$tool" --error-exitcode 9 build-san/tests/dsv4_gpu_tests --gtest_filter="$batched" \
        >"$log" 2>&1
    rc=$?
    status=$((status | rc))
    echo "batched $tool rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)"
done
exit $status
