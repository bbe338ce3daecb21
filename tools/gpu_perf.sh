#!/usr/bin/env bash
# One call on the GPU machine for issue-8 style measurements: build (Release, sm_90a), run every test but the
# server end-to-end groups (that machine has no `openai`), the decode-kernel microbenchmarks, and
# `dsv4 bench --layers 4,12 --batch 1,16,64,256 --stages` (per added layer and the per-stage tables). Carry
# `.embedded` and `.httplib` (tools/carry_httplib.sh). Full outputs go to $OUT; the summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/dsv4_gpu_perf}"
trap "bash '$PWD/tools/bundle_logs.sh' \"\$out\"" EXIT  # at most 8 files come back from $OUT
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSV4_CUDA_ARCHS=90a -DDSV4_HTTPLIB_ROOT="$PWD/.httplib" \
    >"$out/configure.log" 2>&1 && cmake --build build-gpu -j "$(nproc)" >"$out/build.log" 2>&1 || {
    tail -30 "$out/build.log"
    exit 1
}
ctest --test-dir build-gpu -j 8 -E server_e2e --output-on-failure >"$out/ctest.log" 2>&1
tests=$(grep -E "tests passed" "$out/ctest.log" | tail -1)
(cd build-gpu && bench/dsv4_bench_decode_kernels) >"$out/decode_kernels.txt" 2>&1
build-gpu/tools/dsv4/dsv4 bench --layers "${LAYERS:-4,12}" --batch 1,16,64,256 --stages >"$out/bench.txt" 2>&1
echo "tests: $tests"
grep -E "^moe|^w[12]" "$out/decode_kernels.txt"
grep -A8 "^per added layer" "$out/bench.txt" | head -8
