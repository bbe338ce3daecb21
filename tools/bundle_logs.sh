#!/usr/bin/env bash
# Folds the files of a GPU script's log folder into one archive, logs.tar.gz, when there are more than the device
# tool brings back (8 files from $OUT): otherwise some logs would be left behind at random. Read them here with
# `tar -xzf <files_at>/logs.tar.gz -C /tmp/logs`. Usage: tools/bundle_logs.sh DIR (called on exit by the gpu_*.sh
# scripts with their $OUT).
set -uo pipefail
dir="${1:?usage: bundle_logs.sh DIR}"
[ -d "$dir" ] || exit 0
count=$(find "$dir" -type f | wc -l)
[ "$count" -le 8 ] && exit 0
tmp=$(mktemp /tmp/dsv4_logs.XXXXXX.tar.gz)
tar -czf "$tmp" -C "$dir" . && find "$dir" -mindepth 1 -delete && mv "$tmp" "$dir/logs.tar.gz"
echo "logs: $count files in $dir/logs.tar.gz"
