"""CPU kernels: Resize and Upsample (nearest, linear, cubic; every coordinate transformation;
antialias), GridSample, AffineGrid. Imports nothing from jitort.

A resize is separable: every resized axis gets a table (``axis_table``) of source indices and
weights per output position, computed from the sizes, scale and ROI alone (O(output length), per
call). The tables are then applied either by one 2-D kernel over (P, H, W) views (nearest and
linear over the last two axes: the common NCHW case) or one axis at a time by ``resize_pass`` on
(O, L, I) views. Coordinates are computed in float32 as onnxruntime does, so the nearest indices
agree at ties.

Codes: mode 0 nearest, 1 linear, 2 cubic. Coordinate transformation 0 half_pixel,
1 half_pixel_symmetric, 2 pytorch_half_pixel, 3 align_corners, 4 asymmetric,
5 tf_half_pixel_for_nn, 6 tf_crop_and_resize. Nearest rounding 0 round_prefer_floor,
1 round_prefer_ceil, 2 floor, 3 ceil, 4 "simple" (opset < 11: floor up, ceil down).
"""
import math

import numpy as np
from numba import njit, prange

from .ptr import eptr

_FM = {'reassoc', 'contract', 'arcp'}
_F0 = np.float32(0.0)
_F05 = np.float32(0.5)
_F1 = np.float32(1.0)
_F2 = np.float32(2.0)


@njit(cache=True, error_model='numpy')
def _coord(i, scale, lout, lin, rs, re, coord):
    """Source coordinate (float32) of output position ``i`` (onnxruntime's float32 formulas)."""
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
    if coord == 5:
        return (x + _F05) / scale
    # tf_crop_and_resize
    if lout > 1:
        return rs * (fi - _F1) + (x * (re - rs) * (fi - _F1)) / (fo - _F1)
    return np.float32(0.5 * (np.float64(rs) + np.float64(re)) * (np.float64(fi) - 1.0))


@njit(cache=True, error_model='numpy')
def _round_nearest(c, nearest, down):
    if nearest <= 1:  # round half to floor / to ceil (std::round for the ceil case)
        fl = math.floor(c)
        f = c - np.float32(fl)
        if f > _F05 or (nearest == 1 and f == _F05):
            return np.int64(fl) + 1
        return np.int64(fl)
    if nearest == 2:
        return np.int64(math.floor(c))
    if nearest == 3:
        return np.int64(math.ceil(c))
    if down:
        return np.int64(math.ceil(c))
    return np.int64(c)


@njit(cache=True, error_model='numpy')
def _cubic_w(t, a):
    """Keys' cubic convolution weight at distance t."""
    t = abs(t)
    if t < _F1:
        return ((a + _F2) * t - (a + np.float32(3.0))) * t * t + _F1
    if t < _F2:
        return ((t - np.float32(5.0)) * t + np.float32(8.0)) * t * a - np.float32(4.0) * a
    return _F0


