#!/usr/bin/env python
"""The A/B behind ``conv_nhwc.dwconv_staged`` and ``layout.staged_depthwise``: a depthwise
convolution alone in its channels-last region, run as that region's three kernels (transpose
to NHWC, ``dwconv_nhwc``, transpose back, each its own parallel region over whole tensors)
and as the staged kernel (bands of rows, 16 channels at a time, transposed into (rows, W, 16)
blocks in a worker's scratch, one parallel region), on the same NCHW tensors.

    python scripts/sweeps/sweep_dw_staged.py [--threads 1 2] [--calls 200] [--rounds 3]

The kernels are called directly (no model around them, so no per-call runtime cost on
either side), the two versions alternating round by round in this process (this VM's speed
drifts within seconds); the best round's mean per call is printed, and staged / region. The
region's transposes split over the threads from 2^17 elements, as the code generator's
(``lowerings/data._TRANSPOSE_PAR_ELEMS``); the staged kernel's channel blocks are the ones
``staged_blocks`` gives for the thread count.
"""
import argparse
import time

import numba
import numpy as np

from jitort.kernels.cpu import conv_nhwc as CN
from jitort.kernels.cpu import transpose as TR

#: (channels, input plane, kernel, stride): the op suite's depthwise layers that run
#: channels-last, and ConvNeXt-style 7x7 ones
CASES = [(240, 28, 3, 1), (240, 28, 5, 1), (240, 28, 3, 2), (240, 28, 5, 2), (480, 14, 3, 1),
         (480, 14, 5, 1), (480, 14, 3, 2), (480, 14, 5, 2), (960, 7, 3, 1), (960, 7, 5, 1),
         (960, 7, 5, 2), (384, 14, 7, 1), (768, 7, 7, 1), (144, 56, 3, 2), (144, 56, 5, 2)]
#: the code generator's threshold for splitting a transpose over the threads
_TRANSPOSE_PAR = 1 << 17


def _pair(c, h, k, s, threads):
    p = k // 2
    oh = (h + 2 * p - k) // s + 1
    rng = np.random.default_rng(c + h + k)
    x = rng.standard_normal((1, c, h, h)).astype(np.float32)
    wo = (rng.standard_normal((c, 1, k, k)) * 0.2).astype(np.float32)
    w4 = np.ascontiguousarray(wo.transpose(2, 3, 1, 0))
    b = rng.standard_normal(c).astype(np.float32)
    xn = np.empty((1, h, h, c), np.float32)
    yn = np.empty((1, oh, oh, c), np.float32)
    y_region = np.empty((1, c, oh, oh), np.float32)
    y_staged = np.empty((1, c, oh, oh), np.float32)
    par = threads > 1
    t_in = TR.transpose_last2_par if par and c * h * h >= _TRANSPOSE_PAR else TR.transpose_last2
    t_out = (TR.transpose_last2_par if par and c * oh * oh >= _TRANSPOSE_PAR
             else TR.transpose_last2)

    def region():
        t_in(x.reshape(1, c, h * h), xn.reshape(1, h * h, c))
        CN.dwconv_nhwc(xn, w4, b, yn, yn, s, s, p, p, 1, 1, True, False, 0, 0.0, 0.0)
        t_out(yn.reshape(1, oh * oh, c), y_region.reshape(1, c, oh * oh))

    blocks = CN.staged_blocks(c, oh * oh, threads)
    wb = CN.staged_weights(wo, blocks)
    scr = np.empty(CN.dw_staged_scratch_elems(h, k, s, oh, oh, threads),
                   np.float32)

    def staged():
        CN.dwconv_staged(x, wb, b, y_staged, y_staged, scr, s, s, p, p, True, False, 0, 0.0,
                         0.0)

    region()
    staged()
    np.testing.assert_allclose(y_staged, y_region, rtol=1e-5, atol=1e-5)
    return region, staged


def _mean_us(fn, calls):
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls * 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    for threads in a.threads:
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        ratios = []
        print(f"threads {threads}")
        for c, h, k, s in CASES:
            region, staged = _pair(c, h, k, s, threads)
            best = {"region": 1e18, "staged": 1e18}
            for _ in range(a.rounds):
                best["region"] = min(best["region"], _mean_us(region, a.calls))
                best["staged"] = min(best["staged"], _mean_us(staged, a.calls))
            r = best["staged"] / best["region"]
            ratios.append(r)
            print(f"  {c:4d}ch {h:3d}x{h:<3d} {k}x{k}/{s}  region {best['region']:8.1f} us  "
                  f"staged {best['staged']:8.1f} us  staged/region {r:5.2f}", flush=True)
        print(f"  geomean staged/region {np.exp(np.mean(np.log(ratios))):.2f} "
              f"(range {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
