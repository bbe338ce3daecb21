#!/usr/bin/env python3
"""Serving benchmark for `dsv4 serve` (or any OpenAI-compatible server with vLLM's ignore_eos), in the spirit of
vLLM's benchmark_serving: random token-id prompts of exact lengths on /v1/completions, ignore_eos so every reply has
exactly --output-len tokens, streamed to time the first token (TTFT) and the gaps between streamed chunks (ITL; one
token each unless a UTF-8 character spans tokens). A sweep over client concurrency (closed loop) or request rate
(Poisson arrivals), one line per setting as it ends, then a table. Standard library only (runs on machines with no
network and no openai package). Checks what it measures: a request that errors or does not return exactly
--output-len tokens is counted in `fail` and left out of the numbers.

    dsv4 serve -m DIR --backend cuda --max-running 64 &
    python3 tools/bench_serve.py --url http://127.0.0.1:8000 --concurrency 1,8,64 --input-len 512 --output-len 128
    python3 tools/bench_serve.py --url http://127.0.0.1:8000 --request-rate 2,8,inf --num-prompts 200
"""

import argparse
import http.client
import json
import math
import queue
import random
import statistics
import sys
import threading
import time
import urllib.parse


class Result:
    __slots__ = ("ok", "error", "prompt_tokens", "cached_tokens", "output_tokens", "ttft", "itl", "latency", "start",
                 "end")

    def __init__(self):
        self.ok, self.error = False, ""
        self.prompt_tokens = self.cached_tokens = self.output_tokens = 0
        self.ttft, self.latency, self.start, self.end = 0.0, 0.0, 0.0, 0.0
        self.itl = []


class Client:
    def __init__(self, args):
        url = urllib.parse.urlsplit(args.url)
        if url.scheme != "http":
            raise SystemExit(f"bench_serve: only http:// URLs ({args.url})")
        self.host, self.port = url.hostname, url.port or 80
        self.prefix = url.path.rstrip("/")
        if not self.prefix.endswith("/v1"):
            self.prefix += "/v1"
        self.headers = {"Content-Type": "application/json"}
        if args.api_key:
            self.headers["Authorization"] = f"Bearer {args.api_key}"
        self.timeout = args.timeout

    def get_json(self, path):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("GET", self.prefix + path, headers=self.headers)
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise SystemExit(f"bench_serve: GET {self.prefix + path} -> {resp.status} {body[:300]!r}")
            return json.loads(body)
        finally:
            conn.close()

    def run(self, body, expected_tokens):
        """One streamed completion -> Result (timings in seconds)."""
        r = Result()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        r.start = time.perf_counter()
        last = None
        finish = None
        try:
            conn.request("POST", self.prefix + "/completions", body=body, headers=self.headers)
            resp = conn.getresponse()
            if resp.status != 200:
                r.error = f"HTTP {resp.status}: {resp.read()[:200]!r}"
                return r
            while True:
                line = resp.readline()
                if not line:
                    r.error = "the stream ended without [DONE]"
                    return r
                if not line.startswith(b"data: "):
                    continue
                data = line[6:].strip()
                if data == b"[DONE]":
                    break
                chunk = json.loads(data)
                now = time.perf_counter()
                if chunk.get("usage"):
                    r.prompt_tokens = chunk["usage"]["prompt_tokens"]
                    r.output_tokens = chunk["usage"]["completion_tokens"]
                    details = chunk["usage"].get("prompt_tokens_details") or {}
                    r.cached_tokens = details.get("cached_tokens") or 0
                for choice in chunk.get("choices") or []:
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
                    if not choice.get("text"):
                        continue
                    if last is None:
                        r.ttft = now - r.start
                    else:
                        r.itl.append(now - last)
                    last = now
        except (OSError, http.client.HTTPException, ValueError) as e:
            r.error = repr(e)
            return r
        finally:
            conn.close()
        r.end = time.perf_counter()
        r.latency = r.end - r.start
        if last is None:
            r.error = "no text streamed"
        elif r.output_tokens != expected_tokens or finish != "length":
            r.error = f"{r.output_tokens} tokens, finish_reason {finish} (asked for {expected_tokens}, ignore_eos)"
        else:
            r.ok = True
        return r


