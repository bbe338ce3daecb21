#!/usr/bin/env python3
"""tools/timeline_report.py on a hand-made trace whose tables are worked out by hand below: two replays of one graph
of 11 kernels, 3 us each, one every 4 us, on two streams (the second replay 4 ms later, so averaging must align the
nodes, not the clock); kernel 1 and every later pre-mix (`hc_mix`) on the main stream cut the layers."""
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
                f.write(f"{launch}\t{10 + i}\t{stream}\t{start}\t{start + 3000}\t1,1,1\t256,1,1\t{name}\n")
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
        self.assertIn("2 steps of 11 kernels; a step's kernels span 43.0 us (mean)", lines)
        self.assertIn("  lane 0 (stream 7): 9 kernels, busy 27.0 us", lines)
        self.assertIn("  lane 1 (stream 13): 2 kernels, busy 6.0 us", lines)
        # Layer 0: kernels 1-5 (starts 4..20), up to kernel 6's start (24): span 20; main kernels 1, 2, 4, 5 busy
        # 12; main idle 1 (before 2) + 5 (before 4: the side kernel ran on the other lane) + 1 (before 5) + 1 (to 24).
        layer_rows = [l.split() for l in lines if l[:5].strip().isdigit() and len(l.split()) == 5]
        self.assertEqual(layer_rows[0], ["0", "20.0", "12.0", "8.0", "5"])
        self.assertEqual(layer_rows[1], ["1", "16.0", "9.0", "7.0", "4"])
        detail = lines[lines.index(next(l for l in lines if l.startswith("layer 0:"))) + 1:]
        self.assertEqual(detail[2].split(), ["1", "8.00", "3.00", "0.00", "1,1,1", "side_kernel"])


if __name__ == "__main__":
    unittest.main()
