#!/usr/bin/env bash
# Nsight Compute on kernels of one 8,192-token prefill piece, with the prebuilt dsv4 that tools/gpu_prebuilt.sh
# unpacked in /tmp/dsv4_prebuilt (or out/prebuilt.tar.xz, unpacked here when it did not run): the first launch of each
# kernel named (regexes as arguments, e.g. moe_wgmma_kernel '^kernel$'), one at a time, each under PROFILE_TIMEOUT
# seconds (default 120). `dsv4 bench --profile-range` wraps only decode steps, so these profile from the start.
# LAYERS (default 1: an SWA layer) reaches the other layer kinds: 3 takes the first CSA layer (the indexer's kernels).
# Per kernel, in $OUT: the details page (stall reasons, occupancy, throughputs) and the per-instruction SASS page as
# CSV (samples by stall reason), both folded into ncu.tgz at the end; the report itself is too large to bring back.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/dsv4_prefill_ncu}"
bin=/tmp/dsv4_prebuilt
mkdir -p "$out"
if [ ! -x "$bin/dsv4" ]; then mkdir -p "$bin" && tar -xJf out/prebuilt.tar.xz -C "$bin" || exit 1; fi
export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for kernel in "$@"; do
    name=$(echo "$kernel" | tr -dc 'a-z_')
    timeout "${PROFILE_TIMEOUT:-120}" ncu --clock-control none -k "regex:$kernel" -c 1 --section WarpStateStats \
        --section SourceCounters --section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats \
        --section Occupancy --section LaunchStats -o "$out/$name" \
        "$bin/dsv4" bench --layers "${LAYERS:-1}" --context 8192 --chunk 8192 --steps 1 --warmup 0 >"$out/ncu_$name.log" 2>&1
    echo "== ncu $kernel: rc $?"
    ncu --import "$out/$name.ncu-rep" --page details >"$out/ncu_${name}_details.txt" 2>&1
    ncu --import "$out/$name.ncu-rep" --page source --csv --print-source sass >"$out/ncu_${name}_sass.csv" 2>&1
    rm -f "$out/$name.ncu-rep"
    summary="Duration|Stall|Warp Cycles Per Issued|Issued Ipc|Registers Per|Achieved Occ|Compute \(SM\) Thr"
    grep -E "$summary|Memory Thr|L2 Cache Thr|DRAM Thr" "$out/ncu_${name}_details.txt" | head -"${LINES_PER_RUN:-24}"
done
(cd "$out" && tar -czf ncu.tgz ncu_* && rm -f ncu_*)
