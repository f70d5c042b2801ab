"""Softmax / LogSoftmax over axis 1 of a 3-D view.

x, out: C-contiguous (O, N, I), float32 or float64 (same dtype). The reduction runs over
N; O and I are independent. Numerically stable (the row max is subtracted). A row that is
all -inf (or contains NaN or +inf) produces NaN, like numpy. float32 uses the polynomial
``exp32`` (vectorized), float64 uses libm ``exp``. out may alias x.
"""
import math

import numpy as np
from numba import njit, prange

from .mathfn import fexp, wide_vectors

_PAR_MIN_WORK = 1 << 15


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def row_max(xr):
    """max of the 1-D contiguous xr, NaNs skipped, -inf if empty.

    A select-based max reduction (``m = v if v > m else m``) does not vectorize without the
    ``nnan`` flag; eight independent accumulators in locals (registers) run ~3x faster with
    the same semantics. (Accumulators in a small array cost a heap allocation per row --
    more than the row itself for attention rows of 128.)"""
    n = xr.shape[0]
    t = xr.dtype.type
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = t(-np.inf)
    n8 = n // 8 * 8
    for j in range(0, n8, 8):
        v = xr[j]
        m0 = v if v > m0 else m0
        v = xr[j + 1]
        m1 = v if v > m1 else m1
        v = xr[j + 2]
        m2 = v if v > m2 else m2
        v = xr[j + 3]
        m3 = v if v > m3 else m3
        v = xr[j + 4]
        m4 = v if v > m4 else m4
        v = xr[j + 5]
        m5 = v if v > m5 else m5
        v = xr[j + 6]
        m6 = v if v > m6 else m6
        v = xr[j + 7]
        m7 = v if v > m7 else m7
    m0 = m1 if m1 > m0 else m0
    m2 = m3 if m3 > m2 else m2
    m4 = m5 if m5 > m4 else m4
    m6 = m7 if m7 > m6 else m6
    m0 = m2 if m2 > m0 else m0
    m4 = m6 if m6 > m4 else m4
    m = m4 if m4 > m0 else m0
    for j in range(n8, n):
        v = xr[j]
        m = v if v > m else m
    return m


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _softmax_row(xr, orow, log):
    """One contiguous row (I == 1 case): orow = softmax(xr) or log_softmax(xr)."""
    wide_vectors()
    n = xr.shape[0]
    t = xr.dtype.type
    m = row_max(xr)
    s = t(0.0)
    if log:
        for j in range(n):
            d = xr[j] - m
            orow[j] = d
            s += fexp(d)
        ls = math.log(s)
        for j in range(n):
            orow[j] -= ls
    else:
        for j in range(n):
            e = fexp(xr[j] - m)
            orow[j] = e
            s += e
        inv = t(1.0) / s
        for j in range(n):
            orow[j] *= inv


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
                s[i] += fexp(d)
        else:
            for i in range(ni):
                e = fexp(xr[i] - m[i])
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
        for o in prange(o_n):
            wide_vectors()
            _softmax_row(x2[o], o2[o], log)
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
        x2 = x.reshape(o_n, n)
        o2 = out.reshape(o_n, n)
        for o in range(o_n):
            _softmax_row(x2[o], o2[o], log)
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
