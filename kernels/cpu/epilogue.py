"""Fused epilogues (bias add, residual add, activation) applied in place to 2-D blocks.

Activation codes (shared by gemm and conv kernels):
    ACT_NONE = 0, ACT_RELU = 1, ACT_GELU = 2 (erf form), ACT_SIGMOID = 3, ACT_TANH = 4,
    ACT_LEAKY_RELU = 5 (slope ``alpha``), ACT_CLIP = 6 (``alpha`` = min, ``beta`` = max),
    ACT_SWISH = 7 (``x * sigmoid(alpha * x)``; SiLU at ``alpha`` = 1),
    ACT_HARD_SIGMOID = 8 (``clip(alpha * x + beta, 0, 1)``), ACT_HARD_SWISH = 9
    (``x * clip(x / 6 + 1 / 2, 0, 1)``), ACT_GELU_TANH = 10 (GELU's tanh approximation,
    ``x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))``).
NaN inputs stay NaN for every activation (as in ONNX Relu/Clip/...).
Arrays are C-contiguous float32 or float64; scalars ``alpha``/``beta`` are converted to the
array dtype.
"""
from numba import njit

from .mathfn import ferf, fsigmoid, ftanh, wide_vectors

ACT_NONE = 0
ACT_RELU = 1
ACT_GELU = 2
ACT_SIGMOID = 3
ACT_TANH = 4
ACT_LEAKY_RELU = 5
ACT_CLIP = 6
ACT_SWISH = 7
ACT_HARD_SIGMOID = 8
ACT_HARD_SWISH = 9
ACT_GELU_TANH = 10
NUM_ACTS = 11


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def act_row(row, act, alpha, beta):
    """Apply activation ``act`` in place to the 1-D contiguous array ``row``."""
    wide_vectors()
    n = row.shape[0]
    t = row.dtype.type
    zero = t(0.0)
    if act == ACT_RELU:
        for j in range(n):
            v = row[j]
            row[j] = zero if v < zero else v
    elif act == ACT_GELU:
        half = t(0.5)
        one = t(1.0)
        rs2 = t(0.7071067811865476)
        for j in range(n):
            v = row[j]
            row[j] = half * v * (one + ferf(v * rs2))
    elif act == ACT_SIGMOID:
        for j in range(n):
            row[j] = fsigmoid(row[j])
    elif act == ACT_TANH:
        for j in range(n):
            row[j] = ftanh(row[j])
    elif act == ACT_LEAKY_RELU:
        a = t(alpha)
        for j in range(n):
            v = row[j]
            row[j] = v * a if v < zero else v
    elif act == ACT_CLIP:
        lo = t(alpha)
        hi = t(beta)
        for j in range(n):
            v = row[j]
            v = lo if v < lo else v
            row[j] = hi if v > hi else v
    elif act == ACT_SWISH:
        a = t(alpha)
        for j in range(n):
            v = row[j]
            row[j] = v * fsigmoid(a * v)
    elif act == ACT_HARD_SIGMOID or act == ACT_HARD_SWISH:
        swish = act == ACT_HARD_SWISH
        a = t(1.0 / 6.0) if swish else t(alpha)
        b = t(0.5) if swish else t(beta)
        one = t(1.0)
        for j in range(n):
            v = row[j]
            h = a * v + b
            h = zero if h < zero else h   # NaN passes both tests: stays NaN
            h = one if h > one else h
            row[j] = v * h if swish else h
    elif act == ACT_GELU_TANH:
        half = t(0.5)
        one = t(1.0)
        s2pi = t(0.7978845608028654)
        c = t(0.044715)
        for j in range(n):
            v = row[j]
            row[j] = half * v * (one + ftanh(s2pi * (v + c * v * v * v)))