@njit(cache=True, error_model='numpy')
def axis_table(lin, lout, scale, rs, re, mode, coord, nearest, cubic_a, exclude, antialias):
    """(idx (lout, K) int64, w (lout, K) float32, ok (lout,) uint8) of one resized axis.

    ``scale`` <= 0: out/in (a sizes input). ``ok[i] == 0``: position i lies outside the input
    (tf_crop_and_resize; the output is the extrapolation value there). Indices are always in
    [0, lin) when lin > 0.
    """
    if scale <= 0:
        scale = np.float32(lout) / np.float32(max(lin, 1))
    scale = np.float32(scale)
    rs = np.float32(rs)
    re = np.float32(re)
    a = np.float32(cubic_a)
    hi = np.float32(lin - 1)
    extra = coord == 6
    if mode == 0:
        k = 1
    elif antialias:
        sup = np.float32(1.0) if mode == 1 else np.float32(2.0)
        if scale < _F1:
            sup = sup / scale
        k = np.int64(math.ceil(sup)) * 2 + 1
    else:
        k = 2 if mode == 1 else 4
    if antialias or lin == 0:  # short windows leave zeros behind
        idx = np.zeros((lout, k), np.int64)
        w = np.zeros((lout, k), np.float32)
    else:  # every entry is written below
        idx = np.empty((lout, k), np.int64)
        w = np.empty((lout, k), np.float32)
    ok = np.ones(lout, np.uint8)
    if lin == 0:
        return idx, w, ok
    for i in range(lout):
        c = _coord(i, scale, lout, lin, rs, re, coord)
        if extra and (c < _F0 or c > hi):
            ok[i] = 0
        if mode == 0:
            j = _round_nearest(c, nearest, scale < _F1)
            idx[i, 0] = min(max(j, 0), lin - 1)
            w[i, 0] = _F1
        elif antialias:  # Pillow-style filter widened by 1/scale when downscaling
            inv = np.float32(1.0) / scale if scale < _F1 else _F1
            sup = (np.float32(1.0) if mode == 1 else np.float32(2.0)) * inv
            center = (np.float32(i) if scale == _F1 else c) + _F05
            x0 = np.int64(math.floor(center - sup + _F05))
            x1 = np.int64(math.floor(center + sup + _F05))
            x1 = x0 + min(max(x1 - x0, 0), k)
            if exclude:  # taps outside the input are dropped, else they fold onto the edge
                x0 = min(max(x0, 0), lin)
                x1 = min(max(x1, 0), lin)
            ss = scale if scale < _F1 else _F1
            tot = _F0
            for t in range(x1 - x0):
                d = (np.float32(t + x0) - center + _F05) * ss
                if mode == 1:
                    d = abs(d)
                    wt = _F1 - d if d < _F1 else _F0
                else:
                    wt = _cubic_w(d, a)
                idx[i, t] = min(max(t + x0, 0), lin - 1)
                w[i, t] = wt
                tot += wt
            if tot != _F0:
                inv_tot = _F1 / tot
                for t in range(x1 - x0):
                    w[i, t] = w[i, t] * inv_tot
        elif mode == 1:
            cc = min(max(c, _F0), hi)
            i0 = min(np.int64(cc), lin - 1)
            i1 = min(i0 + 1, lin - 1)
            d0 = abs(cc - np.float32(i0))
            d1 = abs(cc - np.float32(i1))
            if i0 == i1:
                d0 = _F05
                d1 = _F05
            idx[i, 0] = i0
            idx[i, 1] = i1
            w[i, 0] = d1
            w[i, 1] = d0
        else:
            fl = math.floor(c)
            s = c - np.float32(fl)
            base = np.int64(fl) - 1
            tot = _F0
            for t in range(4):
                wt = _cubic_w(s - np.float32(t - 1), a)
                j = base + t
                if exclude and (j < 0 or j >= lin):
                    wt = _F0
                idx[i, t] = min(max(j, 0), lin - 1)
                w[i, t] = wt
                tot += wt
            if exclude and tot != _F0:
                for t in range(4):
                    w[i, t] = w[i, t] / tot
    return idx, w, ok


# --- separable pass over one axis: (O, L, I) -> (O, T, I) ---------------------------------------
@njit(cache=True, error_model='numpy', fastmath=_FM)
def _pass_rows(x, y, idx, w, ok, extrap, j0, j1):
    T = y.shape[1]
    ni = y.shape[2]
    k = idx.shape[1]
    ev = y.dtype.type(extrap)
    for j in range(j0, j1):
        o = j // T
        t = j % T
        if ok[t] == 0:
            for q in range(ni):
                y[o, t, q] = ev
        elif k == 1:
            s = idx[t, 0]
            for q in range(ni):
                y[o, t, q] = x[o, s, q]
        else:
            s = idx[t, 0]
            wt = w[t, 0]
            for q in range(ni):
                y[o, t, q] = x[o, s, q] * wt
            for m in range(1, k):
                s = idx[t, m]
                wt = w[t, m]
                if wt != 0:
                    for q in range(ni):
                        y[o, t, q] += x[o, s, q] * wt


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _pass_last(x, y, idx, w, ok, extrap, o0, o1):
    """I == 1: the resized axis is the innermost."""
    T = y.shape[1]
    k = idx.shape[1]
    ev = y.dtype.type(extrap)
    for o in range(o0, o1):
        if k == 1:
            for t in range(T):
                y[o, t, 0] = x[o, idx[t, 0], 0] if ok[t] else ev
        else:
            for t in range(T):
                if ok[t]:  # unsigned table indices (in range): no negative-index wraparound
                    s = x[o, np.uint64(idx[t, 0]), 0] * w[t, 0]
                    for m in range(1, k):
                        s += x[o, np.uint64(idx[t, m]), 0] * w[t, m]
                    y[o, t, 0] = s
                else:
                    y[o, t, 0] = ev


