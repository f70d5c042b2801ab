"""CPU kernels: scans and selections: CumSum, CumProd, ArgMax, ArgMin, TopK, Hardmax. Imports nothing from jitort.

Every kernel works on a rank-3 view ``(outer, axis, inner)`` of its input: the compiler collapses
the dims before and after the scanned/selected axis. Loops run over ``axis`` outside and
``inner`` inside, so rows of ``inner`` contiguous elements vectorize where the work allows it.
"""
import numpy as np
from numba import njit, prange

from .ptr import eptr


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
    # raw row pointers (C-contiguous x and y: scan3 checks): three row views per step (their
    # reference counting) would cost as much as the adds on rows of a few hundred elements
    for _ in range(n_axis - 1):
        prev = a
        a += step
        src = eptr(x, (o * n_axis + (prev if exclusive else a)) * inner)
        yp = eptr(y, (o * n_axis + prev) * inner)
        yr = eptr(y, (o * n_axis + a) * inner)
        if prod:
            for i in range(inner):
                yr[i] = yp[i] * src[i]
        else:
            for i in range(inner):
                yr[i] = yp[i] + src[i]


@njit(cache=True, error_model='numpy')
def _scan_row(x, y, exclusive, reverse, prod):
    """The scan of one contiguous row (the last axis): a running scalar in a register (the
    plane form would make a row view per element)."""
    n = x.shape[0]
    acc = y.dtype.type(1) if prod else y.dtype.type(0)
    for t in range(n):
        a = n - 1 - t if reverse else t
        v = x[a]
        if exclusive:
            y[a] = acc
        acc = acc * v if prod else acc + v
        if not exclusive:
            y[a] = acc


@njit(cache=True, error_model='numpy')
def _check_contiguous(x, y):
    if not (x.flags.c_contiguous and y.flags.c_contiguous) or x.shape != y.shape:
        raise ValueError("scan3: x and y must be C-contiguous arrays of one shape")


@njit(inline='always')
def _scan_planes(x, y, exclusive, reverse, prod):
    """The body of :func:`scan3` and :func:`scan3_par`: its ``prange`` loops run in order in
    scan3 and split over the threads in scan3_par (inlined, so each is compiled in place).
    Those check the operands first: a wrapper of one call is one that ``jitort.library`` skips,
    calling its target directly, which would compile this without the prange."""
    n_outer, n_axis, inner = x.shape
    if inner == 1:
        x2 = x.reshape((n_outer, n_axis))
        y2 = y.reshape((n_outer, n_axis))
        for o in prange(n_outer):
            _scan_row(x2[o], y2[o], exclusive, reverse, prod)
        return
    for o in prange(n_outer):
        _scan_plane(x, y, o, exclusive, reverse, prod)


@njit(cache=True, error_model='numpy')
def scan3(x, y, exclusive, reverse, prod):
    """CumSum (prod=0) / CumProd (prod=1) along axis 1 of x (O, A, I) into y (O, A, I), both
    C-contiguous."""
    _check_contiguous(x, y)
    _scan_planes(x, y, exclusive, reverse, prod)


@njit(cache=True, error_model='numpy', parallel=True)
def scan3_par(x, y, exclusive, reverse, prod):
    """:func:`scan3` with the outer planes (rows) in a prange (big inputs with many of them)."""
    _check_contiguous(x, y)
    _scan_planes(x, y, exclusive, reverse, prod)


# --- ArgMax / ArgMin / Hardmax ---------------------------------------------------------------

@njit(inline='always')
def _takes(v, b, is_min, last):
    """Does v replace the running extreme b? Strictly better keeps the first index of ties
    (``last`` = 0), better or equal the last. Inlined with constant flags: one compare."""
    if is_min:
        return v <= b if last else v < b
    return v >= b if last else v > b


@njit(inline='always')
def _merges(m, i, b, k, is_min, last):
    """Does the lane extreme m (at index i) replace b (at k)? Equal values: the lower index
    (the higher with ``last``), whatever lane held it."""
    return _takes(m, b, is_min, False) or (m == b and (i > k if last else i < k))


@njit(inline='always')
def _lane(v, a, m, i, is_min, last):
    """(m, i) of a lane after its element v at index a."""
    if _takes(v, m, is_min, last):
        return v, a
    return m, i


@njit(inline='always')
def _pick(m, i, b, k, is_min, last):
    """The (extreme, index) pair kept of two lanes' (see :func:`_merges`)."""
    if _merges(m, i, b, k, is_min, last):
        return m, i
    return b, k


