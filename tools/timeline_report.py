#!/usr/bin/env python3
"""Tables of a `dsv4 bench --timeline FILE` trace: where a replayed decode step's time goes, layer by layer.

Each graph launch (one decode step) is averaged over the traced steps node by node (a node keeps its id from replay
to replay, in capture order). Layers are cut at every second pre-mix in node order (two a layer: the attention's and
the FFN's; the final head collapse ends the last). The trace's streams are the graph's own (a replay runs each branch
of the graph on a stream of its choosing, not on the stream it was captured from), so the tables read the GPU as a
whole: a layer's span, the time some kernel runs (busy) and the time none does (idle: every dependent launch's
latency on the critical path, and the waits a join makes). Usage:

    timeline_report.py FILE [--kinds] [--layers 4,5]

prints the step's span and busy time, a line a layer (span, busy, idle, kernels); with --kinds, each layer kind's
kernels (the layers whose kernels are the same in node order) with their start, end and duration averaged over its
layers, the table to compare two builds by; and, for the layers named, every kernel in start order: start within the
layer, end, duration, the idle time before it (since every kernel that started earlier had ended), its stream, grid
and name.
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
    out, firsts = [], [min(x["start"] for x in s) for s in steps]
    for i, r in enumerate(steps[0]):
        starts = [s[i]["start"] - first for s, first in zip(steps, firsts)]
        ends = [s[i]["end"] - first for s, first in zip(steps, firsts)]
        out.append(dict(r, start=statistics.mean(starts) / 1e3, end=statistics.mean(ends) / 1e3))
    return out


def busy_time(intervals):
    """The time covered by the union of (start, end) intervals."""
    total, cover_start, cover_end = 0.0, None, None
    for start, end in sorted(intervals):
        if cover_end is None or start > cover_end:
            if cover_end is not None:
                total += cover_end - cover_start
            cover_start, cover_end = start, end
        else:
            cover_end = max(cover_end, end)
    return total + (cover_end - cover_start if cover_end is not None else 0.0)


def idle_before(kernels):
    """Each kernel's idle time before it: since every kernel that started earlier had ended (0 if one still ran)."""
    latest_end = None
    for k in sorted(kernels, key=lambda k: k["start"]):
        k["idle"] = max(0.0, k["start"] - latest_end) if latest_end is not None else 0.0
        latest_end = k["end"] if latest_end is None else max(latest_end, k["end"])


def layer_cuts(kernels):
    """Node positions of the pre-mixes (hc_mix_split_kernel or the per-token / row-group mix kernels)."""
    return [i for i, k in enumerate(kernels) if "hc_mix" in k["short"]]


def layer_kinds(kernels, layers, windows):
    """The layers grouped by kind (the same kernels in node order: V4's SWA, CSA and HCA layers, hash or score
    routing), each kind with its layers and, for each of its kernels in node order, the mean start and end (from the
    layer's first kernel) and the mean duration over its layers."""
    kinds = {}
    for l, (a, b) in enumerate(layers):
        kinds.setdefault(tuple(k["short"] for k in kernels[a:b]), []).append(l)
    out = []
    for names, members in kinds.items():
        rows = []
        for i, name in enumerate(names):
            ks = [kernels[layers[l][0] + i] for l in members]
            rows.append({"short": name, "start": statistics.mean(k["start"] - windows[l] for k, l in zip(ks, members)),
                         "end": statistics.mean(k["end"] - windows[l] for k, l in zip(ks, members)),
                         "duration": statistics.mean(k["end"] - k["start"] for k in ks)})
        out.append((members, sorted(rows, key=lambda r: r["start"])))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file")
    parser.add_argument("--layers", default="", help="layers to list kernel by kernel, e.g. 4,5")
    parser.add_argument("--kinds", action="store_true",
                        help="each layer kind's kernels averaged over its layers (layers with the same kernels)")
    args = parser.parse_args()
    steps = steps_of(read(args.file))
    if not steps:
        sys.exit("no kernels in " + args.file)
    kernels = averaged(steps)
    for k in kernels:
        k["short"] = short_name(k["name"])
    idle_before(kernels)
    span = max(k["end"] for k in kernels)
    busy = busy_time([(k["start"], k["end"]) for k in kernels])
    print(f"{len(steps)} steps of {len(kernels)} kernels; a step's kernels span {span:.1f} us (mean), "
          f"busy {busy:.1f}, idle {span - busy:.1f}")

    cuts = layer_cuts(kernels)
    layers = [(cuts[i], cuts[i + 2] if i + 2 < len(cuts) else len(kernels)) for i in range(0, len(cuts) - 1, 2)]
    print("\nlayer  span us  busy us  idle us  kernels")
    windows = []
    for l, (a, b) in enumerate(layers):
        part = kernels[a:b]
        start = min(k["start"] for k in part)
        end = kernels[b]["start"] if b < len(kernels) else max(k["end"] for k in part)
        windows.append(start)
        layer_busy = busy_time([(k["start"], min(k["end"], end)) for k in part])
        print(f"{l:5d} {end - start:8.1f} {layer_busy:8.1f} {end - start - layer_busy:8.1f}  {len(part)}")

    if args.kinds:
        for members, rows in layer_kinds(kernels, layers, windows):
            print(f"\nlayers {', '.join(map(str, members))}: each kernel's mean start and end (us from the layer's "
                  "first kernel) and duration")
            for r in rows:
                print(f"  {r['start']:8.2f} {r['end']:8.2f} {r['duration']:7.2f}  {r['short']}")

    wanted = [int(x) for x in args.layers.split(",") if x]
    for l in wanted:
        if l >= len(layers):
            continue
        a, b = layers[l]
        start = windows[l]
        print(f"\nlayer {l}: start and end (us from the layer's first kernel), duration, idle before it, stream, grid")
        for k in sorted(kernels[a:b], key=lambda k: k["start"]):
            print(f"  {k['start'] - start:8.2f} {k['end'] - start:8.2f} {k['end'] - k['start']:7.2f} {k['idle']:6.2f} "
                  f"{k['stream']:4d} {k['grid']:>10}  {k['short']}")


if __name__ == "__main__":
    main()
