#!/usr/bin/env python3
"""Checks dsv4's tokenizer against HF `tokenizers` on the corpus (tools/tokenizer/make_corpus.py): both encode
every document (no special tokens added), mismatches are reported with their first differing position. With
--write-golden it writes tests/tokenizer/data/corpus_golden.json from HF's ids (never from dsv4's): a hash of
the tokenizer file and of the corpus, per-document id counts and FNV-1a hashes, and sample ids; the C++ test
tests/tokenizer/corpus_golden_test.cpp checks dsv4 against it without Python.
Usage: python3 tools/tokenizer/compare_hf.py --bin build-tok/bench/dsv4_bench_tokenizer [--write-golden]
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

from tokenizers import Tokenizer

ROOT = pathlib.Path(__file__).resolve().parents[2]
FNV_OFFSET, FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3


def fnv1a(data: bytes) -> int:
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def ids_hash(ids) -> str:
    return f"{fnv1a(b''.join(i.to_bytes(4, 'little') for i in ids)):016x}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "build-tok/bench/dsv4_bench_tokenizer"))
    ap.add_argument("--tokenizer", default=str(ROOT / ".embedded/tokenizer.json"))
    ap.add_argument("--corpus", default=str(ROOT / "tests/tokenizer/data/corpus.jsonl"))
    ap.add_argument("--write-golden", action="store_true")
    args = ap.parse_args()
    docs = [json.loads(line) for line in open(args.corpus, encoding="utf-8") if line.strip()]
    hf = Tokenizer.from_file(args.tokenizer)
    want = [hf.encode(d["text"], add_special_tokens=False).ids for d in docs]
    with tempfile.NamedTemporaryFile("r", suffix=".ids") as tmp:
        subprocess.run([args.bin, "--corpus", args.corpus, "--tokenizer", args.tokenizer, "--dump-ids", tmp.name],
                       check=True)
        got = [[int(x) for x in line.split()] for line in open(tmp.name)]
    assert len(got) == len(docs), f"dsv4 produced {len(got)} lines for {len(docs)} documents"
    n_bytes = sum(len(d["text"].encode()) for d in docs)
    bad = 0
    for d, w, g in zip(docs, want, got):
        if w != g:
            bad += 1
            k = next((i for i in range(min(len(w), len(g))) if w[i] != g[i]), min(len(w), len(g)))
            if bad <= 10:
                ctx = hf.decode(w[max(0, k - 3):k + 3])
                print(f"MISMATCH kind={d['kind']} at id #{k}: hf {w[k:k + 6]} dsv4 {g[k:k + 6]} near {ctx!r}")
    total = sum(len(w) for w in want)
    print(f"compare_hf: {len(docs)} documents, {n_bytes} bytes, {total} ids: {bad} documents differ")
    if args.write_golden:
        if bad:
            sys.exit("not writing a golden while dsv4 disagrees with HF")
        golden = {
            "about": "HF tokenizers ids of tests/tokenizer/data/corpus.jsonl; made by tools/tokenizer/compare_hf.py",
            "tokenizers_version": __import__("tokenizers").__version__,
            "tokenizer_fnv1a": f"{fnv1a(pathlib.Path(args.tokenizer).read_bytes()):016x}",
            "corpus_fnv1a": f"{fnv1a(pathlib.Path(args.corpus).read_bytes()):016x}",
            "documents": len(docs), "bytes": n_bytes, "ids": total,
            "doc_ids": [[len(w), ids_hash(w)] for w in want],
            "samples": {str(i): want[i][:48] for i in range(0, len(docs), 97)},
        }
        out = ROOT / "tests/tokenizer/data/corpus_golden.json"
        out.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
        print(f"wrote {out}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
