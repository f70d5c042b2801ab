"""Reductions over axis 1 of a 3-D view (ONNX Reduce*; ArgMax / ArgMin are ``scan.argext3``).

x (O, N, I) C-contiguous float32 or float64 -> out (O, I) of the same dtype. The caller folds
the reduced axes into N (and keepdims is a reshape). ``kind`` is one of the REDUCE_* codes.
Empty reductions (N == 0) give the ONNX identities: sum 0, prod 1, max -inf, min +inf,
l1/l2/sum_square 0, log_sum and log_sum_exp -inf, mean 0 (onnxruntime's choice: the spec
leaves it undefined).
Max/min propagate NaN, as onnxruntime does (``v != v`` is the NaN test; no ``nnan`` fastmath).
"""
import math

import numpy as np
from numba import njit, prange

from .nthreads import num_threads
from .mathfn import fexp

REDUCE_SUM = 0
REDUCE_MEAN = 1
REDUCE_MAX = 2
REDUCE_MIN = 3
REDUCE_PROD = 4
REDUCE_L1 = 5
REDUCE_L2 = 6
REDUCE_LOG_SUM = 7
REDUCE_LOG_SUM_EXP = 8
REDUCE_SUM_SQUARE = 9

#: work from which these kernels split over the threads (4x below its value under Numba's
#: TBB layer, as a region's cost fell: kernels/cpu/workers.py)
_PAR_MIN_WORK = 1 << 13


# --- I == 1: one contiguous row -> scalar -----------------------------------------------
@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _reduce_vec(r, kind):
    """Reduce the 1-D row r with ``kind``; returns a scalar of r's dtype."""
    n = r.shape[0]
    t = r.dtype.type
    if kind == REDUCE_MAX:
        m = t(-np.inf)
        for j in range(n):
            v = r[j]
            m = v if (v > m or v != v) else m
        return m
    if kind == REDUCE_MIN:
        m = t(np.inf)
        for j in range(n):
            v = r[j]
            m = v if (v < m or v != v) else m
        return m
    if kind == REDUCE_PROD:
        p = t(1.0)
        for j in range(n):
            p *= r[j]
        return p
    if kind == REDUCE_LOG_SUM_EXP:
        m = t(-np.inf)
        for j in range(n):
            v = r[j]
            m = v if v > m else m
        m = m if abs(m) < t(np.inf) else t(0.0)
        s = t(0.0)
        for j in range(n):
            s += fexp(r[j] - m)
        return m + math.log(s)
    s = t(0.0)
    if kind == REDUCE_L1:
        for j in range(n):
            s += abs(r[j])
    elif kind == REDUCE_L2 or kind == REDUCE_SUM_SQUARE:
        for j in range(n):
            s += r[j] * r[j]
    else:
        for j in range(n):
            s += r[j]
    if kind == REDUCE_MEAN:
        return s / t(max(n, 1))
    if kind == REDUCE_L2:
        return math.sqrt(s)
    if kind == REDUCE_LOG_SUM:
        return math.log(s)
    return s


# --- I > 1: (N, I) block -> (I,) row, vectorized over I ---------------------------------
@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _reduce_block(xb, orow, tmp, kind):
    """orow (I,) = reduction over N of xb (N, I); tmp (I,) scratch of the dtype."""
    n, ni = xb.shape
    t = xb.dtype.type
    if kind == REDUCE_MAX or kind == REDUCE_LOG_SUM_EXP:
        init = t(-np.inf)
    elif kind == REDUCE_MIN:
        init = t(np.inf)
    elif kind == REDUCE_PROD:
        init = t(1.0)
    else:
        init = t(0.0)
    for i in range(ni):
        orow[i] = init
    for j in range(n):
        xr = xb[j]
        if kind == REDUCE_MAX or kind == REDUCE_LOG_SUM_EXP:
            for i in range(ni):
                v = xr[i]
                orow[i] = v if (v > orow[i] or v != v) else orow[i]
        elif kind == REDUCE_MIN:
            for i in range(ni):
                v = xr[i]
                orow[i] = v if (v < orow[i] or v != v) else orow[i]
        elif kind == REDUCE_PROD:
            for i in range(ni):
                orow[i] *= xr[i]
        elif kind == REDUCE_L1:
            for i in range(ni):
                orow[i] += abs(xr[i])
        elif kind == REDUCE_L2 or kind == REDUCE_SUM_SQUARE:
            for i in range(ni):
                orow[i] += xr[i] * xr[i]
        else:
            for i in range(ni):
                orow[i] += xr[i]
    if kind == REDUCE_LOG_SUM_EXP:
        inf = t(np.inf)
        for i in range(ni):
            m = orow[i]
            tmp[i] = m if abs(m) < inf else t(0.0)
            orow[i] = 0
        for j in range(n):
            xr = xb[j]
            for i in range(ni):
                orow[i] += fexp(xr[i] - tmp[i])
        for i in range(ni):
            orow[i] = tmp[i] + math.log(orow[i])
    elif kind == REDUCE_MEAN:
        cnt = t(max(n, 1))
        for i in range(ni):
            orow[i] = orow[i] / cnt
    elif kind == REDUCE_L2:
        for i in range(ni):
            orow[i] = math.sqrt(orow[i])
    elif kind == REDUCE_LOG_SUM:
        for i in range(ni):
            orow[i] = math.log(orow[i])


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _reduce_planes(x, out, kind, o0, o1):
    """Planes [o0, o1) of x (O, N, I) into out (O, I): each row (I == 1) or each (N, I) block."""
    o_n, n, ni = x.shape
    if ni == 1:
        x2 = x.reshape(o_n, n)
        for o in range(o0, o1):
            out[o, 0] = _reduce_vec(x2[o], kind)
        return
    tmp = np.empty(ni, x.dtype)
    for o in range(o0, o1):
        _reduce_block(x[o], out[o], tmp, kind)


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _reduce_par(x, out, kind):
    o_n = x.shape[0]
    nw = min(num_threads(), o_n)
    for w in prange(nw):
        _reduce_planes(x, out, kind, w * o_n // nw, (w + 1) * o_n // nw)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def reduce3d(x, out, kind):
    """out (O, I) = reduce_kind over axis 1 of x (O, N, I); see module docstring."""
    o_n, n, ni = x.shape
    if num_threads() > 1 and o_n * n * ni >= _PAR_MIN_WORK and o_n > 1:
        _reduce_par(x, out, kind)
    else:
        _reduce_planes(x, out, kind, 0, o_n)
