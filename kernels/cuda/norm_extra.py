"""InstanceNormalization (a block per (n, c) row, two block reductions) and LRN (a thread per
output), so that models using them (decoders, AlexNet-style nets) stay on the GPU.

InstanceNormalization is ``norm.layernorm2d`` with per-channel rather than per-element scale
and bias: a block sums its row through shared memory (``block.reduce``, no warp shuffles: the
simulator lacks them), then sums the squared deviations from the mean (two passes, as the
layernorm kernel, for the accuracy of the variance). LRN sums the squares over a window of
channels around each element's channel; the window is ONNX's
``[c - (size - 1) // 2, c + size // 2]`` clipped to the channels, as the CPU kernel's.
"""
import math

import numpy as np
from numba import cuda

from . import block
from .block import BLOCK, SUM
from .launch import launch
from .mathfn import grid1

#: Threads per block of the LRN kernel.
LRN_BLOCK = 128


def _make_in(dt):
    @cuda.jit
    def kern(x, xo, sc, so, b, bo, y, yo, c, inner, eps):
        buf = cuda.shared.array(BLOCK, dtype=dt)
        row = cuda.blockIdx.x
        base = row * inner
        ch = row % c
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
        a = sc[so + ch] / math.sqrt(block.reduce(buf, s, SUM) / n + eps)
        sh = b[bo + ch]
        for r in range(t, inner, BLOCK):
            y[yo + base + r] = (x[xo + base + r] - mean) * a + sh
    return kern


_IN = {np.dtype(t): _make_in(t) for t in (np.float32, np.float64)}


def instancenorm3d(x, xo, scale, so, bias, bo, y, yo, n, c, inner, eps):
    """Normalize each (n, c) row of ``inner`` elements of an (N, C, inner) tensor; ``scale``
    and ``bias`` have C elements."""
    if n * c * inner:
        launch(_IN[y.dtype], n * c, BLOCK, x, xo, scale, so, bias, bo, y, yo, c, inner,
               y.dtype.type(eps))


@cuda.jit
def _lrn_k(x, xo, y, yo, c, inner, size, coef, beta, bias, total):
    i = cuda.grid(1)
    if i >= total:
        return
    s = i % inner
    ch = (i // inner) % c
    base = xo + (i // inner // c) * c * inner + s
    # the window clipped to the channels (no builtin min/max: Numba's CUDA target lacks them)
    lo = ch - (size - 1) // 2
    if lo < 0:
        lo = 0
    hi = ch + size // 2
    if hi > c - 1:
        hi = c - 1
    acc = bias - bias  # a zero of the value type (bias is finite, passed typed)
    for cc in range(lo, hi + 1):
        e = x[base + cc * inner]
        acc += e * e
    y[yo + i] = x[xo + i] / (bias + coef * acc) ** beta


def lrn3d(x, xo, y, yo, n, c, inner, size, alpha, beta, bias):
    """ONNX LRN over the channels of an (N, C, inner) tensor:
    ``y = x / (bias + alpha / size * sum_window x**2) ** beta``."""
    total = n * c * inner
    if total:
        dt = y.dtype.type
        launch(_lrn_k, grid1(total, LRN_BLOCK), LRN_BLOCK, x, xo, y, yo, c, inner, size,
               dt(alpha / size), dt(beta), dt(bias), total)
