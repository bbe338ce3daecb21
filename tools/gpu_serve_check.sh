#!/usr/bin/env bash
# One call on the GPU machine: `dsv4 serve` on the GPU backend against `dsv4 bench`, on V4-Flash of LAYERS trunk
# layers (default 4) with random weights in the real shapes and formats: `--random-weights flash` (the routed experts
# generated on the GPU, as dsv4 bench does: seconds), or with SYNTH=1 a checkpoint written by `dsv4 synth --preset
# flash` and loaded from its files (4 layers: 19 GB, ~4 minutes to write).
# Builds dsv4 with the server (carry .httplib from tools/carry_httplib.sh and .embedded for the tokenizer), serves
# the checkpoint, runs tools/bench_serve.py at concurrency CONCURRENCY (default 1,16,64; completions with token-id
# prompts of INPUT_LEN ids and ignore_eos, OUTPUT_LEN tokens each, sampled at TEMPERATURE, default 0), stops the
# server with SIGTERM, then times the same batch sizes with `dsv4 bench`. GPUS (e.g. 0,1) runs both over those GPUs,
# one rank each (expert parallel), instead of on one, with ATTENTION (data-parallel, serve's default, or replicated)
# for both. SHARED_PREFIX (default 0) ids start every prompt, and PREFIX_CACHE (default 0: off) sets serve's
# --prefix-cache, so a shared system prompt shows the prefix cache at work (the share of prompt tokens it served).
# STEP_TOKENS sets serve's --step-tokens (default: the largest concurrency + 256). Logs to $OUT when set; the tables
# last.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/dsv4_serve_check}"
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
layers="${LAYERS:-4}" concurrency="${CONCURRENCY:-1,16,64}"
input_len="${INPUT_LEN:-128}" output_len="${OUTPUT_LEN:-128}"
fetch() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' "$1"; }
max_running=$(echo "$concurrency" | tr ',' '\n' | sort -n | tail -1)
where=(--backend cuda)  # serve and bench alike
[ -n "${GPUS:-}" ] && where=(--gpus "$GPUS" --attention "${ATTENTION:-data-parallel}")

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/device.txt"
start=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSV4_HTTPLIB_ROOT="$PWD/.httplib" >"$out/configure.log" 2>&1 &&
    cmake --build build-gpu -j "$(nproc)" --target dsv4 >"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
echo "build: $((SECONDS - start)) s"
dsv4=build-gpu/tools/dsv4/dsv4
if [ -n "${SYNTH:-}" ]; then
    model_dir=${MODEL_DIR:-/dev/shm}/dsv4-flash-$layers  # RAM: writing 19 GB to disk took minutes
    start=$SECONDS
    [ -f "$model_dir/config.json" ] || "$dsv4" synth -o "$model_dir" --preset flash --layers "$layers" -q || exit 1
    echo "synth: $((SECONDS - start)) s ($(du -sh "$model_dir" | cut -f1))"
    model=(-m "$model_dir")
else
    model=(--random-weights flash --random-layers "$layers")
fi

# One server per SERVE_VARIANTS entry (';'-separated extra serve flags, e.g. ";--host-sampling": the default, then
# with every draw on the host), then one `dsv4 bench` per BENCH_VARIANTS entry (e.g. ";--draw"; NO_BENCH=1: none).
serve_rc=0 stop_rc=0
IFS=';' read -ra serve_variants <<<"${SERVE_VARIANTS:-}"
[ ${#serve_variants[@]} -eq 0 ] && serve_variants=("")
for v in "${!serve_variants[@]}"; do
    flags="${serve_variants[$v]}"
    start=$SECONDS
    # shellcheck disable=SC2086
    "$dsv4" serve "${model[@]}" "${where[@]}" --port 0 --max-running "$max_running" \
        --step-tokens "${STEP_TOKENS:-$((max_running + 256))}" --max-context 4096 \
        --prefix-cache "${PREFIX_CACHE:-0}" $flags 2>"$out/serve_$v.log" &
    server=$!
    port=""
    for _ in $(seq 600); do
        port=$(grep -o 'listening on http://[^ ]*' "$out/serve_$v.log" | sed 's/.*://')
        [ -n "$port" ] && fetch "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
        kill -0 $server 2>/dev/null || { cat "$out/serve_$v.log"; exit 1; }
        sleep 0.5
    done
    echo "== serve ${flags:-(default flags)}: ready in $((SECONDS - start)) s (load included)"
    grep -E "memory plan|loaded|load" "$out/serve_$v.log" | head -6
    python3 tools/bench_serve.py --url "http://127.0.0.1:$port" --concurrency "$concurrency" --input-len "$input_len" \
        --output-len "$output_len" --temperature "${TEMPERATURE:-0}" --shared-prefix "${SHARED_PREFIX:-0}" 2>&1 |
        tee "$out/bench_serve_$v.log"
    serve_rc=$((serve_rc | PIPESTATUS[0]))
    fetch "http://127.0.0.1:$port/metrics" >"$out/metrics_$v.txt"
    # The engine's steps and its own time to first token beside the client's (a gap is time outside the engine,
    # e.g. connections waiting for a server thread), and the connection threads' limit.
    grep -E "^dsv4_(prefix_cache|prompt_tokens|generation_tokens|sequences_in_use|engine_steps_total|http_connections_limit|time_to_first_token_seconds_(sum|count))" \
        "$out/metrics_$v.txt"
    kill -TERM $server
    wait $server
    rc=$?
    echo "server exit status after SIGTERM: $rc"
    stop_rc=$((stop_rc | rc))
done

IFS=';' read -ra bench_variants <<<"${BENCH_VARIANTS:-}"
[ ${#bench_variants[@]} -eq 0 ] && bench_variants=("")
[ -n "${NO_BENCH:-}" ] && bench_variants=()  # the server alone
for v in "${!bench_variants[@]}"; do
    echo "== dsv4 bench ${bench_variants[$v]:-(default flags)}"
    # shellcheck disable=SC2086
    "$dsv4" bench "${where[@]}" --layers "$layers" --batch "$concurrency" --batch-context "$input_len" \
        ${bench_variants[$v]} 2>&1 | tee "$out/bench_$v.log"
done
exit $((serve_rc | stop_rc))
