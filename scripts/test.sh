#!/usr/bin/env bash
# Sets up, builds everything (CUDA code included) and runs every test. Only GPU tests may skip (they do without a
# GPU); a CPU test that skips fails the suite (tests/CMakeLists.txt). The last line says how many GPU tests did
# not run and why (scripts/skip_summary.py).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build_dir="${DSV4_BUILD_DIR:-build}"
junit="$(cd "$build_dir" && pwd)/ctest-junit.xml"
rm -f "$junit"
status=0
ctest --test-dir "$build_dir" --output-on-failure --output-junit "$junit" -j "$(nproc)" "$@" || status=$?
python3 scripts/skip_summary.py "$junit" || status=$((status ? status : 1))
exit "$status"
