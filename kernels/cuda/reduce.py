"""Reduce an (outer, r, inner) view over its middle axis: one block per output element.

Kinds match ``kernels/cpu/reduce.py``: 0 sum, 1 mean, 2 max, 3 min, 4 prod, 5 L1, 6 L2,
7 log-sum, 8 log-sum-exp, 9 sum of squares.
"""
import math

import numpy as np
from numba import cuda

from . import block
from .block import BLOCK, MAX, MIN, PROD, SUM
from .launch import launch


@cuda.jit(device=True)
def _op(kind):
    if kind == 2:
        return MAX
    if kind == 3:
        return MIN
    if kind == 4:
        return PROD
    return SUM


@cuda.jit(device=True)
def _pre(v, kind, m):
    if kind == 5:
        return abs(v)
    if kind == 6 or kind == 9:
        return v * v
    if kind == 8:
        return math.exp(v - m)
    return v


def _make(dt):
    # typed constants: an int or a float64 literal in the arithmetic would promote it
    zero, one, ninf, pinf = dt(0), dt(1), dt(-math.inf), dt(math.inf)

    @cuda.jit
    def kern(x, xo, y, yo, r, inner, kind):
        buf = cuda.shared.array(BLOCK, dtype=dt)
        o = cuda.blockIdx.x
        base = block.row_base(inner, r)
        t = cuda.threadIdx.x
        m = zero
        if kind == 8:  # log-sum-exp: subtract the max first
            m = ninf
            for q in range(t, r, BLOCK):
                m = block.combine(m, x[xo + base + q * inner], MAX)
            m = block.reduce(buf, m, MAX)
        op = _op(kind)
        acc = one if op == PROD else (ninf if op == MAX else (pinf if op == MIN else zero))
        for q in range(t, r, BLOCK):
            acc = block.combine(acc, _pre(x[xo + base + q * inner], kind, m), op)
        acc = block.reduce(buf, acc, op)
        if t == 0:
            if kind == 1:
                acc = acc / dt(r)
            elif kind == 6:
                acc = math.sqrt(acc)
            elif kind == 7:
                acc = math.log(acc)
            elif kind == 8:
                acc = math.log(acc) + m
            y[yo + o] = acc
    return kern


_KERNELS = {np.dtype(t): _make(t) for t in (np.float32, np.float64)}


def reduce3d(x, xo, y, yo, outer, r, inner, kind):
    if outer * inner:
        launch(_KERNELS[y.dtype], outer * inner, BLOCK, x, xo, y, yo, r, inner, kind)
