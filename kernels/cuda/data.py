"""Data movement: strided N-d copies (Transpose, Slice, Concat, Split) and Gather."""
from numba import cuda

from .launch import launch
from .mathfn import grid1, split2

BLOCK = 128
#: Rank of the strided copy (shorter shapes are padded with leading 1s).
RANK = 6


@cuda.jit
def _copy_k(x, xo, xs, y, yo, ys, n, total):
    i = cuda.grid(1)
    if i >= total:
        return
    r = i
    src = xo
    dst = yo
    for k in range(RANK - 1, -1, -1):
        q = r % n[k]
        r //= n[k]
        src += q * xs[k]
        dst += q * ys[k]
    y[dst] = x[src]


def _pad(t, fill):
    t = tuple(int(v) for v in t)
    return (fill,) * (RANK - len(t)) + t


def copy_nd(x, xo, xstrides, y, yo, ystrides, shape):
    """``y[yo + sum(i*ys)] = x[xo + sum(i*xs)]`` over every index ``i`` of ``shape``
    (strides in elements, rank at most ``RANK``)."""
    total = 1
    for s in shape:
        total *= int(s)
    if total:
        launch(_copy_k, grid1(total, BLOCK), BLOCK, x, xo, _pad(xstrides, 0), y, yo,
               _pad(ystrides, 0), _pad(shape, 1), total)


@cuda.jit
def _gather_k(data, do, idx, io, y, yo, a, k, inner, total, err):
    i = cuda.grid(1)
    if i >= total:
        return
    e, j, o = split2(i, inner, k)
    q = idx[io + j]
    if q < 0:
        q += a
    if q < 0 or q >= a:  # out of range: flagged, checked by the host after the segment
        err[0] = 1
        y[yo + i] = 0
    else:
        y[yo + i] = data[do + (o * a + q) * inner + e]


def gather3(data, do, idx, io, y, yo, outer, a, k, inner, err):
    """``y[o, j, e] = data[o, idx[j], e]`` on (outer, a, inner) data and k indices; an index
    out of ``[-a, a)`` sets ``err[0] = 1`` (a device int32 flag) and writes 0."""
    total = outer * k * inner
    if total:
        launch(_gather_k, grid1(total, BLOCK), BLOCK, data, do, idx, io, y, yo, a, k, inner, total,
               err)


@cuda.jit
def _clear_k(err):
    err[0] = 0


def clear_flag(err):
    """``err[0] = 0``: a driver that checks indices clears its flag first, on its stream."""
    launch(_clear_k, 1, 1, err)
