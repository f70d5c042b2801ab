"""Device math helpers shared by the CUDA kernels and the generated elementwise kernels."""
import math

import numpy as np
from numba import cuda


@cuda.jit(device=True)
def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


@cuda.jit(device=True)
def gelu(x):
    return 0.5 * x * (1.0 + math.erf(x * 0.7071067811865476))


@cuda.jit(device=True)
def round_f16(x):
    """A float32 rounded to the nearest float16 (to nearest even), as a float32."""
    return np.float32(np.float16(x))


@cuda.jit(device=True)
def act(x, code, alpha, beta):
    """The epilogue activations, coded as in ``jitort.codegen.lowerings.ACT_CODES``: 1 relu,
    2 gelu (erf), 3 sigmoid, 4 tanh, 5 leaky relu (slope ``alpha``), 6 clip to
    [``alpha``, ``beta``]. NaN stays NaN."""
    if code == 1:
        return x if x > 0 else x * 0
    if code == 2:
        return gelu(x)
    if code == 3:
        return sigmoid(x)
    if code == 4:
        return math.tanh(x)
    if code == 5:
        return x if x >= 0 else alpha * x
    if code == 6:
        v = alpha if x < alpha else x
        return beta if v > beta else v
    return x


@cuda.jit(device=True)
def split2(i, a, b):
    """(i % a, i // a % b, i // a // b): the two innermost coordinates of the flat index i of
    a C-ordered (..., b, a) array, and the flat index of the rest."""
    q = i // a
    return i % a, q % b, q // b


def grid1(n: int, block: int) -> int:
    """Blocks for ``n`` threads (at least one: a launch with zero blocks is an error)."""
    return max(1, (n + block - 1) // block)
