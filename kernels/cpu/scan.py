"""CPU kernels: scans and selections: CumSum, CumProd, ArgMax, ArgMin, TopK, Hardmax. Imports nothing from jitort.

Every kernel works on a rank-3 view ``(outer, axis, inner)`` of its input: the compiler collapses
the dims before and after the scanned/selected axis. Loops run over ``axis`` outside and
``inner`` inside, so rows of ``inner`` contiguous elements vectorize where the work allows it.
"""
import numpy as np
from numba import njit, prange


# --- CumSum / CumProd ------------------------------------------------------------------------

@njit(cache=True, error_model='numpy')
def _scan_plane(x, y, o, exclusive, reverse, prod):
    """y[o] = running sum (prod) of x[o] along axis 1 of the (O, A, I) views, in the input dtype
    and in order, as onnxruntime accumulates."""
    n_axis, inner = x.shape[1], x.shape[2]
    if n_axis == 0:
        return
    z = y.dtype.type(1) if prod else y.dtype.type(0)
    first = n_axis - 1 if reverse else 0
    step = -1 if reverse else 1
    yr = y[o, first]
    if exclusive:
        for i in range(inner):
            yr[i] = z
    else:
        xr = x[o, first]
        for i in range(inner):
            yr[i] = xr[i]
    a = first
    for _ in range(n_axis - 1):
        prev = a
        a += step
        src = x[o, prev] if exclusive else x[o, a]
        yp = y[o, prev]
        yr = y[o, a]
        if prod:
            for i in range(inner):
                yr[i] = yp[i] * src[i]
        else:
            for i in range(inner):
                yr[i] = yp[i] + src[i]


@njit(cache=True, error_model='numpy')
def scan3(x, y, exclusive, reverse, prod):
    """CumSum (prod=False) / CumProd (prod=True) along axis 1 of x (O, A, I) into y (O, A, I)."""
    for o in range(x.shape[0]):
        _scan_plane(x, y, o, exclusive, reverse, prod)


@njit(cache=True, error_model='numpy', parallel=True)
def scan3_par(x, y, exclusive, reverse, prod):
    """:func:`scan3` with the outer planes in a prange (big inputs with many planes)."""
    for o in prange(x.shape[0]):
        _scan_plane(x, y, o, exclusive, reverse, prod)


# --- ArgMax / ArgMin / Hardmax ---------------------------------------------------------------

@njit(cache=True, error_model='numpy')
def _better(v, b, is_min, last):
    """Does ``v`` (at a later index) replace the current extreme ``b``?"""
    if is_min:
        return v <= b if last else v < b
    return v >= b if last else v > b


@njit(cache=True, error_model='numpy')
def _arg_plane(x, y, o, is_min, last):
    n_axis, inner = x.shape[1], x.shape[2]
    if inner == 1:
        b = x[o, 0, 0]
        k = 0
        for a in range(1, n_axis):
            v = x[o, a, 0]
            if _better(v, b, is_min, last):
                b = v
                k = a
        y[o, 0] = k
        return
    yr = y[o]
    for i in range(inner):
        yr[i] = 0
    for a in range(1, n_axis):
        xr = x[o, a]
        for i in range(inner):
            if _better(xr[i], x[o, yr[i], i], is_min, last):
                yr[i] = a


@njit(cache=True, error_model='numpy')
def argext3(x, y, is_min, last):
    """ArgMax (is_min=False) / ArgMin along axis 1 of x (O, A, I), A >= 1, into y (O, I) int64:
    the first extreme index, or the last one with ``last``."""
    for o in range(x.shape[0]):
        _arg_plane(x, y, o, is_min, last)


@njit(cache=True, error_model='numpy', parallel=True)
def argext3_par(x, y, is_min, last):
    """:func:`argext3` with the outer planes in a prange."""
    for o in prange(x.shape[0]):
        _arg_plane(x, y, o, is_min, last)


@njit(cache=True, error_model='numpy')
def hardmax3(x, y, idx):
    """Hardmax along axis 1 of x (O, A, I), A >= 1: y = 1 at the first maximum, 0 elsewhere;
    ``idx`` (O, I) int64 scratch."""
    argext3(x, idx, False, False)
    one = y.dtype.type(1)
    zero = y.dtype.type(0)
    for o in range(x.shape[0]):
        for a in range(x.shape[1]):
            yr = y[o, a]
            ir = idx[o]
            for i in range(x.shape[2]):
                yr[i] = one if ir[i] == a else zero


# --- TopK -------------------------------------------------------------------------------------

@njit(cache=True, error_model='numpy')
def _worse(v, j, w, k, largest):
    """Is (v at index j) ranked after (w at index k)? Ties rank the lower index first."""
    if v == w:
        return j > k
    return v < w if largest else v > w


@njit(cache=True, error_model='numpy')
def _sift_down(hv, hi, pos, n, largest):
    """Restore the heap below ``pos``: the root holds the worst-ranked of the first n entries."""
    v = hv[pos]
    j = hi[pos]
    while True:
        c = 2 * pos + 1
        if c >= n:
            break
        if c + 1 < n and _worse(hv[c + 1], hi[c + 1], hv[c], hi[c], largest):
            c += 1
        if _worse(hv[c], hi[c], v, j, largest):
            hv[pos] = hv[c]
            hi[pos] = hi[c]
            pos = c
        else:
            break
    hv[pos] = v
    hi[pos] = j


@njit(cache=True, error_model='numpy')
def _topk_row(x, vals, idx, o, i, largest, hv, hi):
    """The k best of x[o, :, i] into vals[o, :, i] / idx[o, :, i], best first (ties: lower index
    first): a heap of the k best so far (root: the worst of them), then heap-sort."""
    n_axis = x.shape[1]
    k = vals.shape[1]
    if k == 0:
        return
    for a in range(k):
        hv[a] = x[o, a, i]
        hi[a] = a
    for p in range(k // 2 - 1, -1, -1):
        _sift_down(hv, hi, p, k, largest)
    for a in range(k, n_axis):
        v = x[o, a, i]
        # a later index never beats an equal value already kept
        if v > hv[0] if largest else v < hv[0]:
            hv[0] = v
            hi[0] = a
            _sift_down(hv, hi, 0, k, largest)
    # the root is the worst: pop into the last free output slot
    for n in range(k, 0, -1):
        vals[o, n - 1, i] = hv[0]
        idx[o, n - 1, i] = hi[0]
        hv[0] = hv[n - 1]
        hi[0] = hi[n - 1]
        _sift_down(hv, hi, 0, n - 1, largest)


@njit(cache=True, error_model='numpy')
def topk3(x, vals, idx, largest):
    """TopK along axis 1 of x (O, A, I) into vals / idx (O, K, I), sorted best first."""
    k = vals.shape[1]
    hv = np.empty(k, x.dtype)
    hi = np.empty(k, np.int64)
    for o in range(x.shape[0]):
        for i in range(x.shape[2]):
            _topk_row(x, vals, idx, o, i, largest, hv, hi)


@njit(cache=True, error_model='numpy', parallel=True)
def topk3_par(x, vals, idx, largest):
    """:func:`topk3` with the rows in a prange (one heap per row)."""
    k = vals.shape[1]
    inner = x.shape[2]
    for r in prange(x.shape[0] * inner):
        o = r // inner
        i = r - o * inner
        hv = np.empty(k, x.dtype)
        hi = np.empty(k, np.int64)
        _topk_row(x, vals, idx, o, i, largest, hv, hi)