@njit(inline='always')
def _quad(r, base, m0, i0, m1, i1, m2, i2, m3, i3, is_min, last):
    """Four lanes after their elements r[base .. base + 3]."""
    v = r[base]
    if _takes(v, m0, is_min, last):
        m0, i0 = v, base
    v = r[base + 1]
    if _takes(v, m1, is_min, last):
        m1, i1 = v, base + 1
    v = r[base + 2]
    if _takes(v, m2, is_min, last):
        m2, i2 = v, base + 2
    v = r[base + 3]
    if _takes(v, m3, is_min, last):
        m3, i3 = v, base + 3
    return m0, i0, m1, i1, m2, i2, m3, i3


@njit(inline='always')
def _fold4(b, k, m0, i0, m1, i1, m2, i2, m3, i3, is_min, last):
    """The pair (b, k) after merging four lanes into it, in lane order."""
    b, k = _pick(m0, i0, b, k, is_min, last)
    b, k = _pick(m1, i1, b, k, is_min, last)
    b, k = _pick(m2, i2, b, k, is_min, last)
    return _pick(m3, i3, b, k, is_min, last)


@njit(inline='always')
def _arg_ext(r, is_min, last):
    """Index of the first (``last``: the last) maximum (``is_min``: minimum) of the contiguous
    row r. Rows of 16 and more keep eight running extremes, one per lane of a block of eight
    (independent compares the CPU overlaps), merged at the end. Inlined into :func:`_arg_row`
    once per flag pair, so each copy compiles with its comparison fixed."""
    n = r.shape[0]
    if n < 16:
        b = r[0]
        k = 0
        for a in range(1, n):
            b, k = _lane(r[a], a, b, k, is_min, last)
        return k
    m0, m1, m2, m3, m4, m5, m6, m7 = r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]
    i0, i1, i2, i3, i4, i5, i6, i7 = 0, 1, 2, 3, 4, 5, 6, 7
    nb = n // 8
    for blk in range(1, nb):
        base = blk * 8
        m0, i0, m1, i1, m2, i2, m3, i3 = _quad(r, base, m0, i0, m1, i1, m2, i2, m3, i3,
                                               is_min, last)
        m4, i4, m5, i5, m6, i6, m7, i7 = _quad(r, base + 4, m4, i4, m5, i5, m6, i6, m7, i7,
                                               is_min, last)
    # merged in lane order, as a NaN in lane 0 keeps index 0 in the scalar loop (lane 0
    # merged into itself is never replaced)
    b, k = _fold4(m0, i0, m0, i0, m1, i1, m2, i2, m3, i3, is_min, last)
    b, k = _fold4(b, k, m4, i4, m5, i5, m6, i6, m7, i7, is_min, last)
    for a in range(nb * 8, n):
        b, k = _lane(r[a], a, b, k, is_min, last)
    return k


@njit(cache=True, error_model='numpy')
def _arg_row(r, is_min, last):
    """:func:`_arg_ext` with constant flags: one specialized copy per (is_min, last)."""
    if is_min:
        if last:
            return _arg_ext(r, True, True)
        return _arg_ext(r, True, False)
    if last:
        return _arg_ext(r, False, True)
    return _arg_ext(r, False, False)


@njit(inline='always')
def _cols_step(xr, bv, yr, a, is_min, last):
    """Row a of a plane against the running extremes bv (I,) and their indices yr (I,):
    a select per element, no branch, so the loop vectorizes."""
    for i in range(xr.shape[0]):
        t = _takes(xr[i], bv[i], is_min, last)
        bv[i] = xr[i] if t else bv[i]
        yr[i] = a if t else yr[i]


@njit(cache=True, error_model='numpy')
def _arg_cols(x, y, o, bv, is_min, last):
    """Arg-extreme of x[o] (A, I) along A for each of the I columns into y[o]; ``bv`` (I,) holds
    the running extremes. One loop per flag pair, each with its comparison fixed (a flag tested
    inside the loop kept it scalar)."""
    n_axis, inner = x.shape[1], x.shape[2]
    yr = y[o]
    x0 = x[o, 0]
    for i in range(inner):
        yr[i] = 0
        bv[i] = x0[i]
    for a in range(1, n_axis):
        xr = x[o, a]
        if is_min and last:
            _cols_step(xr, bv, yr, a, True, True)
        elif is_min:
            _cols_step(xr, bv, yr, a, True, False)
        elif last:
            _cols_step(xr, bv, yr, a, False, True)
        else:
            _cols_step(xr, bv, yr, a, False, False)


