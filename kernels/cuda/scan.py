"""Scans: CumSum over the middle axis of an (outer, axis, inner) view.

One thread per (outer, inner) line walks the axis in order, accumulating in the data's dtype
as onnxruntime does (and the CPU kernel, ``kernels/cpu/scan.py``). A line per thread is simple
and exact; neighbouring threads read neighbouring ``inner`` elements, so the loads coalesce
whenever the scanned axis is not the last. It runs on the device so that a GPU model with a
CumSum (a RoBERTa export's position ids) needs no copy to the host and back.
"""
import numpy as np
from numba import cuda

from .launch import launch
from .mathfn import grid1

BLOCK = 128


def _make(dt):
    @cuda.jit
    def kern(x, xo, y, yo, a, inner, lines, exclusive, reverse):
        t = cuda.grid(1)
        if t >= lines:
            return
        o = t // inner
        base = o * a * inner + (t - o * inner)
        acc = dt(0)
        for k in range(a):
            p = base + ((a - 1 - k) if reverse else k) * inner
            v = x[xo + p]
            if exclusive:
                y[yo + p] = acc
                acc += v
            else:
                acc += v
                y[yo + p] = acc
    return kern


_KERNELS = {np.dtype(t): _make(t) for t in (np.float32, np.float64, np.int32, np.int64)}


def cumsum3(x, xo, y, yo, outer, a, inner, exclusive, reverse):
    """``y`` = the running sum of ``x`` along the middle axis of (outer, a, inner) views:
    each element's sum includes it (``exclusive`` 0) or stops before it (1); it runs from
    the axis' start (``reverse`` 0) or from its end (1). float32, float64, int32 or int64."""
    lines = outer * inner
    if lines * a:
        launch(_KERNELS[y.dtype], grid1(lines, BLOCK), BLOCK, x, xo, y, yo, a, inner, lines,
               exclusive, reverse)
