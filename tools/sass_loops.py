#!/usr/bin/env python3
"""The hot loop of each kernel in a CUDA object or binary, from `cuobjdump -sass`: per function, its instruction count,
the length of the smallest loop (a backward branch's span) holding at least --min tensor-core instructions (HGMMA or
HMMA: the K loop of a GEMM-like kernel) and that loop's instructions by opcode. With two files, the same functions
side by side and the loop's opcode counts that differ: what a change did to the instructions a stage issues, read
before any device run (docs/perf.md predicts from it).

  tools/sass_loops.py before.o after.o --kernel moe_wgmma_kernel
  tools/sass_loops.py build/src/.../moe_wgmma.cu.o --kernel 'ELi64' --opcodes

Objects compiled for one architecture only are the simplest to read (nvcc -c ... --generate-code=arch=compute_90a,
code=sm_90a); with several, cuobjdump lists each architecture's copy and the last one read wins. Functions in an
anonymous namespace are matched across files by name whatever their namespace's per-path hash, so a file compiled
from a copy elsewhere (a commit's version in /tmp) compares with the tree's. cuobjdump and its nvdisasm come with
the CUDA toolkit, or from PyPI where the toolkit lacks them: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm.
"""
import argparse
import collections
import glob
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys

INSTRUCTION = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
FUNCTION = re.compile(r"^\s+Function : (\S+)")
BRANCH = re.compile(r"\bBRA(?:\.\S+)? (0x[0-9a-f]+)")


ANONYMOUS = re.compile(r"_GLOBAL__N__([0-9a-f]+)_")


def cuobjdump():
    """The cuobjdump command, and an environment whose PATH reaches its nvdisasm: the toolkit's, else PyPI's wheels."""
    env = dict(os.environ)
    found = shutil.which("cuobjdump")
    if not found and importlib.util.find_spec("nvidia") is not None:
        for root in importlib.util.find_spec("nvidia").submodule_search_locations:
            for candidate in sorted(glob.glob(os.path.join(root, "*", "bin", "cuobjdump"))):
                found = candidate
                env["PATH"] = os.path.dirname(candidate) + os.pathsep + env.get("PATH", "")
    if not found:
        sys.exit("cuobjdump not found: install the CUDA toolkit's, or pip install nvidia-cuda-cuobjdump "
                 "nvidia-cuda-nvdisasm")
    return found, env


def functions(path):
    """{mangled name (anonymous namespaces' hash zeroed): [(address, instruction text)]} from cuobjdump -sass."""
    command, env = cuobjdump()
    try:
        text = subprocess.run([command, "-sass", path], capture_output=True, text=True, check=True, env=env).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"{path}: cuobjdump -sass failed ({e})")
    result, current = {}, None
    for line in text.splitlines():
        m = FUNCTION.match(line)
        if m:
            # the per-path hash zeroed, its length kept (the mangled name's length prefix stays right for c++filt)
            current = ANONYMOUS.sub(lambda h: "_GLOBAL__N__" + "0" * len(h.group(1)) + "_", m.group(1))
            result[current] = []
            continue
        m = INSTRUCTION.match(line)
        if m and current is not None:
            result[current].append((int(m.group(1), 16), m.group(2)))
    return result


def opcode(instruction):
    words = instruction.split()
    if words and words[0].startswith("@"):  # predicate
        words = words[1:]
    return words[0] if words else ""


def hot_loop(instructions, min_mma):
    """The smallest span [target, branch] of a backward branch with >= min_mma HGMMA/HMMA inside, or []."""
    best = []
    for address, text in instructions:
        m = BRANCH.search(text)
        if not m or int(m.group(1), 16) >= address:
            continue
        target = int(m.group(1), 16)
        body = [t for a, t in instructions if target <= a <= address]
        mma = sum(opcode(t).startswith(("HGMMA", "HMMA")) for t in body)
        if mma >= min_mma and (not best or len(body) < len(best)):
            best = body
    return best


def demangled(names):
    """{mangled: readable} through c++filt where it is installed (binutils), else the names as they are."""
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        readable = out.splitlines()
        if len(readable) == len(names):
            return dict(zip(names, readable))
    except (OSError, subprocess.CalledProcessError):
        pass
    return {n: n for n in names}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", help="one object/binary, or two to compare")
    parser.add_argument("--kernel", default="", help="regex on the mangled function name")
    parser.add_argument("--min", type=int, default=8, help="tensor-core instructions the loop must hold")
    parser.add_argument("--opcodes", action="store_true", help="print the loop's opcode counts (one file)")
    args = parser.parse_args()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into head
    if len(args.files) > 2:
        sys.exit("one or two files")
    tables = [functions(f) for f in args.files]
    names = [n for n in tables[0] if re.search(args.kernel, n) and all(n in t for t in tables[1:])]
    if not names:
        sys.exit("no function matches (in every file)")
    readable = demangled(names)
    for name in sorted(names, key=lambda n: readable[n]):
        loops = [hot_loop(t[name], args.min) for t in tables]
        sizes = " -> ".join(f"{len(t[name])} / loop {len(loop)}" for t, loop in zip(tables, loops))
        print(f"{readable[name]}: instructions / hot loop {sizes}")
        counts = [collections.Counter(opcode(i) for i in loop) for loop in loops]
        if len(counts) == 2:
            for op in sorted(set(counts[0]) | set(counts[1])):
                if counts[0][op] != counts[1][op]:
                    print(f"    {op:28s} {counts[0][op]:5d} {counts[1][op]:5d} {counts[1][op] - counts[0][op]:+5d}")
        elif args.opcodes:
            for op, n in counts[0].most_common():
                print(f"    {op:28s} {n:5d}")


if __name__ == "__main__":
    main()
