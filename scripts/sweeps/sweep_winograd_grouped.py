#!/usr/bin/env python
"""The shape sweep behind ``winograd.winograd_grouped_wins``: grouped 3x3 stride-1
convolutions, Winograd with its gemms per group against the kernels the lowering would take
otherwise (``conv_group`` / im2col), each against onnxruntime.

    python scripts/sweeps/sweep_winograd_grouped.py [--threads 1] [--runs 150]

Each side runs in its own process (the rule forced on, then off, by replacing
``winograd_grouped_wins``), one-node Conv + Relu models from ``compare_conv_shapes.one_conv``
timed by ``compare_conv_shapes.time_conv`` (calls alternating with onnxruntime's); prints
both ratios to onnxruntime per shape and what the rule picks. 8-128 channels per group on
10x10-56x56 planes.
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # scripts/: compare_model, compare_conv_shapes

CASES = [(cg, c, h) for cg in (8, 16, 32, 64, 128)
         for h, c in ((56, 128), (28, 256), (14, 512), (10, 512)) if c // cg >= 2]


def child(force, threads, runs):
    os.environ["JITORT_TUNE"] = "0"   # the fixed rules around the forced one, not calibration
    import jitort.kernels.cpu.winograd as W
    from compare_conv_shapes import one_conv, time_conv
    W.winograd_grouped_wins = (lambda *a: True) if force == "on" else (lambda *a: False)
    for cg, c, h in CASES:
        tj, to, _ = time_conv(one_conv((1, c, h, h), (c, cg, 3, 3), (1, 1), (1, 1, 1, 1),
                                       c // cg, (1, 1), 1), (1, c, h, h), threads, runs, 1e-3)
        print(f"{tj / to:.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=150)
    ap.add_argument("--child", choices=["on", "off"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.threads, a.runs)
        return
    from jitort.kernels.cpu.winograd import winograd_grouped_wins, winograd_wins
    got = {}
    for side in ("off", "on"):
        out = subprocess.run([sys.executable, __file__, "--child", side, "--threads",
                              str(a.threads), "--runs", str(a.runs)], capture_output=True,
                             text=True, check=True).stdout.split()
        got[side] = [float(v) for v in out]
    print("channels/group  channels  plane   other/ort  winograd/ort  rule")
    for (cg, c, h), off, on in zip(CASES, got["off"], got["on"]):
        pick = winograd_wins(cg, cg, h, h) and winograd_grouped_wins(cg, cg, h, h)
        print(f"{cg:14d}  {c:8d}  {h:2d}x{h:<2d}  {off:9.2f}  {on:12.2f}  "
              f"{'winograd' if pick else 'other'}")


if __name__ == "__main__":
    main()
