"""CUDA kernels of Pad (constant, reflect, edge, wrap; negative pads crop) and Resize (nearest
on any axes, bilinear on two adjacent ones), one thread per output element computing its source.

They keep Pad and Resize of a GPU model on the device (without them each one cost a
device-to-host copy, a CPU kernel and a copy back, mid-model). The formulas are those of the
CPU kernels (``kernels/cpu/resize.py``, ``kernels/cpu/shape_ops.py``), which match
onnxruntime: source coordinates in float32 (so that nearest indices agree at ties), bilinear
weights of the clamped coordinate, a pad's reflection without repeating the edge. An axis of
scale 1 maps i to i whatever the coordinate mode (onnxruntime skips its transformation): the
lowering passes such axes as identities.

Codes (as the CPU kernels): coordinate transformation 0 half_pixel, 1 half_pixel_symmetric,
2 pytorch_half_pixel, 3 align_corners, 4 asymmetric, 5 tf_half_pixel_for_nn; nearest
rounding 0 round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil; pad mode 0 constant,
1 reflect, 2 edge, 3 wrap. A scale < 0 means out/in (a Resize by sizes).
"""
import math

import numpy as np
from numba import cuda

from .launch import launch
from .mathfn import grid1, split2

BLOCK = 128
#: Rank of Pad and of nearest Resize (shorter shapes are padded with leading 1s).
RANK = 6

_F0 = np.float32(0.0)
_F05 = np.float32(0.5)
_F1 = np.float32(1.0)
_F2 = np.float32(2.0)


@cuda.jit(device=True)
def _clamp(j, lo, hi):
    """``j`` clamped to [lo, hi] (the builtins min and max are generic overloads that Numba's
    CUDA target does not compile)."""
    if j < lo:
        return lo
    return hi if j > hi else j


def _lead(t, fill, cast=int):
    t = tuple(cast(v) for v in t)
    return (cast(fill),) * (RANK - len(t)) + t


def _total(shape) -> int:
    total = 1
    for s in shape:
        total *= int(s)
    return total


# --- Pad ---------------------------------------------------------------------------------------

@cuda.jit(device=True)
def _pad_src(i, n, mode):
    """Input index of the out-of-range index ``i`` along an axis of ``n`` > 0 elements:
    reflect (period 2n - 2), edge (clamped) or wrap."""
    if mode == 2:
        return 0 if i < 0 else n - 1
    if mode == 1:
        if n == 1:
            return 0
        p = 2 * n - 2
        i = i % p  # Numba's % is Python's (floored); the guards keep C's truncated one right
        if i < 0:
            i += p
        return p - i if i >= n else i
    i = i % n
    if i < 0:
        i += n
    return i


@cuda.jit
def _pad_k(x, xo, xs, y, yo, ys, b, c, nn, cv, co, hasv, mode, total):
    i = cuda.grid(1)
    if i >= total:
        return
    r = i
    src = xo
    outside = False
    for k in range(RANK - 1, -1, -1):
        o = r % ys[k]
        r //= ys[k]
        j = o - b[k]
        if j < 0 or j >= nn[k]:
            if mode == 0:
                outside = True
            else:
                j = _pad_src(j, nn[k], mode)
        src += (j + c[k]) * xs[k]
    if outside:
        if hasv:
            y[yo + i] = cv[co]
        else:
            y[yo + i] = 0
    else:
        y[yo + i] = x[src]


def pad_nd(x, xo, xstrides, y, yo, yshape, begin, crop, extent, cv, co, hasv, mode):
    """Pad: ``y`` (``yshape``, C order) from ``x`` (element strides ``xstrides``). Per axis
    ``begin`` (>= 0) elements of padding before, ``crop`` (>= 0) input elements skipped at the
    start and ``extent`` input elements left after cropping, which the modes refer to (the
    crop is applied first, as onnxruntime does). Constant mode writes ``cv[co]`` (``hasv``),
    else 0. Rank at most ``RANK``; every ``extent`` > 0 where a non-constant mode pads."""
    total = _total(yshape)
    if total:
        launch(_pad_k, grid1(total, BLOCK), BLOCK, x, xo, _lead(xstrides, 0), y, yo,
               _lead(yshape, 1), _lead(begin, 0), _lead(crop, 0), _lead(extent, 1), cv, co,
               hasv, mode, total)


# --- Resize ------------------------------------------------------------------------------------

@cuda.jit(device=True)
def _coord(i, scale, lout, lin, coord):
    """Source coordinate (float32) of output position ``i``: onnxruntime's float32 formulas."""
    x = np.float32(i)
    fo = np.float32(lout)
    fi = np.float32(lin)
    if coord == 0:
        return (x + _F05) / scale - _F05
    if coord == 1:
        adj = fo / (scale * fi)
        center = fi / _F2
        off = center * (_F1 - adj)
        return off + (x + _F05) / scale - _F05
    if coord == 2:
        if lout > 1:
            return (x + _F05) / scale - _F05
        return _F0
    if coord == 3:
        if lout == 1:
            return _F0
        return x * (fi - _F1) / (fo - _F1)
    if coord == 4:
        return x / scale
    return (x + _F05) / scale


