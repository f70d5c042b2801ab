"""2-D convolution (ONNX Conv, NCHW), optionally fused with bias, residual add, activation.

Layouts (all C-contiguous, float32 or float64, one dtype per call):
    x   (N, C, H, W)
    w   (M, C // group, KH, KW)
    b   (M,)                       used only when has_bias (else any 1-D dummy)
    res (N, M, OH, OW)             residual added before the activation (``*_add_act``)
    out (N, M, OH, OW)             preallocated; OH/OW come from the ONNX formulas
    col 1-D scratch, same dtype, >= conv2d_scratch_elems(C, KH, KW, OH, OW, group) elems
Begin pads are ``ph``/``pw``; end pads are implied by OH/OW: any input position outside
[0, H) x [0, W) reads as zero. Strides ``sh``/``sw`` >= 1, dilations ``dh``/``dw`` >= 1.

Paths:
* depthwise (group == C == M): direct kernel per (image, channel) plane on a zero-padded
  copy of the plane (no boundary tests in the inner loops; 3x3 unrolled), bias fused,
  ``prange`` over planes when big.
* pointwise (1x1, stride 1, no pad, OH == H, OW == W): BLAS gemm straight on the input,
  in column blocks of the spatial axis.
* otherwise: tasks (image, group, block of output rows); each does im2col of its rows into a
  per-worker slice of ``col`` (sized to stay in L2) and one BLAS gemm that writes the block
  in place in ``out`` (leading dimension OH*OW, see ``gemm.xgemm``).
Tasks are spread over ``prange`` workers (each with its own scratch slice) when the
convolution is big enough; bias / residual / activation are applied to each block right
after its gemm, while it is in cache. Activation codes are those of ``epilogue`` (0 none,
1 relu, 2 gelu, 3 sigmoid, 4 tanh, 5 leaky_relu(alpha_act), 6 clip(alpha_act, beta_act)).
"""
import numpy as np
from numba import njit, prange
from numba.core.config import NUMBA_NUM_THREADS

from .epilogue import act_row
from .gemm import _ceil_div, _gcd, num_threads, xgemm

_FM = {'reassoc', 'contract', 'arcp'}

# Work (elements touched) above which the data-movement loops use prange.
_PAR_MIN_WORK = 1 << 16


def conv2d_scratch_elems(C, KH, KW, OH, OW, group):
    """Number of ``col`` scratch elements conv2d needs (plain Python, >= 1)."""
    return max(1, (C // group) * KH * KW * OH * OW)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _valid_range(off, stride, size, n_out):
    """[lo, hi) of output indices o in [0, n_out) with 0 <= o*stride + off < size."""
    lo = 0 if off >= 0 else (-off + stride - 1) // stride
    last = size - 1 - off
    hi = 0 if last < 0 else last // stride + 1
    hi = min(hi, n_out)
    lo = min(lo, n_out)
    return lo, max(lo, hi)


@@BODY@@

@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def conv2d(x, w, b, out, col, sh, sw, ph, pw, dh, dw, group, has_bias):
    """ONNX Conv: out = conv(x, w) + b. See module docstring for shapes."""
    _conv2d_core(x, w, b, out, out, col, sh, sw, ph, pw, dh, dw, group, has_bias,
                 np.int64(0), np.int64(0), np.float64(0.0), np.float64(0.0))


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def conv2d_bias_act(x, w, b, out, col, sh, sw, ph, pw, dh, dw, group, has_bias, act,
                    alpha_act, beta_act):
    """out = act(conv(x, w) + b); ``act`` code and params as in ``epilogue``."""
    _conv2d_core(x, w, b, out, out, col, sh, sw, ph, pw, dh, dw, group, has_bias,
                 np.int64(0), np.int64(act), np.float64(alpha_act), np.float64(beta_act))


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def conv2d_bias_add_act(x, w, b, res, out, col, sh, sw, ph, pw, dh, dw, group, has_bias,
                        act, alpha_act, beta_act):
    """out = act(conv(x, w) + b + res); res (N, M, OH, OW) must not alias ``out``
    (the GEMM overwrites ``out`` before the residual is read)."""
    _conv2d_core(x, w, b, res, out, col, sh, sw, ph, pw, dh, dw, group, has_bias,
                 np.int64(1), np.int64(act), np.float64(alpha_act), np.float64(beta_act))
