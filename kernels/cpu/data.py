"""Data-movement kernels on fixed-rank views: gather, concat/split copies.

The compiler collapses an N-D tensor around the axis of interest into ``(outer, axis, inner)``
so one rank-3 kernel serves every rank.
"""
import numpy as np
from numba import njit, prange

#: runs of at most this many elements are copied by raw pointers (``copy3_into``)
_SHORT_ROW = 1024


@njit(cache=True, error_model='numpy')
def gather3(data, idx, out):
    """out[o, k, i] = data[o, idx[k], i]; negative indices wrap once; out-of-range raises.

    data (O, A, I), idx (K,) integer, out (O, K, I).
    """
    n_outer, axis_len, inner = data.shape
    for k in range(idx.shape[0]):
        j = idx[k]
        if j < -axis_len or j >= axis_len:
            raise IndexError("Gather: index out of range")
    for o in range(n_outer):
        for k in range(idx.shape[0]):
            j = idx[k]
            if j < 0:
                j += axis_len
            for i in range(inner):
                out[o, k, i] = data[o, j, i]


@njit(cache=True, error_model='numpy', parallel=True)
def gather3_par(data, idx, out):
    """Parallel :func:`gather3` for big lookups (embedding tables)."""
    n_outer, axis_len, inner = data.shape
    for k in range(idx.shape[0]):
        j = idx[k]
        if j < -axis_len or j >= axis_len:
            raise IndexError("Gather: index out of range")
    n = idx.shape[0]
    for ok in prange(n_outer * n):
        o = ok // n
        k = ok - o * n
        j = idx[k]
        if j < 0:
            j += axis_len
        for i in range(inner):
            out[o, k, i] = data[o, j, i]


@njit(cache=True, error_model='numpy')
def copy3_into(x, out, offset):
    """out[o, offset + a, i] = x[o, a, i]   (one input of a Concat). x (O, A, I), out (O, B, I),
    both C-contiguous.

    For each o both sides are one contiguous run of A * I elements, copied as one slice
    (a loop nest with I == 1 innermost, a Concat on the last axis, ran ~10x slower)."""
    n_outer, a_len, inner = x.shape
    row = a_len * inner
    if row == 0 or n_outer == 0:
        return
    s = offset * inner
    if row <= _SHORT_ROW:
        # many short runs (a channels-last Concat: one run of C values per pixel): index
        # loops on flat views made once, no slice view per run (their reference counting
        # costs ~50 ns a run)
        ldo = out.shape[1] * inner
        xf = x.reshape(-1)
        of = out.reshape(-1)
        # (unsigned offsets: an int64 ``oo + j`` keeps Numba's negative-index wraparound,
        # which turned the copy into gathers and scatters)
        for o in range(n_outer):
            xo = np.uint64(o * row)
            oo = np.uint64(o * ldo + s)
            for j in range(np.uint64(row)):
                of[oo + j] = xf[xo + j]
        return
    x2 = x.reshape(n_outer, row)
    o2 = out.reshape(n_outer, out.shape[1] * inner)
    for o in range(n_outer):
        o2[o, s:s + row] = x2[o]


@njit(cache=True, error_model='numpy')
def copy3_from(x, out, offset):
    """out[o, a, i] = x[o, offset + a, i]   (one output of a Split). x (O, B, I), out (O, A, I),
    both C-contiguous; flat runs per o as in :func:`copy3_into` (a Split on the last axis is
    then one run per row, not a loop nest)."""
    n_outer, a_len, inner = out.shape
    row = a_len * inner
    if row == 0 or n_outer == 0:
        return
    x2 = x.reshape(n_outer, x.shape[1] * inner)
    o2 = out.reshape(n_outer, row)
    s = offset * inner
    for o in range(n_outer):
        o2[o, :] = x2[o, s:s + row]


@njit(cache=True, error_model='numpy')
def copy_flat(x, out):
    """out[:] = x for two contiguous 1-D arrays of the same size."""
    for i in range(x.shape[0]):
        out[i] = x[i]
