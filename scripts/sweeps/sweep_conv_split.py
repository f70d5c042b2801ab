#!/usr/bin/env python
"""The shape sweep behind the convolutions' "split one plane's gemm over the threads from 4
MFLOP" rule (``kernels/cpu/conv.py`` ``_PAR_MIN_FLOPS_SPLIT``, ``kernels/cpu/conv_nhwc.py``
``_PAR_MIN_FLOPS``): each layer (one image, so fewer planes than threads) timed at 1 and at
2 Numba threads, alternating in one process; prints both times and 2-thread / 1-thread.

    python scripts/sweeps/sweep_conv_split.py [--reps 3]             # the rule as installed
    python scripts/sweeps/sweep_conv_split.py --split-from 1         # split from 1 MFLOP instead

Below the rule's threshold the installed kernels stay serial at 2 threads (ratio ~1);
``--split-from MFLOP`` compiles the two kernel modules into a throwaway cache with that
threshold instead, which shows what splitting those layers costs (a minute or two of
compilation first).
"""
import argparse
import os
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--split-from", type=float, default=None, metavar="MFLOP")
    args = ap.parse_args()
    if args.split_from is not None:  # before any kernel module is imported (and compiled)
        os.environ["JITORT_KERNEL_CACHE_DIR"] = tempfile.mkdtemp(prefix="jitort-sweep-")
    import numba
    import numpy as np

    from jitort.kernels.cpu import conv as CV
    from jitort.kernels.cpu import conv_nhwc as NH
    if args.split_from is not None:
        CV._PAR_MIN_FLOPS_SPLIT = NH._PAR_MIN_FLOPS = int(args.split_from * 1e6)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from compare_conv_implicit import _time

    rng = np.random.default_rng(0)
    rows = []
    # NCHW conv2d: 1x1 (C, M, H) and 3x3 stride 1 or 2 (C, M, H, stride)
    for c, m, h, k, s in ([(c, m, h, 1, 1) for m in (16, 64, 256) for c in (16, 64, 256)
                           for h in (13, 27, 54)]
                          + [(8, 16, 28, 3, 1), (16, 16, 28, 3, 1), (32, 32, 14, 3, 1),
                             (16, 32, 28, 3, 1), (64, 64, 7, 3, 1), (32, 64, 14, 3, 2),
                             (128, 128, 7, 3, 1), (256, 512, 14, 3, 2)]):
        p = k // 2
        oh = (h + 2 * p - k) // s + 1
        x = rng.standard_normal((1, c, h, h)).astype(np.float32)
        w = (rng.standard_normal((m, c, k, k)) * 0.05).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        out = np.empty((1, m, oh, oh), np.float32)
        col = np.empty(CV.conv2d_scratch_elems(c, k, k, oh, oh, 1, M=m, strides=(s, s), W=h),
                       np.float32)

        def f(x=x, w=w, b=b, out=out, col=col, s=s, p=p):
            CV.conv2d_bias_act(x, w, b, out, col, s, s, p, p, 1, 1, 1, True, 1, 0.0, 0.0)
        rows.append((2 * m * c * k * k * oh * oh, f"conv2d {k}x{k}/{s} {c}->{m} {h}x{h}", f))
    # channels-last pointwise: (C, M, H)
    for c, m, h in [(16, 72, 28), (72, 24, 28), (40, 120, 28), (120, 40, 28), (80, 200, 14),
                    (200, 80, 14), (160, 960, 7), (960, 160, 7), (24, 72, 56), (16, 48, 112)]:
        x = rng.standard_normal((1, h, h, c)).astype(np.float32)
        w = rng.standard_normal((1, 1, c, m)).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        out = np.empty((1, h, h, m), np.float32)

        def f(x=x, w=w, b=b, out=out):
            NH.pwconv_nhwc(x, w, b, out, out, True, False, 1, 0.0, 0.0)
        rows.append((2 * c * m * h * h, f"pwconv_nhwc {c}->{m} {h}x{h}", f))

    threads = min(2, numba.config.NUMBA_NUM_THREADS)
    for flops, name, f in sorted(rows, key=lambda r: r[0]):
        def at(n, f=f):
            return lambda: (numba.set_num_threads(n), f())
        t = _time({1: at(1), threads: at(threads)}, args.reps)
        print(f"{flops / 1e6:7.2f} MFLOP  {name:32s} 1 thread {t[1]:7.1f} us  {threads} threads "
              f"{t[threads]:7.1f} us  ratio {t[threads] / t[1]:4.2f}", flush=True)
    numba.set_num_threads(threads)


if __name__ == "__main__":
    main()
