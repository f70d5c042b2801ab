"""Element gathers: GatherElements, one thread per output element.

The ONNX op picks, for every index element, the data element at the same coordinates except
along ``axis``, where the index's value is taken. The compiler lowers it here (instead of
handing it to the CPU backend) so a GPU model that gathers by index (a RoBERTa export) keeps
its tensors on the device. Indices are int32 or int64; a negative index wraps once; an index
still out of ``[0, a)`` sets the int32 device flag ``err[0] = 1`` (checked by the host after
the segment, as Gather's in ``data.py``) and writes 0.
"""
from numba import cuda

from .launch import launch
from .mathfn import grid1

BLOCK = 128
#: Rank of the gather (shorter shapes are padded with leading 1s).
RANK = 6


@cuda.jit
def _gather_el_k(data, do, idx, io, y, yo, n, xs, a, astride, total, err):
    i = cuda.grid(1)
    if i >= total:
        return
    r = i
    src = do
    for k in range(RANK - 1, -1, -1):  # the index element's coordinates, off the axis
        q = r % n[k]
        r //= n[k]
        src += q * xs[k]
    j = idx[io + i]
    if j < 0:
        j += a
    if j < 0 or j >= a:  # out of range: flagged, checked by the host after the segment
        err[0] = 1
        y[yo + i] = 0
    else:
        y[yo + i] = data[src + j * astride]


def _pad(t, fill):
    t = tuple(int(v) for v in t)
    return (fill,) * (RANK - len(t)) + t


def gather_elements(data, do, idx, io, y, yo, shape, xstrides, a, astride, err):
    """``y[i] = data[sum(i_k * xs_k) + idx[i] * astride]`` over every index ``i`` of ``shape``
    (the indices' shape, rank at most ``RANK``; ``xstrides``: the data's strides in elements
    with 0 on the gathered axis, ``a`` its extent, ``astride`` its stride). An index out of
    ``[-a, a)`` sets ``err[0] = 1`` (a device int32 flag) and writes 0."""
    total = 1
    for s in shape:
        total *= int(s)
    if total:
        launch(_gather_el_k, grid1(total, BLOCK), BLOCK, data, do, idx, io, y, yo,
               _pad(shape, 1), _pad(xstrides, 0), a, astride, total, err)
