#!/usr/bin/env python
"""The shape sweep behind ``kernels/cpu/conv_group.py``'s rule (``grouped_wins``): grouped 3x3
convolutions over channels per group x output plane x stride, each timed with conv.py's NCHW
im2col kernel (``conv2d_bias_act``) and with ``conv2d_grouped``, alternating in one process,
outputs compared; prints both times, grouped / im2col and the rule's choice.

    python scripts/sweeps/sweep_conv_group.py [--threads 1] [--reps 3]

A row where the rule picks the slower kernel by more than 10 % is marked ``<-``.
"""
import argparse
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    import numba
    import numpy as np

    from jitort.kernels.cpu import conv as CV
    from jitort.kernels.cpu import conv_group as CG
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from compare_conv_implicit import _time
    numba.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    # (channels in = out, channels per group, output plane, stride): ResNeXt / RegNet stages
    cases = [(c, cg, oh, s) for cg in (4, 8, 16, 24, 32, 64) for oh, s, c in
             ((7, 1, 512), (7, 2, 512), (8, 1, 256), (14, 1, 256), (14, 2, 256), (28, 1, 128))]
    print(f"{'layer':40s} {'im2col us':>10s} {'grouped us':>10s} {'ratio':>6s}  rule")
    ratios = {True: [], False: []}
    for c, cg, oh, s in cases:
        c = c // cg * cg
        g = c // cg
        h = oh * s
        x = rng.standard_normal((1, c, h, h)).astype(np.float32)
        w = (rng.standard_normal((c, cg, 3, 3)) * 0.1).astype(np.float32)
        b = rng.standard_normal(c).astype(np.float32)
        y1 = np.empty((1, c, oh, oh), np.float32)
        y2 = np.empty_like(y1)
        col = np.empty(CV.conv2d_scratch_elems(c, 3, 3, oh, oh, g, threads=args.threads, M=c,
                                               strides=(s, s), W=h), np.float32)
        scr = np.empty(CG.grouped_scratch_elems(c, h, h, 3, 3, oh, oh, c, g, args.threads),
                       np.float32)
        wp = CG.pack_weights(w, g)
        runs = {
            "im2col": lambda: CV.conv2d_bias_act(x, w, b, y1, col, s, s, 1, 1, 1, 1, g, True,
                                                 1, 0.0, 0.0),
            "grouped": lambda: CG.conv2d_grouped(x, wp, 3, 3, b, y2, y2, scr, s, s, 1, 1, 1, 1,
                                                 g, True, False, 1, 0.0, 0.0),
        }
        t = _time(runs, args.reps)
        np.testing.assert_allclose(y2, y1, rtol=1e-4, atol=1e-4)
        r = t["grouped"] / t["im2col"]
        pick = CG.grouped_wins(c, c, oh, oh, g)
        ratios[pick].append(r)
        wrong = (pick and r > 1.1) or (not pick and r < 0.9)
        print(f"{c:4d} in {g:3d} groups of {cg:2d}, 3x3/{s} -> {oh:2d}x{oh:<2d}       "
              f"{t['im2col']:10.1f} {t['grouped']:10.1f} {r:6.2f}  "
              f"{'grouped' if pick else 'im2col'}{'  <-' if wrong else ''}", flush=True)
    for pick, rs in ratios.items():
        if rs:
            print(f"rule picks {'grouped' if pick else 'im2col'}: {len(rs)} layers, grouped / "
                  f"im2col geomean {float(np.exp(np.mean(np.log(rs)))):.2f}, "
                  f"range {min(rs):.2f}-{max(rs):.2f}")


if __name__ == "__main__":
    main()
