#!/usr/bin/env python3
"""Stall samples of one kernel by reason and by opcode, from Nsight Compute's per-instruction SASS page as CSV
(`ncu --import R.ncu-rep --page source --csv --print-source sass`, what tools/gpu_prefill_ncu.sh brings back).
Optional address ranges (offsets from the kernel's first instruction, as `cuobjdump -sass` numbers them) split the
samples and executed instructions by region: `ncu_stalls.py F.csv --region head=0x5aa0:0x61c0 --region units=...`.
"""
import argparse
import collections
import csv

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv")
    parser.add_argument("--region", action="append", default=[], help="NAME=START:END (hex offsets)")
    parser.add_argument("--top", type=int, default=14)
    args = parser.parse_args()

    rows = list(csv.reader(open(args.csv)))
    header = rows[1]
    col = {h: i for i, h in enumerate(header)}
    data = [r for r in rows[2:] if len(r) >= len(header)]
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    value = lambda r, k: float(r[col[k]] or 0)
    base = int(data[0][col["Address"]], 16)
    total = sum(value(r, SAMPLES) for r in data) or 1.0

    by_reason = collections.Counter()
    by_op = collections.defaultdict(collections.Counter)
    for r in data:
        words = r[col["Source"]].split()
        op = (words[1] if words and words[0].startswith("@") else (words[0] if words else "?")).split(".")[0]
        for k in reasons:
            by_reason[k] += value(r, k)
            by_op[op][k] += value(r, k)
    print(f"{int(total)} samples")
    for k, v in by_reason.most_common(args.top):
        print(f"  {k[6:]:20s} {100 * v / total:5.1f} %")
    print("by opcode: share of samples, its three largest reasons")
    for op in sorted(by_op, key=lambda o: -sum(by_op[o].values()))[: args.top]:
        c = by_op[op]
        top = ", ".join(f"{k[6:]} {100 * v / total:.1f}" for k, v in c.most_common(3))
        print(f"  {op:12s} {100 * sum(c.values()) / total:5.1f} %  {top}")

    if args.region:
        executed = sum(value(r, EXECUTED) for r in data) or 1.0
        print("by region: share of samples, of executed instructions, the four largest reasons")
        for spec in args.region:
            name, span = spec.split("=")
            start, end = (int(x, 16) for x in span.split(":"))
            inside = [r for r in data if start <= int(r[col["Address"]], 16) - base < end]
            c = collections.Counter({k: sum(value(r, k) for r in inside) for k in reasons})
            top = ", ".join(f"{k[6:]} {100 * v / total:.1f}" for k, v in c.most_common(4))
            print(f"  {name:12s} {100 * sum(value(r, SAMPLES) for r in inside) / total:5.1f} % "
                  f"{100 * sum(value(r, EXECUTED) for r in inside) / executed:5.1f} %  {top}")


if __name__ == "__main__":
    main()