@njit(cache=True, error_model='numpy')
def argext3(x, y, is_min, last):
    """ArgMax (is_min=0) / ArgMin along axis 1 of x (O, A, I), A >= 1, into y (O, I) int64:
    the first extreme index, or the last one with ``last``."""
    n_outer, n_axis, inner = x.shape
    if inner == 1:  # contiguous rows
        x2 = x.reshape((n_outer, n_axis))
        for o in range(n_outer):
            y[o, 0] = _arg_row(x2[o], is_min, last)
        return
    bv = np.empty(inner, x.dtype)
    for o in range(n_outer):
        _arg_cols(x, y, o, bv, is_min, last)


@njit(cache=True, error_model='numpy', parallel=True)
def argext3_par(x, y, is_min, last):
    """:func:`argext3` with the outer planes (or rows) in a prange."""
    n_outer, n_axis, inner = x.shape
    if inner == 1:
        x2 = x.reshape((n_outer, n_axis))
        for o in prange(n_outer):
            y[o, 0] = _arg_row(x2[o], is_min, last)
        return
    for o in prange(n_outer):
        bv = np.empty(inner, x.dtype)
        _arg_cols(x, y, o, bv, is_min, last)


@njit(cache=True, error_model='numpy')
def _hardmax_plane(x, x2, y2, idx, o, bv):
    """Hardmax of the plane x[o] (A, I) into the row y2[o] (A * I): its arg-maxima into idx[o]
    (from the contiguous row x2[o] (O, A) where I == 1, else column by column with ``bv`` (I,)
    scratch), then zeros with a one at each."""
    n_axis, inner = x.shape[1], x.shape[2]
    if inner == 1:
        idx[o, 0] = _arg_row(x2[o], 0, 0)
    else:
        _arg_cols(x, idx, o, bv, 0, 0)
    yo = y2[o]
    zero = y2.dtype.type(0)
    for t in range(n_axis * inner):
        yo[t] = zero
    one = y2.dtype.type(1)
    for i in range(inner):
        yo[idx[o, i] * inner + i] = one


@njit(cache=True, error_model='numpy')
def hardmax3(x, y, idx):
    """Hardmax along axis 1 of x (O, A, I), A >= 1: y = 1 at the first maximum, 0 elsewhere;
    ``idx`` (O, I) int64 scratch."""
    n_outer, n_axis, inner = x.shape
    y2 = y.reshape((n_outer, n_axis * inner))
    x2 = x.reshape((n_outer, n_axis * inner))
    bv = np.empty(inner, x.dtype)
    for o in range(n_outer):
        _hardmax_plane(x, x2, y2, idx, o, bv)


@njit(cache=True, error_model='numpy', parallel=True)
def hardmax3_par(x, y, idx):
    """:func:`hardmax3` with the outer planes (or rows) in a prange."""
    n_outer, n_axis, inner = x.shape
    y2 = y.reshape((n_outer, n_axis * inner))
    x2 = x.reshape((n_outer, n_axis * inner))
    for o in prange(n_outer):
        _hardmax_plane(x, x2, y2, idx, o, np.empty(inner, x.dtype))


# --- TopK -------------------------------------------------------------------------------------

@njit(cache=True, error_model='numpy')
def _above(v, w):
    """v > w in TopK's order, where NaN is above every number (as in onnxruntime)."""
    return (v > w) | ((v != v) & (w == w))


@njit(cache=True, error_model='numpy')
def _worse(v, j, w, k, largest):
    """Is (v at index j) ranked after (w at index k)? Ties (NaNs tie) rank the lower index first."""
    if (v == w) | ((v != v) & (w != w)):
        return j > k
    return _above(w, v) if largest else _above(v, w)


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


#: TopK scans its rows in chunks: one vectorized count of the elements that beat the heap's root
#: per chunk, element by element only where that count is not 0 (short chunks find the rare
#: elements that enter cheaply; long ones would redo more work after each)
_CHUNK = 32


