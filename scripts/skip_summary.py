#!/usr/bin/env python3
"""Says which tests did not run, from CTest's JUnit report (ctest --output-junit FILE).

Only GPU tests (CTest names "gpu.*") may skip; they skip themselves without a CUDA device. This prints one line
with their count and the reason each gave (gtest's "Skipped" message), so a run on a machine without a GPU says
plainly how much it did not check. Other tests cannot skip (tests/cpu_tests_never_skip.h turns GTEST_SKIP into a
failure); should one still report a skip, it is listed with its reason and the exit status is 1. Also 1 when the
report cannot be read.

Usage: scripts/skip_summary.py build/ctest-junit.xml
"""
import sys
import xml.etree.ElementTree as ET
from collections import Counter


def skip_reason(output: str) -> str:
    """The message after gtest's "file:line: Skipped" line, or "no reason given"."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.rstrip().endswith(": Skipped"):
            message = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return message or "no reason given"
    return "no reason given"


def main() -> int:
    try:
        cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
    except (OSError, ET.ParseError, IndexError) as e:
        print(f"skip summary: cannot read the CTest JUnit report: {e}")
        return 1
    gpu_total = 0
    gpu_skips, other_skips = Counter(), []
    for case in cases:
        name = case.get("name", "")
        is_gpu = name.startswith("gpu.")
        gpu_total += is_gpu
        output = case.findtext("system-out") or ""
        if is_gpu and case.find("skipped") is not None:
            gpu_skips[skip_reason(output)] += 1
        elif not is_gpu and case.find("skipped") is not None:
            other_skips.append(f"{name} ({skip_reason(output)})")
    if gpu_total == 0:
        print("GPU tests: none in this run (none selected, or no CUDA toolkit to build them)")
    elif not gpu_skips:
        print(f"GPU tests: all {gpu_total} ran")
    else:
        reasons = "; ".join(f"{reason}" if len(gpu_skips) == 1 else f"{reason}: {n}" for reason, n in
                            gpu_skips.most_common())
        print(f"GPU tests: {sum(gpu_skips.values())} of {gpu_total} skipped ({reasons})")
    for line in other_skips:
        print(f"CPU test skipped, which fails the suite: {line}")
    return 1 if other_skips else 0


if __name__ == "__main__":
    sys.exit(main())