def make_prompts(args, n, seed):
    # --shared-prefix: the first ids of every prompt are one sequence (a system prompt every request repeats), the
    # same in every setting; the rest of each prompt is its own.
    shared = [random.Random(args.seed + 7).randrange(args.token_min, args.token_max) for _ in range(args.shared_prefix)]
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        lo = max(1, int(args.input_len * (1 - args.range_ratio)))
        hi = max(lo, int(args.input_len * (1 + args.range_ratio)))
        olo = max(1, int(args.output_len * (1 - args.range_ratio)))
        ohi = max(olo, int(args.output_len * (1 + args.range_ratio)))
        ids = shared + [rng.randrange(args.token_min, args.token_max) for _ in range(rng.randint(lo, hi))]
        out.append((ids, rng.randint(olo, ohi)))
    return out


def request_body(args, ids, max_tokens):
    body = {"prompt": ids, "max_tokens": max_tokens, "ignore_eos": True, "temperature": args.temperature,
            "stream": True, "stream_options": {"include_usage": True}}
    if args.model:
        body["model"] = args.model
    return json.dumps(body).encode()


def run_closed_loop(client, args, prompts, concurrency):
    """`concurrency` clients, each sending its next request when the last one ends."""
    work = queue.Queue()
    for p in prompts:
        work.put(p)
    results, lock = [], threading.Lock()

    def worker():
        while True:
            try:
                ids, max_tokens = work.get_nowait()
            except queue.Empty:
                return
            r = client.run(request_body(args, ids, max_tokens), max_tokens)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, time.perf_counter() - start


