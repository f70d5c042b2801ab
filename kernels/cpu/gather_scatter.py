"""CPU kernels: GatherElements, GatherND, ScatterElements, ScatterND, Scatter, OneHot. Imports nothing from jitort.

GatherElements / ScatterElements / Scatter run in kernels the compiler generates per rank
(``jitort/codegen/lowerings/gather_scatter.py``); the fixed-rank kernels are here. Indices are
data: every one is checked (negative ones wrap once) before the element it names is read or
written, and an out-of-range one raises ``IndexError``.
"""
import numpy as np
from numba import njit, prange

#: reduction codes of the scatter kernels (attribute ``reduction``)
NONE, ADD, MUL, MAX, MIN = 0, 1, 2, 3, 4


@njit(cache=True, error_model='numpy')
def _nd_offset(idx, b, m, dims):
    """Row-major offset of the k = idx.shape[2] indexed dims ``dims`` named by idx[b, m, :]."""
    flat = 0
    for j in range(idx.shape[2]):
        d = dims[j]
        v = idx[b, m, j]
        if v < 0:
            v += d
        if v < 0 or v >= d:
            raise IndexError("index out of range")
        flat = flat * d + v
    return flat


@njit(cache=True, error_model='numpy')
def gather_nd3(data, idx, out, dims):
    """GatherND: out[b, m, :] = data[b, offset(idx[b, m, :]), :].

    data (B, P, I) with P = prod(dims) the indexed dims, idx (B, M, k) integer, out (B, M, I);
    ``dims``: the k indexed dims followed by a 1 (never an empty tuple)."""
    inner = data.shape[2]
    for b in range(idx.shape[0]):
        for m in range(idx.shape[1]):
            p = _nd_offset(idx, b, m, dims)
            if inner == 1:  # whole index tuples: no row views
                out[b, m, 0] = data[b, p, 0]
                continue
            src = data[b, p]
            dst = out[b, m]
            for i in range(inner):
                dst[i] = src[i]


@njit(cache=True, error_model='numpy', parallel=True)
def gather_nd3_par(data, idx, out, dims):
    """:func:`gather_nd3` with the (b, m) rows in a prange (indices checked first)."""
    nb, nm, inner = idx.shape[0], idx.shape[1], data.shape[2]
    for b in range(nb):
        for m in range(nm):
            _nd_offset(idx, b, m, dims)
    for r in prange(nb * nm):
        b = r // nm
        m = r - b * nm
        p = _nd_offset(idx, b, m, dims)
        src = data[b, p]
        dst = out[b, m]
        for i in range(inner):
            dst[i] = src[i]


@njit(cache=True, error_model='numpy')
def _combine(old, new, reduction):
    if reduction == ADD:
        return old + new
    if reduction == MUL:
        return old * new
    if reduction == MAX:
        return max(old, new)
    if reduction == MIN:
        return min(old, new)
    return new


@njit(cache=True, error_model='numpy')
def scatter_nd2(out, idx, upd, dims, reduction):
    """ScatterND into ``out`` (already a copy of the data): out[offset(idx[m, :]), :] (op)=
    upd[m, :], in index order.

    out (P, I) with P = prod(dims), idx (1, M, k), upd (M, I); ``dims`` as in :func:`gather_nd3`."""
    inner = out.shape[1]
    for m in range(idx.shape[1]):
        p = _nd_offset(idx, 0, m, dims)
        if inner == 1:  # whole index tuples: no row views
            out[p, 0] = _combine(out[p, 0], upd[m, 0], reduction)
            continue
        dst = out[p]
        src = upd[m]
        if reduction == NONE:
            for i in range(inner):
                dst[i] = src[i]
        else:
            for i in range(inner):
                dst[i] = _combine(dst[i], src[i], reduction)


@njit(cache=True, error_model='numpy')
def onehot3(idx, out, vals):
    """OneHot: out (O, D, I) = vals[0] (off) everywhere but out[o, idx[o, i], i] = vals[1] (on).
    idx (O, I) of any real dtype (truncated to an integer); negative ones count from D; ones
    outside [-D, D) leave their column all off, as onnxruntime does."""
    n_outer, depth, inner = out.shape
    off = vals[0]
    on = vals[1]
    flat = out.reshape((n_outer, depth * inner))
    for o in range(n_outer):
        row = flat[o]
        for t in range(depth * inner):
            row[t] = off
        for i in range(inner):
            j = np.int64(idx[o, i])
            if j < 0:
                j += depth
            if j >= 0 and j < depth:
                out[o, j, i] = on
