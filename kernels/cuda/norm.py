"""LayerNormalization (block per row, two block reductions) and inference BatchNormalization."""
import math

import numpy as np
from numba import cuda

from . import block
from .block import BLOCK, SUM
from .launch import launch
from .mathfn import grid1


def _make_ln(dt):
    @cuda.jit
    def kern(x, xo, sc, so, b, bo, y, yo, inner, eps, has_bias):
        buf = cuda.shared.array(BLOCK, dtype=dt)
        base = cuda.blockIdx.x * inner
        t = cuda.threadIdx.x
        zero, n = dt(0), dt(inner)  # typed: an int in the arithmetic would promote it
        s = zero
        for r in range(t, inner, BLOCK):
            s += x[xo + base + r]
        mean = block.reduce(buf, s, SUM) / n
        s = zero
        for r in range(t, inner, BLOCK):
            d = x[xo + base + r] - mean
            s += d * d
        inv = dt(1) / math.sqrt(block.reduce(buf, s, SUM) / n + eps)
        for r in range(t, inner, BLOCK):
            v = (x[xo + base + r] - mean) * inv * sc[so + r]
            y[yo + base + r] = v + b[bo + r] if has_bias else v
    return kern


_LN = {np.dtype(t): _make_ln(t) for t in (np.float32, np.float64)}


def layernorm2d(x, xo, scale, so, bias, bo, y, yo, outer, inner, eps, has_bias):
    """Normalize each of ``outer`` rows of ``inner`` elements; scale/bias have ``inner``."""
    if outer * inner:
        launch(_LN[y.dtype], outer, BLOCK, x, xo, scale, so, bias, bo, y, yo, inner,
               y.dtype.type(eps), has_bias)


@cuda.jit
def _bn_k(x, xo, sc, so, b, bo, mu, mo, var, vo, y, yo, c, inner, total, eps):
    i = cuda.grid(1)
    if i >= total:
        return
    ch = (i // inner) % c
    inv = sc[so + ch] / math.sqrt(var[vo + ch] + eps)
    y[yo + i] = (x[xo + i] - mu[mo + ch]) * inv + b[bo + ch]


def batchnorm3d(x, xo, scale, so, bias, bo, mean, mo, var, vo, y, yo, n, c, inner, eps):
    total = n * c * inner
    if total:
        launch(_bn_k, grid1(total, 128), 128, x, xo, scale, so, bias, bo, mean, mo, var, vo, y, yo,
               c, inner, total, y.dtype.type(eps))
