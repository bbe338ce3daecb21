#!/usr/bin/env bash
# Sets up, builds everything (CUDA code included) and runs every test. GPU tests skip themselves without a
# GPU and are counted as skipped in CTest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build_dir="${DSV4_BUILD_DIR:-build}"
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@"
