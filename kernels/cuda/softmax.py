"""Softmax / LogSoftmax over the middle axis of an (outer, axis, inner) view: one block per row."""
import math

import numpy as np
from numba import cuda

from . import block
from .block import BLOCK, MAX, SUM
from .launch import launch


def _make(dt):
    zero, ninf = dt(0), dt(-math.inf)  # typed: a float64 literal would promote the arithmetic

    @cuda.jit
    def kern(x, xo, y, yo, a, inner, log):
        buf = cuda.shared.array(BLOCK, dtype=dt)
        base = block.row_base(inner, a)
        t = cuda.threadIdx.x
        m = ninf
        for r in range(t, a, BLOCK):
            m = block.combine(m, x[xo + base + r * inner], MAX)
        m = block.reduce(buf, m, MAX)
        s = zero
        for r in range(t, a, BLOCK):
            s += math.exp(x[xo + base + r * inner] - m)
        s = block.reduce(buf, s, SUM)
        for r in range(t, a, BLOCK):
            v = x[xo + base + r * inner] - m
            y[yo + base + r * inner] = v - math.log(s) if log else math.exp(v) / s
    return kern


_KERNELS = {np.dtype(t): _make(t) for t in (np.float32, np.float64)}


def softmax3d(x, xo, y, yo, outer, a, inner):
    if outer * a * inner:
        launch(_KERNELS[y.dtype], outer * inner, BLOCK, x, xo, y, yo, a, inner, False)


def logsoftmax3d(x, xo, y, yo, outer, a, inner):
    if outer * a * inner:
        launch(_KERNELS[y.dtype], outer * inner, BLOCK, x, xo, y, yo, a, inner, True)
