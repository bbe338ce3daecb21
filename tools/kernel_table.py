#!/usr/bin/env python3
"""Kernel times from an Nsight Compute CSV (`ncu --csv --metrics gpu__time_duration.sum`, tools/gpu_kernel_profile.sh).

Prints a summary per kernel name (calls, total and mean microseconds, share), ordered by total, and writes the
kernels in launch order (index, microseconds, grid, block, name) beside the CSV as `<csv>.order.txt`. Lines of the
profiled program's own output mixed into the CSV are skipped.
"""
import csv
import sys
from collections import OrderedDict


def read_kernels(path):
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    rows = list(csv.reader(lines))
    if not rows or rows[0][0] != "ID":
        sys.exit(f"{path}: no ncu CSV header (did ncu profile anything?)")
    head = rows[0]
    col = {name: head.index(name) for name in ("ID", "Kernel Name", "Grid Size", "Block Size", "Metric Name",
                                                "Metric Unit", "Metric Value")}
    kernels = []
    for r in rows[1:]:
        if r[col["Metric Name"]] != "gpu__time_duration.sum":
            continue
        scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}[r[col["Metric Unit"]]]
        value = float(r[col["Metric Value"]].replace(",", "")) * scale
        name = r[col["Kernel Name"]].split("(")[0].split("<")[0].strip()
        kernels.append((int(r[col["ID"]]), name, value, r[col["Grid Size"]], r[col["Block Size"]]))
    return kernels


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: kernel_table.py NCU.csv")
    kernels = read_kernels(sys.argv[1])
    with open(sys.argv[1] + ".order.txt", "w") as f:
        for i, name, us, grid, block in kernels:
            f.write(f"{i:5d} {us:9.2f} {grid:>16} {block:>14}  {name}\n")
    total = sum(k[2] for k in kernels)
    by_name = OrderedDict()
    for _, name, us, _, _ in kernels:
        calls, t = by_name.get(name, (0, 0.0))
        by_name[name] = (calls + 1, t + us)
    print(f"{len(kernels)} kernels, {total:.1f} us in all (each alone, caches flushed)")
    print(f"{'kernel':48} {'calls':>5} {'total us':>9} {'mean us':>8} {'share':>6}")
    for name, (calls, t) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
        print(f"{name[:48]:48} {calls:5d} {t:9.1f} {t / calls:8.2f} {100 * t / total:5.1f}%")


if __name__ == "__main__":
    main()