@njit(cache=True, error_model='numpy')
def _topk_row(r, vr, ir, largest, hv, hi):
    """The k = vr.shape[0] best of row r into vr / ir, best first (ties: lower index first): a
    heap of the k best so far (root: the worst of them, ``thr``), then heap-sort. A later index
    never beats an equal value already kept, so only strictly better elements enter."""
    n_axis = r.shape[0]
    k = vr.shape[0]
    if k == 0:
        return
    for a in range(k):
        hv[a] = r[a]
        hi[a] = a
    for p in range(k // 2 - 1, -1, -1):
        _sift_down(hv, hi, p, k, largest)
    thr = hv[0]
    a = k
    while a < n_axis:
        e = min(a + _CHUNK, n_axis)
        c = 0
        # _above(r[j], thr) (largest) / _above(thr, r[j]) in one compare per element; unsigned
        # indices: from an int64 ``a`` Numba's negative-index wraparound made the loads gathers
        ua = np.uint64(a)
        ue = np.uint64(e)
        if thr != thr:  # a NaN root: only numbers beat it (smallest); nothing does (largest)
            if not largest:
                for j in range(ua, ue):
                    c += r[j] == r[j]
        elif largest:
            for j in range(ua, ue):
                c += not r[j] <= thr
        else:
            for j in range(ua, ue):
                c += r[j] < thr
        if c:
            for j in range(a, e):
                v = r[j]
                if thr != thr:
                    beats = (not largest) and v == v
                else:
                    beats = (not v <= thr) if largest else v < thr
                if beats:
                    hv[0] = v
                    hi[0] = j
                    _sift_down(hv, hi, 0, k, largest)
                    thr = hv[0]
        a = e
    # the root is the worst: pop into the last free output slot
    for n in range(k, 0, -1):
        vr[n - 1] = hv[0]
        ir[n - 1] = hi[0]
        hv[0] = hv[n - 1]
        hi[0] = hi[n - 1]
        _sift_down(hv, hi, 0, n - 1, largest)


@njit(cache=True, error_model='numpy')
def _topk_sorted(r, vr, ir, largest):
    """TopK of row r by a stable sort: ascending for the smallest (ties: lower index first, NaN
    last); for the largest, ascending over the reversed row read backwards (ties: lower index
    first, NaN first)."""
    n = r.shape[0]
    k = vr.shape[0]
    if largest:
        order = np.argsort(r[::-1], kind='mergesort')
        for t in range(k):
            j = n - 1 - order[n - 1 - t]
            ir[t] = j
            vr[t] = r[j]
    else:
        order = np.argsort(r, kind='mergesort')
        for t in range(k):
            j = order[t]
            ir[t] = j
            vr[t] = r[j]


@njit(cache=True, error_model='numpy')
def _topk_any(r, vr, ir, largest, hv, hi):
    """The heap for k below half the row, a full stable sort above (where the heap's
    sifts cost more than the sort)."""
    if 2 * vr.shape[0] >= r.shape[0]:
        _topk_sorted(r, vr, ir, largest)
    else:
        _topk_row(r, vr, ir, largest, hv, hi)


@njit(cache=True, error_model='numpy')
def _topk_plane(x, vals, idx, o, largest, hv, hi, tmp, tv, ti):
    """TopK of the I strided rows x[o, :, i]: each copied into the contiguous ``tmp`` first."""
    n_axis, inner = x.shape[1], x.shape[2]
    k = vals.shape[1]
    for i in range(inner):
        for a in range(n_axis):
            tmp[a] = x[o, a, i]
        _topk_any(tmp, tv, ti, largest, hv, hi)
        for t in range(k):
            vals[o, t, i] = tv[t]
            idx[o, t, i] = ti[t]


@njit(cache=True, error_model='numpy')
def topk3(x, vals, idx, largest):
    """TopK along axis 1 of x (O, A, I) into vals / idx (O, K, I), sorted best first."""
    n_outer, n_axis, inner = x.shape
    k = vals.shape[1]
    hv = np.empty(k, x.dtype)
    hi = np.empty(k, np.int64)
    if inner == 1:  # contiguous rows
        x2 = x.reshape((n_outer, n_axis))
        v2 = vals.reshape((n_outer, k))
        i2 = idx.reshape((n_outer, k))
        for o in range(n_outer):
            _topk_any(x2[o], v2[o], i2[o], largest, hv, hi)
        return
    tmp = np.empty(n_axis, x.dtype)
    tv = np.empty(k, x.dtype)
    ti = np.empty(k, np.int64)
    for o in range(n_outer):
        _topk_plane(x, vals, idx, o, largest, hv, hi, tmp, tv, ti)


@njit(cache=True, error_model='numpy', parallel=True)
def topk3_par(x, vals, idx, largest):
    """:func:`topk3` with the rows (or the planes) in a prange."""
    n_outer, n_axis, inner = x.shape
    k = vals.shape[1]
    if inner == 1:
        x2 = x.reshape((n_outer, n_axis))
        v2 = vals.reshape((n_outer, k))
        i2 = idx.reshape((n_outer, k))
        for o in prange(n_outer):
            hv = np.empty(k, x.dtype)
            hi = np.empty(k, np.int64)
            _topk_any(x2[o], v2[o], i2[o], largest, hv, hi)
        return
    for o in prange(n_outer):
        hv = np.empty(k, x.dtype)
        hi = np.empty(k, np.int64)
        tmp = np.empty(n_axis, x.dtype)
        tv = np.empty(k, x.dtype)
        ti = np.empty(k, np.int64)
        _topk_plane(x, vals, idx, o, largest, hv, hi, tmp, tv, ti)
