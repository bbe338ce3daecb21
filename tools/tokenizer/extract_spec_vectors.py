#!/usr/bin/env python3
"""Copies the test vectors of spec/dsv4-encoding.md §5 (encoding: main and edge/error; parsing) into
tests/tokenizer/data/encoding_vectors.json, which tests/tokenizer/{prompt,completion}_test.cpp read. The
vectors are the spec's data verbatim (produced there by running the reference encoders), never dsv4 output.
Usage: python3 tools/tokenizer/extract_spec_vectors.py [--spec ../shared/spec/dsv4-encoding.md]
"""
import argparse
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default=str(ROOT.parent / "shared/spec/dsv4-encoding.md"))
    args = ap.parse_args()
    text = pathlib.Path(args.spec).read_text(encoding="utf-8")
    sections = {}
    for title, key in [("### 5.1 Encoding vectors", "encoding"), ("### 5.2 Encoding vectors", "encoding_edge"),
                       ("### 5.3 Parsing vectors", "parsing")]:
        start = text.index(title)
        block = re.search(r"```json\n(.*?)\n```", text[start:], re.S).group(1)
        sections[key] = json.loads(block)
    out = {"source": "spec/dsv4-encoding.md §5", "encoding": sections["encoding"] + sections["encoding_edge"],
           "parsing": sections["parsing"]}
    dst = ROOT / "tests/tokenizer/data/encoding_vectors.json"
    dst.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"extract_spec_vectors: {len(out['encoding'])} encoding and {len(out['parsing'])} parsing vectors -> {dst}")


if __name__ == "__main__":
    main()
