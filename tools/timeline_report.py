#!/usr/bin/env python3
"""Tables of a `dsv4 bench --timeline FILE` trace: where a replayed decode step's time goes, lane by lane.

Each graph launch (one decode step) is averaged over the traced steps node by node (a node keeps its id from replay
to replay). Lanes are the streams the kernels were captured from, named by their first kernel's order (lane 0 runs the
step's first kernel: the main lane). Layers are cut at the main lane's pre-mixes (two a layer: the attention's and the
FFN's; the final head collapse ends the last). Usage:

    timeline_report.py FILE [--layers 4,5]

prints the step's span and each lane's busy time, a line a layer (span, the main lane's kernel time and its idle
time), and, for the layers named, every kernel: lane, start within the layer, duration, the idle time on its lane
before it, name.
"""
import argparse
import collections
import statistics
import sys


def short_name(name):
    """The kernel's own name with its template arguments (shortened), without namespaces, return type and params."""
    name = name.replace("(anonymous namespace)", "anonymous")
    if name.startswith("void "):
        name = name[5:]
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    name = name[:cut]
    depth, last = 0, 0
    for i in range(len(name) - 1):
        ch = name[i]
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0 and name[i:i + 2] == "::":
            last = i + 2
    name = name[last:]
    return name if len(name) <= 48 else name[:45] + "..."


def read(path):
    rows = []
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            fields = dict(zip(header, line.rstrip("\n").split("\t")))
            rows.append({
                "launch": int(fields["launch"]), "node": int(fields["node"]), "stream": int(fields["stream"]),
                "start": int(fields["start_ns"]), "end": int(fields["end_ns"]), "grid": fields["grid"],
                "name": fields["name"]})
    return rows


def steps_of(rows):
    """The graph launches with the most kernels (the decode steps), each a list sorted by node (capture order)."""
    by_launch = collections.defaultdict(list)
    for r in rows:
        by_launch[r["launch"]].append(r)
    most = max(len(v) for v in by_launch.values())
    steps = [sorted(v, key=lambda r: r["node"]) for v in by_launch.values() if len(v) == most]
    return sorted(steps, key=lambda s: min(r["start"] for r in s))


def averaged(steps):
    """One step's kernels in node order: mean start (from the step's first start) and end over the steps."""
    out = []
    for i, r in enumerate(steps[0]):
        starts = [s[i]["start"] - min(x["start"] for x in s) for s in steps]
        ends = [s[i]["end"] - min(x["start"] for x in s) for s in steps]
        out.append(dict(r, start=statistics.mean(starts) / 1e3, end=statistics.mean(ends) / 1e3))
    return out


def lanes_of(kernels):
    order = []
    for k in sorted(kernels, key=lambda k: k["start"]):
        if k["stream"] not in order:
            order.append(k["stream"])
    return {s: i for i, s in enumerate(order)}


def idle_before(kernels, lanes):
    """Each kernel's idle time on its lane since the lane's previous kernel ended (by start order)."""
    last_end = {}
    for k in sorted(kernels, key=lambda k: k["start"]):
        lane = lanes[k["stream"]]
        k["lane"] = lane
        k["idle"] = k["start"] - last_end[lane] if lane in last_end else 0.0
        last_end[lane] = max(last_end.get(lane, 0.0), k["end"])


def layer_cuts(kernels):
    """Node positions of the main lane's pre-mixes (hc_mix_split_kernel or the per-token / row-group mix kernels)."""
    return [i for i, k in enumerate(kernels) if k["lane"] == 0 and "hc_mix" in k["short"]]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file")
    parser.add_argument("--layers", default="", help="layers to list kernel by kernel, e.g. 4,5")
    args = parser.parse_args()
    steps = steps_of(read(args.file))
    if not steps:
        sys.exit("no kernels in " + args.file)
    kernels = averaged(steps)
    for k in kernels:
        k["short"] = short_name(k["name"])
    lanes = lanes_of(kernels)
    idle_before(kernels, lanes)
    span = max(k["end"] for k in kernels)
    print(f"{len(steps)} steps of {len(kernels)} kernels; a step's kernels span {span:.1f} us (mean)")
    for stream, lane in sorted(lanes.items(), key=lambda x: x[1]):
        mine = [k for k in kernels if k["lane"] == lane]
        busy = sum(k["end"] - k["start"] for k in mine)
        print(f"  lane {lane} (stream {stream}): {len(mine)} kernels, busy {busy:.1f} us")

    cuts = layer_cuts(kernels)
    layers = [(cuts[i], cuts[i + 2] if i + 2 < len(cuts) else len(kernels)) for i in range(0, len(cuts) - 1, 2)]
    print("\nlayer  span us  main kernels us  main idle us  kernels")
    for l, (a, b) in enumerate(layers):
        part = kernels[a:b]
        main_part = [k for k in part if k["lane"] == 0]
        start = kernels[a]["start"]
        end = kernels[b]["start"] if b < len(kernels) else max(k["end"] for k in part)
        busy = sum(k["end"] - k["start"] for k in main_part)
        idle = sum(k["idle"] for k in main_part[1:]) + (end - max(k["end"] for k in main_part) if b < len(kernels) else 0)
        print(f"{l:5d} {end - start:8.1f} {busy:16.1f} {idle:13.1f}  {len(part)}")

    wanted = [int(x) for x in args.layers.split(",") if x]
    for l in wanted:
        if l >= len(layers):
            continue
        a, b = layers[l]
        start = kernels[a]["start"]
        print(f"\nlayer {l}: lane, start (us from the layer's first kernel), duration, idle on its lane before it, grid")
        for k in kernels[a:b]:
            print(f"  {k['lane']}  {k['start'] - start:8.2f} {k['end'] - k['start']:7.2f} {k['idle']:6.2f}  "
                  f"{k['grid']:>10}  {k['short']}")


if __name__ == "__main__":
    main()
