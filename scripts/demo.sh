#!/usr/bin/env bash
# Sets up, builds, writes the embedded tiny DeepSeek-V4 model (.embedded/tiny, random weights, the real
# tokenizer) if it is not there yet, and generates text with it. Works on a fresh Debian/Ubuntu machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
dsv4="${DSV4_BUILD_DIR:-build}/tools/dsv4/dsv4"
model=.embedded/tiny
if [ ! -f "$model/config.json" ]; then
    echo "demo: writing the tiny model to $model"
    rm -rf "$model"
    "$dsv4" synth --preset tiny --seed 0 -o "$model"
fi

prompt="The three most important ideas in computer science are"
echo
echo "demo: the tiny model has random weights, so expect a random walk through DeepSeek's real vocabulary."
echo "demo: $dsv4 generate -m $model --prompt \"$prompt\" -n 24"
echo
"$dsv4" generate -q -m "$model" --prompt "$prompt" -n 24
echo
echo "demo: $dsv4 inspect -m $model (first lines)"
"$dsv4" inspect -m "$model" | sed -n '1,12p'
echo
echo "demo: to chat with it: $dsv4 chat -m $model   (/reset, /quit; --thinking to see reasoning)"
