#!/usr/bin/env python
"""The shape sweep behind ``conv_cvec.cvec_wins``: group-1 convolutions on 7x7-56x56 output
planes (1x1, 3x3 stride 1 and 2, 1x7 / 7x1, 5x5), the channels-across-lanes implicit gemm
(``conv2d_cvec``) against the kernel the lowering takes otherwise (im2col / pointwise BLAS,
Winograd, the implicit gemm), each against onnxruntime in the same process.

    python scripts/sweeps/sweep_conv_cvec.py [--threads 1] [--runs 100] [--only "h <= 14"]

Per shape, three one-node Conv + Relu models run alternating call by call (jitort with the rule
forced off, forced on -- by replacing ``cvec_wins`` while the model is planned -- and
onnxruntime); prints both ratios to onnxruntime and what the rule picks.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # scripts/: compare_model, compare_conv_shapes

# (C, M, kernel (kh, kw), stride, output plane): the families of the deep stages of CNNs
CASES = (
    [(c, m, (1, 1), 1, h) for h, pairs in (
        (7, ((512, 2048), (2048, 512), (160, 960), (960, 160), (1024, 128), (128, 32))),
        (13, ((512, 1000), (384, 64), (64, 256))),
        (14, ((256, 1024), (1024, 256), (512, 128), (96, 576), (576, 96))),
        (28, ((128, 512), (512, 128), (256, 64), (40, 240))),
        (56, ((64, 256), (256, 64))))
     for c, m in pairs]
    + [(c, c, (3, 3), 1, h) for h, cs in ((7, (512, 256, 128)), (14, (256, 128)),
                                            (28, (128, 64)), (56, (64,))) for c in cs]
    + [(128, 32, (3, 3), 1, 7), (128, 32, (3, 3), 1, 14)]
    + [(c, 2 * c, (3, 3), 2, h) for c, h in ((256, 7), (128, 14), (64, 28), (32, 56))]
    + [(c, c, (3, 3), 2, h) for c, h in ((512, 7), (256, 14), (128, 28))]
    + [(768, 192, (1, 7), 1, 17), (192, 192, (7, 1), 1, 17), (160, 192, (1, 7), 1, 17)]
    + [(64, 96, (5, 5), 1, 14), (192, 192, (5, 5), 1, 7), (16, 48, (5, 5), 1, 14),
       (32, 96, (5, 5), 1, 28), (24, 64, (5, 5), 1, 56)]
    + [(64, 128, (3, 3), 2, 56), (24, 40, (3, 3), 2, 56), (48, 64, (3, 3), 2, 28)]
    # stems and few-channel layers (the implicit gemm's domain), squeezenet's expand layers
    + [(3, m, (3, 3), 2, h) for m in (16, 24, 32, 48, 64) for h in (112, 128)]
    + [(3, 64, (7, 7), 2, 112), (3, 32, (5, 5), 2, 112), (16, 64, (3, 3), 1, 56),
       (16, 48, (3, 3), 1, 56), (8, 32, (3, 3), 1, 56), (8, 24, (3, 3), 1, 112),
       (32, 128, (3, 3), 1, 28), (48, 192, (3, 3), 1, 14), (64, 256, (3, 3), 1, 14)]
    + [(c, m, (1, 1), 1, h) for c, m, h in ((128, 512, 14), (256, 256, 28),
                                           (64, 256, 28), (192, 64, 28))]
    # grouped 3x3 (a 6th field: the group count): ResNeXt's 32 channels per group, RegNet-like
    # widths of 8-24, and 64-128 per group
    + [(c, c, (3, 3), s, h, c // 32) for c, h in ((128, 28), (256, 14), (512, 7))
       for s in (1, 2)]
    + [(c, c, (3, 3), s, h, c // cg) for c, cg, s, h in (
        (64, 8, 2, 28), (128, 8, 1, 14), (128, 16, 1, 56), (128, 16, 2, 28), (240, 24, 1, 14),
        (240, 24, 2, 7), (256, 64, 1, 28), (512, 128, 1, 14), (256, 128, 2, 14),
        (128, 8, 1, 56), (256, 8, 1, 28), (512, 8, 1, 14), (1024, 8, 1, 7), (128, 8, 2, 28),
        (256, 8, 2, 14), (512, 8, 2, 7), (1024, 16, 1, 7), (512, 16, 2, 7))]
)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--only", default=None, help="expression over c, m, k, s, h, g")
    a = ap.parse_args()
    # the shape rule is what this sweep forces: this machine's conv.algorithm decisions
    # (jitort tune) would override it
    os.environ["JITORT_TUNE"] = "0"
    import jitort
    import jitort.kernels.cpu.conv_cvec as CV
    import jitort.kernels.cpu.conv_implicit as CI
    from compare_conv_shapes import one_conv
    from compare_model import ort_session
    from jitort.kernels.cpu.winograd import winograd_grouped_wins, winograd_wins
    rule, implicit = CV.cvec_wins, CI.implicit_wins
    print(f"{a.threads} thread(s); ratios are medians of {a.runs} alternating calls")
    print("   C     M  groups kernel s  plane     other/ort  cvec/ort  rule")
    for case in CASES:
        c, m, k, s, h = case[:5]
        g = case[5] if len(case) > 5 else 1
        if a.only and not eval(a.only, {"c": c, "m": m, "k": k, "s": s, "h": h, "g": g}):
            continue
        ih = h * s
        pads = (k[0] // 2, k[1] // 2) * 2
        xs = (1, c, ih, ih)
        model = one_conv(xs, (m, c // g) + k, (s, s), pads, g, (1, 1), 1)
        feeds = {"x": np.random.default_rng(0).standard_normal(xs).astype(np.float32)}
        sess = ort_session(model.SerializeToString(), a.threads)
        want = sess.run(None, feeds)[0]
        runs = []
        for force in (False, True):
            CV.cvec_wins = lambda *args, _f=force, **kw: _f
            cm = jitort.compile(model, threads=a.threads, tiered=False)
            np.testing.assert_allclose(cm.run(None, feeds)[0], want, rtol=1e-3, atol=1e-3)
            runs.append(lambda cm=cm: cm.run(None, feeds))
        CV.cvec_wins = rule
        runs.append(lambda: sess.run(None, feeds))
        t = [[] for _ in runs]
        for i in range(a.runs + 10):
            for j, f in enumerate(runs):
                t0 = time.perf_counter()
                f()
                if i >= 10:
                    t[j].append(time.perf_counter() - t0)
        off, on, ort = (float(np.median(v)) for v in t)
        kh, kw = k
        cg, mg = c // g, m // g
        wino = (k == (3, 3) and s == 1 and winograd_wins(cg, mg, h, h)
                and (g == 1 or winograd_grouped_wins(cg, mg, h, h)))
        imp = g == 1 and implicit(c, kh, kw, h, h, winograd_alt=wino)
        pick = ("cvec" if rule(c, m, kh, kw, h, h, s, s, winograd_alt=wino, implicit_alt=imp,
                               group=g)
                else "implicit" if imp else "winograd" if wino else "other")
        print(f"{c:4d}  {m:4d}  {g:3d}  {kh}x{kw}    {s}  {h:3d}x{h:<3d} {off / ort:9.2f}  "
              f"{on / ort:8.2f}  {pick}", flush=True)


if __name__ == "__main__":
    main()
