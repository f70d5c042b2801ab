"""Softmax / LogSoftmax over axis 1 of a 3-D view.

x, out: C-contiguous (O, N, I), float32 or float64 (same dtype). The reduction runs over
N; O and I are independent. Numerically stable (the row max is subtracted). A row that is
all -inf (or contains NaN or +inf) produces NaN, like numpy. float32 uses the polynomial
``expneg32`` (vectorized; terms below 2**-126, e.g. a causal mask's, are exactly 0 and never
denormal), float64 uses libm ``exp``. out may alias x.
"""
import math

import numpy as np
from numba import njit, prange

from .gemm import num_threads
from .mathfn import fexpneg, wide_vectors

_PAR_MIN_WORK = 1 << 15


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def row_max2(x2, r):
    """max of row r of the C-contiguous 2-D x2, NaNs skipped, -inf if the row is empty.

    A select-based max reduction (``m = v if v > m else m``) does not vectorize without the
    ``nnan`` flag; eight independent accumulators in locals (registers) run ~3x faster with
    the same semantics. (Accumulators in a small array cost a heap allocation per row --
    more than the row itself for attention rows of 128.) Rows are indexed in the 2-D array,
    not sliced out: a row view costs ~100 ns."""
    n = x2.shape[1]
    t = x2.dtype.type
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = t(-np.inf)
    n8 = n // 8 * 8
    for j in range(0, n8, 8):
        v = x2[r, j]
        m0 = v if v > m0 else m0
        v = x2[r, j + 1]
        m1 = v if v > m1 else m1
        v = x2[r, j + 2]
        m2 = v if v > m2 else m2
        v = x2[r, j + 3]
        m3 = v if v > m3 else m3
        v = x2[r, j + 4]
        m4 = v if v > m4 else m4
        v = x2[r, j + 5]
        m5 = v if v > m5 else m5
        v = x2[r, j + 6]
        m6 = v if v > m6 else m6
        v = x2[r, j + 7]
        m7 = v if v > m7 else m7
    m0 = m1 if m1 > m0 else m0
    m2 = m3 if m3 > m2 else m2
    m4 = m5 if m5 > m4 else m4
    m6 = m7 if m7 > m6 else m6
    m0 = m2 if m2 > m0 else m0
    m4 = m6 if m6 > m4 else m4
    m = m4 if m4 > m0 else m0
    for j in range(n8, n):
        v = x2[r, j]
        m = v if v > m else m
    return m


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def row_max(xr):
    """max of the 1-D contiguous xr, NaNs skipped, -inf if empty (see ``row_max2``)."""
    return row_max2(xr.reshape(1, xr.shape[0]), 0)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _softmax_rows(x2, o2, r0, r1, log):
    """Rows [r0, r1) of x2 (R, N) (the I == 1 case): o2 = softmax or log_softmax of each,
    indexed in place (attention rows of 65-128 ran ~1.2-2x faster than one view per row)."""
    wide_vectors()
    n = x2.shape[1]
    t = x2.dtype.type
    for r in range(r0, r1):
        m = row_max2(x2, r)
        s = t(0.0)
        if log:
            for j in range(n):
                d = x2[r, j] - m
                o2[r, j] = d
                s += fexpneg(d)
            ls = math.log(s)
            for j in range(n):
                o2[r, j] -= ls
        else:
            for j in range(n):
                e = fexpneg(x2[r, j] - m)
                o2[r, j] = e
                s += e
            inv = t(1.0) / s
            for j in range(n):
                o2[r, j] *= inv


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _softmax_block(xb, ob, m, s, log):
    """xb, ob (N, I): softmax over N for every i; m, s (I,) scratch of the dtype."""
    n, ni = xb.shape
    for i in range(ni):
        m[i] = -np.inf
        s[i] = 0
    for j in range(n):
        xr = xb[j]
        for i in range(ni):
            v = xr[i]
            m[i] = v if v > m[i] else m[i]
    for j in range(n):
        xr = xb[j]
        orow = ob[j]
        if log:
            for i in range(ni):
                d = xr[i] - m[i]
                orow[i] = d
                s[i] += fexpneg(d)
        else:
            for i in range(ni):
                e = fexpneg(xr[i] - m[i])
                orow[i] = e
                s[i] += e
    if log:
        for i in range(ni):
            s[i] = math.log(s[i])
        for j in range(n):
            orow = ob[j]
            for i in range(ni):
                orow[i] -= s[i]
    else:
        one = xb.dtype.type(1.0)
        for i in range(ni):
            s[i] = one / s[i]
        for j in range(n):
            orow = ob[j]
            for i in range(ni):
                orow[i] *= s[i]


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _softmax_par(x, out, log):
    o_n, n, ni = x.shape
    if ni == 1:
        x2 = x.reshape(o_n, n)
        o2 = out.reshape(o_n, n)
        nw = min(num_threads(), o_n)
        for w in prange(nw):
            _softmax_rows(x2, o2, w * o_n // nw, (w + 1) * o_n // nw, log)
    else:
        for o in prange(o_n):
            m = np.empty(ni, x.dtype)
            s = np.empty(ni, x.dtype)
            _softmax_block(x[o], out[o], m, s, log)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _softmax_any(x, out, log):
    o_n, n, ni = x.shape
    if o_n * n * ni >= _PAR_MIN_WORK and o_n > 1:
        _softmax_par(x, out, log)
    elif ni == 1:
        _softmax_rows(x.reshape(o_n, n), out.reshape(o_n, n), 0, o_n, log)
    else:
        m = np.empty(ni, x.dtype)
        s = np.empty(ni, x.dtype)
        for o in range(o_n):
            _softmax_block(x[o], out[o], m, s, log)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def softmax3d(x, out):
    """out = exp(x - max) / sum(exp(x - max)) over axis 1 of x (O, N, I)."""
    _softmax_any(x, out, False)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def logsoftmax3d(x, out):
    """out = x - max - log(sum(exp(x - max))) over axis 1 of x (O, N, I)."""
    _softmax_any(x, out, True)