def run_poisson(client, args, prompts, rate, seed):
    """Requests arrive as a Poisson process of `rate` per second (inf: all at once), at most --max-concurrency
    in flight."""
    rng = random.Random(seed)
    gate = threading.Semaphore(args.max_concurrency) if args.max_concurrency else None
    results, lock, threads = [], threading.Lock(), []

    def one(ids, max_tokens):
        try:
            r = client.run(request_body(args, ids, max_tokens), max_tokens)
            with lock:
                results.append(r)
        finally:
            if gate:
                gate.release()

    start = time.perf_counter()
    next_at = start
    for ids, max_tokens in prompts:
        if math.isfinite(rate):
            next_at += rng.expovariate(rate)
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        if gate:
            gate.acquire()
        t = threading.Thread(target=one, args=(ids, max_tokens), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return results, time.perf_counter() - start


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def summarize(setting, results, elapsed):
    ok = [r for r in results if r.ok]
    itl = [x for r in ok for x in r.itl]
    ttft = [r.ttft for r in ok]
    tpot = [(r.latency - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    out_tokens = sum(r.output_tokens for r in ok)
    return {
        "setting": setting, "requests": len(results), "fail": len(results) - len(ok), "duration_s": elapsed,
        "request_throughput": len(ok) / elapsed if elapsed else 0.0,
        "output_throughput": out_tokens / elapsed if elapsed else 0.0,
        "total_token_throughput": (out_tokens + sum(r.prompt_tokens for r in ok)) / elapsed if elapsed else 0.0,
        "ttft_ms_mean": 1e3 * statistics.fmean(ttft) if ttft else float("nan"),
        "ttft_ms_p50": 1e3 * percentile(ttft, 50), "ttft_ms_p99": 1e3 * percentile(ttft, 99),
        "itl_ms_mean": 1e3 * statistics.fmean(itl) if itl else float("nan"),
        "itl_ms_p50": 1e3 * percentile(itl, 50), "itl_ms_p99": 1e3 * percentile(itl, 99),
        "tpot_ms_p50": 1e3 * percentile(tpot, 50),
        "cached_prompt_share": sum(r.cached_tokens for r in ok) / max(1, sum(r.prompt_tokens for r in ok)),
        "errors": sorted({r.error for r in results if not r.ok})[:5],
    }


COLUMNS = [("setting", "{:>12}"), ("requests", "{:>8}"), ("fail", "{:>5}"), ("request_throughput", "{:>8.2f}"),
           ("output_throughput", "{:>10.1f}"), ("ttft_ms_p50", "{:>9.1f}"), ("ttft_ms_p99", "{:>9.1f}"),
           ("itl_ms_p50", "{:>8.2f}"), ("itl_ms_p99", "{:>8.2f}"), ("tpot_ms_p50", "{:>8.2f}")]
HEADERS = ["setting", "requests", "fail", "req/s", "out tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99",
           "TPOT p50"]


def table_row(s):
    return " ".join(fmt.format(s[key]) for key, fmt in COLUMNS)


def table_header():
    widths = [len(fmt.format(0 if key != "setting" else "")) for key, fmt in COLUMNS]
    return " ".join(h.rjust(w) for h, w in zip(HEADERS, widths)) + "   (ms)"


def parse_list(text, kind):
    return [kind(x) for x in text.split(",") if x.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000", help="the server (its /v1 is added when missing)")
    ap.add_argument("--model", default="", help="model name (default: the server's first /v1/models entry)")
    ap.add_argument("--api-key", default="")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--concurrency", default="", help="closed-loop sweep, e.g. 1,8,64 (the default: 1,8,64)")
    mode.add_argument("--request-rate", default="", help="Poisson sweep in requests/s, e.g. 1,4,inf")
    ap.add_argument("--max-concurrency", type=int, default=0, help="with --request-rate: most requests in flight")
    ap.add_argument("--num-prompts", type=int, default=0,
                    help="requests per setting (default: 4 x the concurrency, at least 16; 100 with --request-rate)")
    ap.add_argument("--input-len", type=int, default=128, help="prompt tokens (after the shared prefix)")
    ap.add_argument("--shared-prefix", type=int, default=0,
                    help="ids every prompt starts with (a shared system prompt, for the server's prefix cache)")
    ap.add_argument("--output-len", type=int, default=128, help="generated tokens (ignore_eos)")
    ap.add_argument("--range-ratio", type=float, default=0.0,
                    help="lengths drawn uniformly from [len*(1-r), len*(1+r)] (0: exact)")
    ap.add_argument("--token-min", type=int, default=2, help="random prompt ids are in [token-min, token-max)")
    ap.add_argument("--token-max", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--warmup", type=int, default=2, help="requests sent (one at a time) before the sweep")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    ap.add_argument("--json", default="", help="also write every setting's numbers here")
    args = ap.parse_args()
    if args.input_len < 1 or args.output_len < 1 or not 0 <= args.range_ratio < 1 or args.shared_prefix < 0:
        ap.error("--input-len and --output-len must be >= 1, --range-ratio in [0, 1), --shared-prefix >= 0")

    client = Client(args)
    if not args.model:
        args.model = client.get_json("/models")["data"][0]["id"]
    if args.request_rate:
        settings = [("rate", float(x)) for x in parse_list(args.request_rate, str)]
    else:
        settings = [("concurrency", c) for c in parse_list(args.concurrency or "1,8,64", int)]
    print(f"bench_serve: {args.url} model {args.model}: input {args.input_len}, output {args.output_len} tokens"
          f"{f' (+-{args.range_ratio:.0%})' if args.range_ratio else ''}"
          f"{f', after a shared prefix of {args.shared_prefix}' if args.shared_prefix else ''}", flush=True)

    for ids, max_tokens in make_prompts(args, args.warmup, args.seed + 999):
        r = client.run(request_body(args, ids, max_tokens), max_tokens)
        if not r.ok:
            raise SystemExit(f"bench_serve: warm-up request failed: {r.error}")

    summaries = []
    for i, (kind, value) in enumerate(settings):
        if kind == "rate":
            n = args.num_prompts or 100
            prompts = make_prompts(args, n, args.seed + i)
            results, elapsed = run_poisson(client, args, prompts, value, args.seed + i)
            setting = f"rate {value:g}"
        else:
            n = args.num_prompts or max(16, 4 * value)
            prompts = make_prompts(args, n, args.seed + i)
            results, elapsed = run_closed_loop(client, args, prompts, value)
            setting = f"conc {value}"
        s = summarize(setting, results, elapsed)
        s.update(kind=kind, value=value, input_len=args.input_len, output_len=args.output_len)
        summaries.append(s)
        print(f"{setting}: {s['requests']} requests ({s['fail']} failed) in {elapsed:.1f} s: "
              f"{s['request_throughput']:.2f} req/s, {s['output_throughput']:.1f} output tok/s, "
              f"TTFT p50 {s['ttft_ms_p50']:.1f} p99 {s['ttft_ms_p99']:.1f} ms, "
              f"ITL p50 {s['itl_ms_p50']:.2f} p99 {s['itl_ms_p99']:.2f} ms, "
              f"{s['cached_prompt_share']:.0%} of prompt tokens from the prefix cache", flush=True)
        for e in s["errors"]:
            print(f"  failed: {e}", flush=True)

    print()
    print(table_header())
    for s in summaries:
        print(table_row(s))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"url": args.url, "model": args.model, "settings": summaries}, f, indent=1)
    return 1 if any(s["fail"] for s in summaries) else 0


if __name__ == "__main__":
    sys.exit(main())
