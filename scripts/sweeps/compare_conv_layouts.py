#!/usr/bin/env python
"""Channels-last vs NCHW convolution kernels on a sweep of layer shapes (the rule behind
``jitort/passes/layout.py``'s MAX_PLANE): kernel time alone, 1 thread, best of 5x10 calls.

    NUMBA_NUM_THREADS=1 python scripts/sweeps/compare_conv_layouts.py

Prints nhwc/nchw per shape (depthwise and pointwise; planes 7-112, 8-960 channels).
"""
import numpy as np, time
from jitort.kernels.cpu.conv_nhwc import dwconv_nhwc, pwconv_nhwc
from jitort.kernels.cpu.conv import conv2d_bias_act, conv2d_scratch_elems
def tm(f, n=10):
    f(); best = 1e9
    for _ in range(5):
        t = time.thread_time()
        for _ in range(n): f()
        best = min(best, (time.thread_time() - t) / n)
    return best * 1e6
cases = [("dw", 96, 96, 56, 7, 1), ("dw", 144, 144, 56, 3, 1), ("dw", 192, 192, 28, 7, 1), ("dw", 64, 64, 112, 3, 1),
         ("dw", 96, 96, 112, 3, 2), ("dw", 144, 144, 56, 5, 2), ("dw", 64, 64, 56, 3, 1), ("dw", 240, 240, 28, 5, 1),
         ("pw", 64, 128, 56, 1, 1), ("pw", 96, 384, 56, 1, 1), ("pw", 384, 96, 56, 1, 1), ("pw", 128, 128, 28, 1, 1),
         ("pw", 192, 768, 28, 1, 1), ("pw", 64, 64, 56, 1, 1), ("pw", 144, 64, 56, 1, 1), ("pw", 240, 80, 28, 1, 1),
         ("dw", 8, 8, 112, 3, 1), ("dw", 24, 24, 112, 3, 1), ("dw", 36, 36, 56, 3, 1),
         ("dw", 60, 60, 28, 3, 1), ("dw", 120, 120, 28, 3, 1), ("dw", 240, 240, 28, 3, 2),
         ("dw", 40, 40, 14, 3, 1), ("dw", 240, 240, 14, 3, 1), ("dw", 672, 672, 14, 5, 2),
         ("dw", 480, 480, 7, 3, 1), ("pw", 16, 8, 112, 1, 1), ("pw", 72, 20, 28, 1, 1),
         ("pw", 240, 40, 14, 1, 1), ("pw", 672, 56, 14, 1, 1), ("pw", 160, 960, 7, 1, 1),
         ("pw", 960, 1280, 1, 1, 1),
         ]
for kind, C, M, H, k, s in cases:
    W = H; p = k // 2
    x = np.random.rand(1, C, H, W).astype(np.float32)
    if kind == "dw": w = np.random.rand(C, 1, k, k).astype(np.float32); grp = C
    else: w = np.random.rand(M, C, 1, 1).astype(np.float32); grp = 1; p = 0
    b = np.random.rand(M).astype(np.float32)
    OH = (H + 2 * p - k) // s + 1
    out = np.empty((1, M, OH, OH), np.float32)
    col = np.empty(max(1, conv2d_scratch_elems(C, k, k, OH, OH, grp, 1, M, [s, s], [1, 1], W)), np.float32)
    t1 = tm(lambda: conv2d_bias_act(x, w, b, out, col, s, s, p, p, 1, 1, grp, True, 1, 0.0, 0.0))
    xc = np.ascontiguousarray(x.transpose(0, 2, 3, 1)); wc = np.ascontiguousarray(w.transpose(2, 3, 1, 0)); oc = np.empty((1, OH, OH, M), np.float32)
    if kind == "dw": t2 = tm(lambda: dwconv_nhwc(xc, wc, b, oc, oc, s, s, p, p, 1, 1, True, False, 1, 0.0, 0.0))
    else: t2 = tm(lambda: pwconv_nhwc(xc, wc, b, oc, oc, True, False, 1, 0.0, 0.0))
    assert np.allclose(oc.transpose(0, 3, 1, 2), out, rtol=1e-3, atol=1e-2)
    print(f"{kind} C{C:4d} M{M:4d} {H:3d}x{W:<3d} k{k} s{s}: nchw {t1:8.1f} nhwc {t2:8.1f} us  nhwc/nchw {t2/t1:.2f}")
