#!/usr/bin/env bash
# Sets up, builds and generates text with the embedded trained tiny DeepSeek-V4 (tests/fixtures/official-trained-bytes: every
# V4 layer type, FP8 weights and FP4 experts in the Hub layout, a byte-level vocabulary, trained for five minutes on
# English text: Python docstrings and software licenses). Works on a fresh Debian/Ubuntu machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
dsv4="${DSV4_BUILD_DIR:-build}/tools/dsv4/dsv4"
model=tests/fixtures/official-trained-bytes

echo
echo "demo: a 5.6 M-parameter DeepSeek-V4 that learned English bytes: expect words and half-sentences in the style"
echo "demo: of Python docstrings and licenses (tools/fixtures/make_trained_fixture.py says how it was made)."
for prompt in "Return the" "This License"; do
    echo
    echo "demo: $dsv4 generate -m $model --prompt \"$prompt\" -n 160"
    echo
    "$dsv4" generate -q -m "$model" --prompt "$prompt" -n 160
    echo
done
echo
echo "demo: $dsv4 inspect -m $model (first lines)"
"$dsv4" inspect -m "$model" | sed -n '1,12p'
echo
echo "demo: the same engine on DeepSeek's real 129k vocabulary with random weights: $dsv4 synth --preset tiny -o DIR"
