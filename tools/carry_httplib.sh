#!/usr/bin/env bash
# Packs this machine's cpp-httplib (Debian's libcpp-httplib-dev: header, shared library and the headers and
# libraries it was built against) into .httplib/ (git-ignored), for the GPU machine, which has no such package and
# no network. There: name .httplib in the device tool's `carry` and configure with -DDSV4_HTTPLIB_ROOT=$PWD/.httplib.
set -euo pipefail
cd "$(dirname "$0")/.."
lib=/usr/lib/x86_64-linux-gnu
rm -rf .httplib && mkdir -p .httplib/include .httplib/lib
cp /usr/include/httplib.h /usr/include/zlib.h /usr/include/zconf.h .httplib/include/
cp -r /usr/include/brotli /usr/include/openssl .httplib/include/
cp /usr/include/x86_64-linux-gnu/openssl/*.h .httplib/include/openssl/
cp "$lib/libcpp-httplib.so.0.11.4" .httplib/lib/libcpp-httplib.so
cp "$lib/libcpp-httplib.so.0.11.4" .httplib/lib/libcpp-httplib.so.0.11
for b in common dec enc; do cp "$lib/libbrotli$b.so.1" .httplib/lib/; done
du -sh .httplib