@njit(cache=True, error_model='numpy')
def _pass_any(x, y, idx, w, ok, extrap, a0, a1):
    if y.shape[2] == 1:
        _pass_last(x, y, idx, w, ok, extrap, a0, a1)
    else:
        _pass_rows(x, y, idx, w, ok, extrap, a0, a1)


@njit(cache=True, error_model='numpy')
def resize_pass(x, y, scale, rs, re, mode, coord, nearest, cubic_a, exclude, antialias, extrap):
    """Resize axis 1 of x (O, L, I) into y (O, T, I)."""
    idx, w, ok = axis_table(x.shape[1], y.shape[1], scale, rs, re, mode, coord, nearest,
                            cubic_a, exclude, antialias)
    if y.size == 0 or x.shape[1] == 0:
        return
    n = y.shape[0] if y.shape[2] == 1 else y.shape[0] * y.shape[1]
    _pass_any(x, y, idx, w, ok, extrap, 0, n)


@njit(cache=True, parallel=True, error_model='numpy')
def resize_pass_par(x, y, scale, rs, re, mode, coord, nearest, cubic_a, exclude, antialias,
                    extrap):
    idx, w, ok = axis_table(x.shape[1], y.shape[1], scale, rs, re, mode, coord, nearest,
                            cubic_a, exclude, antialias)
    if y.size == 0 or x.shape[1] == 0:
        return
    n = y.shape[0] if y.shape[2] == 1 else y.shape[0] * y.shape[1]
    nt = min(n, 64)
    for c in prange(nt):
        _pass_any(x, y, idx, w, ok, extrap, c * n // nt, (c + 1) * n // nt)


# --- 2-D over the last two axes: (P, H, W) -> (P, OH, OW) --------------------------------------
@njit(cache=True, error_model='numpy')
def _repeat_factor(iw, okw, lin):
    """f when iw[o] == o // f for every o (an integer upscale, in bounds), else 0."""
    n = iw.shape[0]
    if lin == 0 or n % lin != 0:
        return 0
    f = n // lin
    for o in range(n):
        if okw[o] == 0 or iw[o, 0] != o // f:
            return 0
    return f


@njit(cache=True, error_model='numpy')
def _nearest_int_planes(x, y, fh, fw, p0, p1):
    """Integer upscale by (fh, fw): each input row repeated fw times per element into the first
    of its fh output rows, which are then copies (near memcpy speed)."""
    W = x.shape[2]
    for p in range(p0, p1):
        for h in range(x.shape[1]):
            xr = x[p, h]
            y0 = y[p, h * fh]
            if fw == 2:
                for j in range(W):
                    v = xr[j]
                    y0[2 * j] = v
                    y0[2 * j + 1] = v
            else:
                for j in range(W):
                    v = xr[j]
                    for t in range(fw):
                        y0[j * fw + t] = v
            for q in range(1, fh):
                y1 = y[p, h * fh + q]
                for j in range(y0.shape[0]):
                    y1[j] = y0[j]


@njit(cache=True, error_model='numpy')
def _nearest_planes(x, y, ih, iw, okh, okw, extrap, p0, p1):
    """Each output row is made once from its source row (a x2 / xf column repeat or a gather)
    and copied to the next output rows with the same source row."""
    OH = y.shape[1]
    OW = y.shape[2]
    W = x.shape[2]
    ev = y.dtype.type(extrap)
    f = _repeat_factor(iw, okw, W)
    fh = _repeat_factor(ih, okh, x.shape[1])
    if f > 0 and fh > 0:
        _nearest_int_planes(x, y, fh, f, p0, p1)
        return
    for p in range(p0, p1):
        for oh in range(OH):
            yr = y[p, oh]
            if okh[oh] == 0:
                for ow in range(OW):
                    yr[ow] = ev
            elif oh > 0 and okh[oh - 1] != 0 and ih[oh, 0] == ih[oh - 1, 0]:
                yp = y[p, oh - 1]
                for ow in range(OW):
                    yr[ow] = yp[ow]
            else:
                xr = x[p, ih[oh, 0]]
                if f == 2:
                    for j in range(xr.shape[0]):
                        v = xr[j]
                        yr[2 * j] = v
                        yr[2 * j + 1] = v
                elif f == 1:
                    for ow in range(OW):
                        yr[ow] = xr[ow]
                elif f > 2:
                    for j in range(W):
                        v = xr[j]
                        for t in range(f):
                            yr[j * f + t] = v
                else:
                    for ow in range(OW):
                        yr[ow] = xr[iw[ow, 0]] if okw[ow] else ev


@njit(inline='always')
def _hrow(x, p, a, t, slot, iw, ww):
    """t[slot] = input row a of plane p interpolated along W (two taps per output column).
    Unsigned table indices (in range): Numba's negative-index wraparound on each gathered
    index would cost a noticeable share of an upscale."""
    for ow in range(t.shape[1]):
        t[slot, ow] = (x[p, a, np.uint64(iw[ow, 0])] * ww[ow, 0]
                       + x[p, a, np.uint64(iw[ow, 1])] * ww[ow, 1])


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _linear_planes(x, y, ih, wh, iw, ww, okh, okw, extrap, p0, p1):
    """Bilinear: each needed input row is interpolated horizontally once into one of two
    cached rows (kept while the next output rows still read it), then two rows are blended
    per output row. N-D indexing throughout (no row views: small planes stay cheap)."""
    OH = y.shape[1]
    OW = y.shape[2]
    ev = y.dtype.type(extrap)
    t = np.empty((2, OW), y.dtype)
    anyext = False
    for ow in range(OW):
        if okw[ow] == 0:
            anyext = True
    for p in range(p0, p1):
        src0 = -1  # input row held in t[0] / t[1]
        src1 = -1
        for oh in range(OH):
            if okh[oh] == 0:
                for ow in range(OW):
                    y[p, oh, ow] = ev
                continue
            a = ih[oh, 0]
            b = ih[oh, 1]
            sa = 0 if src0 == a else (1 if src1 == a else -1)
            if sa < 0:  # fill the slot not holding b
                sa = 1 if src0 == b and src0 != src1 else 0
                _hrow(x, p, a, t, sa, iw, ww)
                if sa == 0:
                    src0 = a
                else:
                    src1 = a
            sb = 0 if src0 == b else (1 if src1 == b else -1)
            if sb < 0:
                sb = 1 - sa
                _hrow(x, p, b, t, sb, iw, ww)
                if sb == 0:
                    src0 = b
                else:
                    src1 = b
            w0 = wh[oh, 0]
            w1 = wh[oh, 1]
            for ow in range(OW):
                y[p, oh, ow] = t[sa, ow] * w0 + t[sb, ow] * w1
            if anyext:
                for ow in range(OW):
                    if okw[ow] == 0:
                        y[p, oh, ow] = ev


@njit(cache=True, error_model='numpy')
def _tables2(x, y, sh, sw, rsh, reh, rsw, rew, mode, coord, nearest):
    ih, wh, okh = axis_table(x.shape[1], y.shape[1], sh, rsh, reh, mode, coord, nearest,
                             -0.75, False, False)
    iw, ww, okw = axis_table(x.shape[2], y.shape[2], sw, rsw, rew, mode, coord, nearest,
                             -0.75, False, False)
    return ih, wh, okh, iw, ww, okw


@njit(cache=True, error_model='numpy')
def resize2d(x, y, sh, sw, rsh, reh, rsw, rew, mode, coord, nearest, extrap):
    """Nearest (mode 0) or linear (mode 1) resize of the last two axes: x (P, H, W) ->
    y (P, OH, OW)."""
    ih, wh, okh, iw, ww, okw = _tables2(x, y, sh, sw, rsh, reh, rsw, rew, mode, coord, nearest)
    if y.size == 0 or x.shape[1] == 0 or x.shape[2] == 0:
        return
    if mode == 0:
        _nearest_planes(x, y, ih, iw, okh, okw, extrap, 0, y.shape[0])
    else:
        _linear_planes(x, y, ih, wh, iw, ww, okh, okw, extrap, 0, y.shape[0])


@njit(cache=True, parallel=True, error_model='numpy')
def resize2d_par(x, y, sh, sw, rsh, reh, rsw, rew, mode, coord, nearest, extrap):
    ih, wh, okh, iw, ww, okw = _tables2(x, y, sh, sw, rsh, reh, rsw, rew, mode, coord, nearest)
    if y.size == 0 or x.shape[1] == 0 or x.shape[2] == 0:
        return
    P = y.shape[0]
    if P == 1:  # one plane: split its rows (each chunk restarts its row cache)
        OH = y.shape[1]
        nt = min(OH, 16)
        for c in prange(nt):
            h0 = c * OH // nt
            h1 = (c + 1) * OH // nt
            yv = y[:, h0:h1]
            if mode == 0:
                _nearest_planes(x, yv, ih[h0:h1], iw, okh[h0:h1], okw, extrap, 0, 1)
            else:
                _linear_planes(x, yv, ih[h0:h1], wh[h0:h1], iw, ww, okh[h0:h1], okw, extrap,
                               0, 1)
        return
    nt = min(P, 64)
    for c in prange(nt):
        p0 = c * P // nt
        p1 = (c + 1) * P // nt
        if mode == 0:
            _nearest_planes(x, y, ih, iw, okh, okw, extrap, p0, p1)
        else:
            _linear_planes(x, y, ih, wh, iw, ww, okh, okw, extrap, p0, p1)


# --- GridSample ------------------------------------------------------------------------------
# A plan per batch item: for every output point K flat plane indices and weights (nearest 1,
# linear 2**D, cubic 16 taps), padding applied at plan time (zeros: weight 0; border: clamped
# index; reflection: reflected index), then applied to every channel. Coordinates as
# onnxruntime: unnormalized, not clipped; padding per tap.

@njit(cache=True, error_model='numpy')
def _gs_denorm(v, length, align):
    if align:
        return (v + 1.0) / 2.0 * (length - 1)
    return ((v + 1.0) * length - 1.0) / 2.0


@njit(cache=True, error_model='numpy')
def _gs_reflect(x, lo, hi):
    rng = hi - lo
    if x < lo:
        dx = lo - x
        n = int(dx / rng)
        r = dx - n * rng
        return lo + r if n % 2 == 0 else hi - r
    if x > hi:
        dx = x - hi
        n = int(dx / rng)
        r = dx - n * rng
        return hi - r if n % 2 == 0 else lo + r
    return x


@njit(cache=True, error_model='numpy')
def _gs_tap(i, length, pad, align):
    """(index, valid) of integer tap i along an axis of ``length`` under the padding mode."""
    if pad == 0:
        if i < 0 or i >= length:
            return 0, False
        return i, True
    if pad == 1:
        return min(max(i, 0), length - 1), True
    lo, hi = (0.0, length - 1.0) if align else (-0.5, length - 0.5)
    j = np.int64(_gs_reflect(np.float64(i), lo, hi))
    return min(max(j, 0), length - 1), True


@njit(cache=True, error_model='numpy')
def _gs_cubic(t):
    a = -0.75
    c0 = ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a
    c1 = ((a + 2) * t - (a + 3)) * t * t + 1
    c2 = ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1
    c3 = ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a
    return c0, c1, c2, c3


@njit(cache=True, error_model='numpy')
def gridsample_plan(g, dims, mode, pad, align, wdt):
    """g (P, D) grid points (x first: reversed axis order), dims the input sizes (3, outer first,
    leading 1s when D < 3)
    -> idx (P, K) flat indices, w (P, K) of wdt's dtype, full (P,) 1 where every tap is inside
    (else the outside taps have weight 0 and must not be read)."""
    P = g.shape[0]
    D = g.shape[1]
    if mode == 0:
        K = 1
    elif mode == 1:
        K = 1 << D
    else:
        K = 4 ** D
    idx = np.zeros((P, K), np.int64)
    w = np.zeros((P, K), wdt.dtype)
    full = np.ones(P, np.uint8)
    o3 = 3 - D
    if D == 2 and mode == 1:
        H = dims[1]
        W = dims[2]
        for p in range(P):
            cx = _gs_denorm(np.float64(g[p, 0]), W, align)
            cy = _gs_denorm(np.float64(g[p, 1]), H, align)
            fx = np.floor(cx)
            fy = np.floor(cy)
            ax = cx - fx
            ay = cy - fy
            x0 = np.int64(fx)
            y0 = np.int64(fy)
            if pad == 0 and x0 >= 0 and y0 >= 0 and x0 + 1 < W and y0 + 1 < H:  # inside
                idx[p, 0] = y0 * W + x0
                idx[p, 1] = y0 * W + x0 + 1
                idx[p, 2] = (y0 + 1) * W + x0
                idx[p, 3] = (y0 + 1) * W + x0 + 1
                w[p, 0] = (1.0 - ay) * (1.0 - ax)
                w[p, 1] = (1.0 - ay) * ax
                w[p, 2] = ay * (1.0 - ax)
                w[p, 3] = ay * ax
                continue
            for k in range(4):
                oy = k >> 1
                ox = k & 1
                jy, vy = _gs_tap(y0 + oy, H, pad, align)
                jx, vx = _gs_tap(x0 + ox, W, pad, align)
                idx[p, k] = jy * W + jx
                if vy and vx:
                    w[p, k] = (ay if oy else 1.0 - ay) * (ax if ox else 1.0 - ax)
                else:
                    full[p] = 0
        return idx, w, full
    base = np.zeros(D, np.int64)
    frac = np.zeros(D, np.float64)
    cw = np.zeros((D, 4), np.float64)
    for p in range(P):
        for d in range(D):
            L = dims[o3 + d]
            c = _gs_denorm(np.float64(g[p, D - 1 - d]), L, align)
            if mode == 0:
                base[d] = np.int64(np.rint(c))
            elif mode == 1:
                f = np.floor(c)
                base[d] = np.int64(f)
                frac[d] = c - f
            else:
                f = np.floor(c)
                base[d] = np.int64(f) - 1
                c0, c1, c2, c3 = _gs_cubic(c - f)
                cw[d, 0] = c0
                cw[d, 1] = c1
                cw[d, 2] = c2
                cw[d, 3] = c3
        for k in range(K):
            flat = 0
            wt = 1.0
            ok = True
            r = k
            for d in range(D - 1, -1, -1):  # digit of k per axis, innermost axis fastest
                if mode == 0:
                    off = 0
                elif mode == 1:
                    off = r & 1
                    r >>= 1
                    wt *= frac[d] if off else 1.0 - frac[d]
                else:
                    off = r & 3
                    r >>= 2
                    wt *= cw[d, off]
                j, valid = _gs_tap(base[d] + off, dims[o3 + d], pad, align)
                ok = ok and valid
                stride = 1
                for e in range(d + 1, D):
                    stride *= dims[o3 + e]
                flat += j * stride
            idx[p, k] = flat
            w[p, k] = wt if ok else 0.0
            if not ok:
                full[p] = 0
    return idx, w, full


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _gs_apply(x, y, idx, w, full, c0, c1):
    P = idx.shape[0]
    K = idx.shape[1]
    for c in range(c0, c1):
        if K == 4:  # bilinear: the common case, unrolled
            for p in range(P):
                if full[p]:
                    # unsigned indices (the plan's are in range): Numba's negative-index
                    # wraparound on each took ~20% of this loop
                    i0 = np.uint64(idx[p, 0])
                    i1 = np.uint64(idx[p, 1])
                    i2 = np.uint64(idx[p, 2])
                    i3 = np.uint64(idx[p, 3])
                    y[c, p] = (w[p, 0] * x[c, i0] + w[p, 1] * x[c, i1]
                               + w[p, 2] * x[c, i2] + w[p, 3] * x[c, i3])
                else:
                    s = y.dtype.type(0)
                    for k in range(4):
                        if w[p, k] != 0:
                            s += w[p, k] * x[c, idx[p, k]]
                    y[c, p] = s
        elif K == 1:
            for p in range(P):
                y[c, p] = x[c, idx[p, 0]] if full[p] else y.dtype.type(0)
        else:
            for p in range(P):
                s = y.dtype.type(0)
                for k in range(K):
                    wt = w[p, k]
                    if wt != 0:
                        s += wt * x[c, idx[p, k]]
                y[c, p] = s


@njit(cache=True, error_model='numpy')
def gridsample(x, g, y, dims, mode, pad, align):
    """x (N, C, S) with S = prod(dims), g (N, P, D), y (N, C, P)."""
    for n in range(x.shape[0]):
        idx, w, full = gridsample_plan(g[n], dims, mode, pad, align, y[0, 0, :1])
        _gs_apply(x[n], y[n], idx, w, full, 0, x.shape[1])


@njit(cache=True, parallel=True, error_model='numpy')
def gridsample_par(x, g, y, dims, mode, pad, align):
    C = x.shape[1]
    for n in range(x.shape[0]):
        idx, w, full = gridsample_plan(g[n], dims, mode, pad, align, y[0, 0, :1])
        nt = min(C, 64)
        for t in prange(nt):
            _gs_apply(x[n], y[n], idx, w, full, t * C // nt, (t + 1) * C // nt)


@njit(cache=True, error_model='numpy')
def _ag_base(L, align):
    b = np.empty(L, np.float64)
    for i in range(L):
        if align:
            b[i] = -1.0 + 2.0 * i / (L - 1) if L > 1 else 1.0  # onnxruntime's 1-point linspace
        else:
            b[i] = (2.0 * i + 1.0) / L - 1.0
    return b


#: grid points from which a 2-D AffineGrid splits its rows over the threads (prange chunks, as
#: the other kernels here: gemm.num_threads would import the BLAS module)
_AG_PAR_POINTS = 1 << 16


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _ag2_rows(theta, o, by, bx, t0, t1):
    """Rows t0..t1-1 (t = n*H + h) of the 2-D grid o (N, H, W, 2): per point two multiply-adds
    in the output's type on the row's own offsets (bx in that type too), one flat loop over
    the row's (x, y) pairs (element by element in float64 through o[n, h, w, e], the loop does
    not vectorize)."""
    H, W = o.shape[1], o.shape[2]
    ty = o.dtype.type
    for t in range(t0, t1):
        n = t // H
        h = t - n * H
        r0 = ty(theta[n, 0, 1] * by[h] + theta[n, 0, 2])
        r1 = ty(theta[n, 1, 1] * by[h] + theta[n, 1, 2])
        a0 = ty(theta[n, 0, 0])
        a1 = ty(theta[n, 1, 0])
        row = eptr(o, t * W * 2)
        for w in range(W):
            x = bx[w]
            row[2 * w] = a0 * x + r0
            row[2 * w + 1] = a1 * x + r1


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _ag2_par(nw, theta, o, by, bx):
    rows = o.shape[0] * o.shape[1]
    for w in prange(nw):
        _ag2_rows(theta, o, by, bx, w * rows // nw, (w + 1) * rows // nw)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def affine_grid(theta, out, dims, align):
    """theta (N, D, D+1), out (N, P, D) with P = prod(dims) (dims: 3 sizes, outer first, a leading 1 when D = 2);
    out[n, p] = theta[n] @ [x, y(, z), 1] with the base coordinates of point p in [-1, 1]."""
    N = theta.shape[0]
    D = theta.shape[1]
    if D == 2:
        H = dims[1]
        W = dims[2]
        by = _ag_base(H, align)
        bx = _ag_base(W, align).astype(out.dtype)
        o = out.reshape((N, H, W, 2))
        if N * H > 1 and N * H * W >= _AG_PAR_POINTS:
            _ag2_par(min(N * H, 64), theta, o, by, bx)  # chunks; prange spreads them
        else:
            _ag2_rows(theta, o, by, bx, 0, N * H)
        return
    Z = dims[0]
    H = dims[1]
    W = dims[2]
    bz = _ag_base(Z, align)
    by = _ag_base(H, align)
    bx = _ag_base(W, align).astype(out.dtype)
    ty = out.dtype.type
    for n in range(N):
        a0, a1, a2 = ty(theta[n, 0, 0]), ty(theta[n, 1, 0]), ty(theta[n, 2, 0])
        for z in range(Z):
            for h in range(H):   # one row of (x, y, z) triples, as _ag2_rows
                r0 = ty(theta[n, 0, 1] * by[h] + theta[n, 0, 2] * bz[z] + theta[n, 0, 3])
                r1 = ty(theta[n, 1, 1] * by[h] + theta[n, 1, 2] * bz[z] + theta[n, 1, 3])
                r2 = ty(theta[n, 2, 1] * by[h] + theta[n, 2, 2] * bz[z] + theta[n, 2, 3])
                row = eptr(out, ((n * Z + z) * H + h) * W * 3)
                for w in range(W):
                    x = bx[w]
                    row[3 * w] = a0 * x + r0
                    row[3 * w + 1] = a1 * x + r1
                    row[3 * w + 2] = a2 * x + r2
