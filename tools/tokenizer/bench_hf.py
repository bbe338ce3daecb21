#!/usr/bin/env python3
"""Encode throughput of HF tokenizers and of dsv4 on the tokenizer corpus, one thread, in the same run, for
docs/perf.md. HF: Tokenizer.encode per document (RAYON_NUM_THREADS=1, no batching); dsv4: the Google
Benchmark binary bench/dsv4_bench_tokenizer (encode_corpus_warm / _cold: piece cache kept / emptied per pass). Prints both in MB/s (10^6 bytes per second).
Usage: python3 tools/tokenizer/bench_hf.py [--bin build-tok/bench/dsv4_bench_tokenizer] [--repeats 5]
"""
import argparse
import json
import os
import pathlib
import subprocess
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer  # noqa: E402  (after the thread settings)

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "build-tok/bench/dsv4_bench_tokenizer"))
    ap.add_argument("--tokenizer", default=str(ROOT / ".embedded/tokenizer.json"))
    ap.add_argument("--corpus", default=str(ROOT / "tests/tokenizer/data/corpus.jsonl"))
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    docs = [json.loads(line)["text"] for line in open(args.corpus, encoding="utf-8") if line.strip()]
    n_bytes = sum(len(d.encode()) for d in docs)
    hf = Tokenizer.from_file(args.tokenizer)
    best = float("inf")
    for _ in range(args.repeats):
        t = time.perf_counter()
        for d in docs:
            hf.encode(d, add_special_tokens=False)
        best = min(best, time.perf_counter() - t)
    hf_mbs = n_bytes / best / 1e6
    out = subprocess.run([args.bin, "--corpus", args.corpus, "--tokenizer", args.tokenizer,
                          "--benchmark_filter=encode_corpus", "--benchmark_format=json",
                          f"--benchmark_repetitions={args.repeats}", "--benchmark_min_time=1s"],
                         check=True, capture_output=True, text=True).stdout
    runs = [b for b in json.loads(out)["benchmarks"] if b.get("run_type") == "iteration"]
    print(f"corpus {n_bytes} bytes, {len(docs)} documents; best of {args.repeats}, one thread")
    print(f"HF tokenizers {__import__('tokenizers').__version__} (its word cache warm after pass 1): {hf_mbs:.1f} MB/s")
    for name in ("encode_corpus_warm", "encode_corpus_cold"):
        mbs = max(b["bytes_per_second"] for b in runs if b["name"].startswith(name)) / 1e6
        print(f"dsv4 {name}: {mbs:.1f} MB/s ({mbs / hf_mbs:.2f}x HF)")


if __name__ == "__main__":
    main()
