"""Device math helpers shared by the CUDA kernels and the generated elementwise kernels."""
import math

import numpy as np
from numba import cuda


def activations(ft):
    """``(sigmoid, gelu, act)`` computing in the float type ``ft``: their constants are of that
    type, so float32 math stays float32 on the device (a float64 literal would promote it, and
    erf or exp would run in double).

    ``act`` applies the epilogue activations, coded as in
    ``jitort.codegen.lowerings.ACT_CODES``: 1 relu, 2 gelu (erf), 3 sigmoid, 4 tanh, 5 leaky
    relu (slope ``alpha``), 6 clip to [``alpha``, ``beta``], 7 swish ``x * sigmoid(alpha * x)``
    (SiLU at ``alpha`` = 1), 8 hard sigmoid ``clip(alpha * x + beta, 0, 1)``, 9 hard swish
    ``x * clip(x / 6 + 1 / 2, 0, 1)``, 10 GELU's tanh approximation. NaN stays NaN."""
    zero, half, one = ft(0.0), ft(0.5), ft(1.0)
    rsqrt2, sixth = ft(0.7071067811865476), ft(1.0 / 6.0)
    s2pi, cubic = ft(0.7978845608028654), ft(0.044715)

    @cuda.jit(device=True)
    def sigmoid(x):
        return one / (one + math.exp(-x))

    @cuda.jit(device=True)
    def gelu(x):
        return half * x * (one + math.erf(x * rsqrt2))

    @cuda.jit(device=True)
    def act(x, code, alpha, beta):
        if code == 1:  # NaN stays NaN, -inf gives 0
            return x if (x > zero or x != x) else zero
        if code == 2:
            return gelu(x)
        if code == 3:
            return sigmoid(x)
        if code == 4:
            return math.tanh(x)
        if code == 5:
            return x if x >= zero else alpha * x
        if code == 6:
            v = alpha if x < alpha else x
            return beta if v > beta else v
        if code == 7:
            return x * sigmoid(alpha * x)
        if code == 8 or code == 9:
            h = (sixth * x + half) if code == 9 else (alpha * x + beta)
            h = zero if h < zero else h  # NaN passes both tests: stays NaN
            h = one if h > one else h
            return x * h if code == 9 else h
        if code == 10:
            return half * x * (one + math.tanh(s2pi * (x + cubic * x * x * x)))
        return x

    return sigmoid, gelu, act


def compute_type(dtype):
    """The scalar type a kernel of ``dtype`` values computes and takes its scalars in: float32
    for float16 (as cuBLAS's float16 GEMMs with float32 compute), else the dtype."""
    return np.float32 if np.dtype(dtype) == np.float16 else np.dtype(dtype).type


sigmoid32, _, _act32 = activations(np.float32)  # sigmoid32: the float32 elementwise Sigmoid
_ACT = {np.dtype(np.float32): _act32, np.dtype(np.float64): activations(np.float64)[2]}


def act_for(dtype):
    """The ``act`` of ``compute_type(dtype)``."""
    return _ACT[np.dtype(compute_type(dtype))]


@cuda.jit(device=True)
def round_f16(x):
    """A float32 rounded to the nearest float16 (to nearest even), as a float32."""
    return np.float32(np.float16(x))


@cuda.jit(device=True)
def split2(i, a, b):
    """(i % a, i // a % b, i // a // b): the two innermost coordinates of the flat index i of
    a C-ordered (..., b, a) array, and the flat index of the rest."""
    q = i // a
    return i % a, q % b, q // b


@cuda.jit(device=True)
def conv_position(i, ow, oh, kout, c, group):
    """(ox, oy, k, n, cg, kg) of flat output element ``i`` of an NCHW convolution's
    (N, KOUT, OH, OW) output: its column, row, channel and image, then the input and output
    channels per group."""
    ox, oy, rr = split2(i, ow, oh)
    return ox, oy, rr % kout, rr // kout, c // group, kout // group


def grid1(n: int, block: int) -> int:
    """Blocks for ``n`` threads (at least one: a launch with zero blocks is an error)."""
    return max(1, (n + block - 1) // block)