@cuda.jit(device=True)
def _scale32(scale, lout, lin):
    if scale < 0:
        return np.float32(lout) / np.float32(lin if lin > 1 else 1)
    return np.float32(scale)


@cuda.jit(device=True)
def _nearest_index(i, scale, lout, lin, coord, nearest):
    """The clamped input index output position ``i`` copies (``scale`` 0: ``i`` itself)."""
    if scale == 0:
        return i
    c = _coord(i, _scale32(scale, lout, lin), lout, lin, coord)
    fl = math.floor(c)  # an int on the host, a float32 on a GPU: both cast below
    j = np.int64(fl)
    if nearest <= 1:
        f = c - np.float32(fl)
        if f > _F05 or (nearest == 1 and f == _F05):
            j += 1
    elif nearest == 3:
        j = np.int64(math.ceil(c))
    return _clamp(j, 0, lin - 1)


@cuda.jit
def _nearest_k(x, xo, xs, y, yo, ys, sc, coord, nearest, total):
    i = cuda.grid(1)
    if i >= total:
        return
    r = i
    src = xo
    acc = 1
    for k in range(RANK - 1, -1, -1):
        o = r % ys[k]
        r //= ys[k]
        src += _nearest_index(o, sc[k], ys[k], xs[k], coord, nearest) * acc
        acc *= xs[k]
    y[yo + i] = x[src]


def resize_nearest(x, xo, y, yo, xshape, yshape, coord, nearest, *scales):
    """Nearest Resize of ``x`` (``xshape``, C order) into ``y`` (``yshape``); one float scale
    per axis (< 0: out/in; 0: the identity), passed as float32 as the coordinate formulas
    compute. Rank at most ``RANK``; no input axis empty."""
    total = _total(yshape)
    if total:
        launch(_nearest_k, grid1(total, BLOCK), BLOCK, x, xo, _lead(xshape, 1), y, yo,
               _lead(yshape, 1), _lead(scales, 0.0, np.float32), coord, nearest, total)


@cuda.jit(device=True)
def _linear_taps(o, scale, lout, lin, coord, ident):
    """(i0, i1, w0, w1): the two input positions output ``o`` blends and their weights, as the
    CPU's axis table (the coordinate clamped to [0, lin - 1]); i0 == i1 reads one element."""
    if ident:
        return o, o, _F1, _F0
    c = _coord(o, _scale32(scale, lout, lin), lout, lin, coord)
    cc = _clamp(c, _F0, np.float32(lin - 1))
    i0 = _clamp(np.int64(cc), 0, lin - 1)
    i1 = _clamp(i0 + 1, 0, lin - 1)
    return i0, i1, abs(cc - np.float32(i1)), abs(cc - np.float32(i0))


@cuda.jit(device=True)
def _hblend(x, row, j0, j1, v0, v1, inner):
    if j0 == j1:
        return x[row + j0 * inner]
    return x[row + j0 * inner] * v0 + x[row + j1 * inner] * v1


@cuda.jit
def _linear_k(x, xo, y, yo, h, w, inner, oh, ow, sh, sw, coord, idh, idw, total):
    i = cuda.grid(1)
    if i >= total:
        return
    e = i % inner
    q, t, p = split2(i // inner, ow, oh)
    a0, a1, u0, u1 = _linear_taps(t, sh, oh, h, coord, idh)
    j0, j1, v0, v1 = _linear_taps(q, sw, ow, w, coord, idw)
    base = xo + p * h * w * inner + e
    top = _hblend(x, base + a0 * w * inner, j0, j1, v0, v1, inner)
    if a0 == a1:
        y[yo + i] = top
    else:
        y[yo + i] = top * u0 + _hblend(x, base + a1 * w * inner, j0, j1, v0, v1, inner) * u1


def resize_linear2d(x, xo, y, yo, p, h, w, inner, oh, ow, sh, sw, coord, ident_h, ident_w):
    """Bilinear Resize of two adjacent axes: ``x`` (p, h, w, inner) -> ``y`` (p, oh, ow,
    inner), float scales ``sh``, ``sw`` (< 0: out/in); an ``ident_*`` axis maps i to i
    (copied). Each output blends two input rows, each interpolated along w first (the CPU
    kernel's order); ``h`` and ``w`` > 0."""
    total = p * oh * ow * inner
    if total:
        launch(_linear_k, grid1(total, BLOCK), BLOCK, x, xo, y, yo, h, w, inner, oh, ow,
               np.float32(sh), np.float32(sw), coord, ident_h, ident_w, total)
