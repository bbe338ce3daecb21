#!/usr/bin/env python3
"""tools/timeline_report.py on a hand-made trace whose tables are worked out by hand below: two replays of one graph
of 11 kernels, one every 4 us, 3 us each on the main stream and 6 us on the side one (so kernels 3 and 9 overlap the
next), the second replay 4 ms later (averaging must align the nodes, not the clock); every second pre-mix (`hc_mix`)
from kernel 1 on cuts the layers."""
import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "tools", "timeline_report.py")
spec = importlib.util.spec_from_file_location("timeline_report", SCRIPT)
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)

MAIN, SIDE = 7, 13
KERNELS = [("void dsv4::cuda::(anonymous namespace)::embed_kernel(dsv4::cuda::EmbedParams)", MAIN),
           ("void dsv4::cuda::(anonymous namespace)::hc_mix_split_kernel<4, false, 16, true>(dsv4::cuda::HcMixParams, "
            "dsv4::cuda::RmsNormParams)", MAIN),
           ("fp8_mma_kernel", MAIN), ("side_kernel", SIDE), ("hc_mix_split_kernel<4>", MAIN), ("moe", MAIN),
           ("hc_mix_split_kernel<4>", MAIN), ("fp8", MAIN), ("hc_mix_split_kernel<4>", MAIN), ("side_tail", SIDE),
           ("hc_mix_split_kernel<4, true>", MAIN)]


def write_trace(path):
    with open(path, "w") as f:
        f.write("launch\tnode\tstream\tstart_ns\tend_ns\tgrid\tblock\tname\n")
        for launch, base in ((100, 1_000_000), (200, 5_000_000)):
            for i, (name, stream) in enumerate(KERNELS):
                start = base + 4000 * i
                end = start + (6000 if stream == SIDE else 3000)
                f.write(f"{launch}\t{10 + i}\t{stream}\t{start}\t{end}\t1,1,1\t256,1,1\t{name}\n")
        f.write("300\t99\t7\t9000000\t9001000\t1,1,1\t32,1,1\tcopy_kernel\n")  # another launch: not a step


class TimelineReportTest(unittest.TestCase):
    def test_short_names_drop_namespaces_return_type_and_parameters(self):
        self.assertEqual(report.short_name(KERNELS[1][0]), "hc_mix_split_kernel<4, false, 16, true>")
        self.assertEqual(report.short_name(KERNELS[0][0]), "embed_kernel")

    def test_steps_are_the_largest_launches_averaged_node_by_node(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.tsv")
            write_trace(path)
            steps = report.steps_of(report.read(path))
            self.assertEqual(len(steps), 2)
            kernels = report.averaged(steps)
            self.assertEqual([k["start"] for k in kernels], [4.0 * i for i in range(11)])
            self.assertEqual(kernels[-1]["end"], 43.0)

    def test_tables(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.tsv")
            write_trace(path)
            out = subprocess.run([sys.executable, SCRIPT, path, "--layers", "0"], check=True, capture_output=True,
                                 text=True).stdout
        lines = out.splitlines()
        # Busy: the union of [0,3] [4,7] [8,11] [12,18] [16,19] [20,23] [24,27] [28,31] [32,35] [36,42] [40,43] = 35.
        self.assertIn("2 steps of 11 kernels; a step's kernels span 43.0 us (mean), busy 35.0, idle 8.0", lines)
        # Layer 0: kernels 1-5 (starts 4..20), up to kernel 6's start (24): span 20, busy 3 + 3 + 7 ([12, 19]) + 3.
        # Layer 1: kernels 6-9 up to kernel 10's start (40): span 16, busy 3 + 3 + 3 + 4 (the side kernel cut at 40).
        layer_rows = [l.split() for l in lines if l[:5].strip().isdigit() and len(l.split()) == 5]
        self.assertEqual(layer_rows[0], ["0", "20.0", "16.0", "4.0", "5"])
        self.assertEqual(layer_rows[1], ["1", "16.0", "13.0", "3.0", "4"])
        self.assertEqual(len(layer_rows), 2)  # the last pre-mix (the head's collapse) only ends layer 1
        detail = lines[lines.index(next(l for l in lines if l.startswith("layer 0:"))) + 1:]
        # In start order: kernel 1 after kernel 0's end (1 us idle), 2, the side kernel, kernel 4 while it still runs.
        self.assertEqual(detail[0].split()[:4], ["0.00", "3.00", "3.00", "1.00"])
        self.assertEqual(detail[2].split(), ["8.00", "14.00", "6.00", "1.00", "13", "1,1,1", "side_kernel"])
        self.assertEqual(detail[3].split()[:4], ["12.00", "15.00", "3.00", "0.00"])

    def test_layer_kinds_average_the_layers_with_the_same_kernels(self):
        def k(name, start, end):
            return {"short": name, "start": start, "end": end}
        # Layers 0 and 2 run a, b (b at +2 and +4 us into them, 1 and 3 us long); layer 1 runs a, c.
        kernels = [k("a", 0, 1), k("b", 2, 3), k("a", 10, 11), k("c", 11, 12), k("a", 20, 21), k("b", 24, 27)]
        layers, windows = [(0, 2), (2, 4), (4, 6)], [0, 10, 20]
        kinds = report.layer_kinds(kernels, layers, windows)
        self.assertEqual([members for members, _ in kinds], [[0, 2], [1]])
        rows = kinds[0][1]
        self.assertEqual([r["short"] for r in rows], ["a", "b"])
        self.assertEqual((rows[1]["start"], rows[1]["end"], rows[1]["duration"]), (3, 5, 2))

    def test_busy_time_is_the_union_of_the_intervals(self):
        self.assertEqual(report.busy_time([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (5.5, 5.7)]), 4.0)
        self.assertEqual(report.busy_time([]), 0.0)


if __name__ == "__main__":
    unittest.main()
