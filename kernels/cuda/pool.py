"""Max/average pooling (one thread per output) and global pooling (a block reduction)."""
import math

import numpy as np
from numba import cuda

from . import reduce as _reduce
from .launch import launch
from .mathfn import grid1, split2

BLOCK = 128


def _make_pool(dt):
    """The pooling kernel for one float dtype (typed zero and -inf: an int or a float64
    literal in the arithmetic would promote it to float64)."""
    zero, ninf = dt(0), dt(-math.inf)

    @cuda.jit
    def _pool_k(x, xo, y, yo, h, wd, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, is_max,
                include_pad, pe_h, pe_w, total):
        i = cuda.grid(1)
        if i >= total:
            return
        ox, oy, nc = split2(i, ow, oh)
        base = xo + nc * h * wd
        acc = ninf if is_max else zero
        cy = 0  # window rows inside the input (or inside the padded input with include_pad)
        for u in range(kh):
            iy = oy * sh - ph + u * dh
            if include_pad and iy < h + pe_h:
                cy += 1
            if iy < 0 or iy >= h:
                continue
            if not include_pad:
                cy += 1
            for v in range(kw):
                ix = ox * sw - pw + v * dw
                if ix < 0 or ix >= wd:
                    continue
                e = x[base + iy * wd + ix]
                if is_max:
                    if e > acc or e != e:
                        acc = e
                else:
                    acc += e
        if not is_max:
            cx = 0
            for v in range(kw):
                ix = ox * sw - pw + v
                if (include_pad and ix < wd + pe_w) or (ix >= 0 and ix < wd):
                    cx += 1
            cnt = cy * cx
            acc = acc / dt(cnt) if cnt > 0 else zero
        y[yo + i] = acc
    return _pool_k


_POOL = {np.dtype(t): _make_pool(t) for t in (np.float32, np.float64)}


def maxpool2d(x, xo, y, yo, nc, h, wd, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw):
    total = nc * oh * ow
    if total:
        launch(_POOL[y.dtype], grid1(total, BLOCK), BLOCK, x, xo, y, yo, h, wd, oh, ow, kh, kw,
               sh, sw, ph, pw, dh, dw, True, False, 0, 0, total)


def avgpool2d(x, xo, y, yo, nc, h, wd, oh, ow, kh, kw, sh, sw, ph, pw, count_include_pad,
              pad_h_end, pad_w_end):
    total = nc * oh * ow
    if total:
        launch(_POOL[y.dtype], grid1(total, BLOCK), BLOCK, x, xo, y, yo, h, wd, oh, ow, kh, kw,
               sh, sw, ph, pw, 1, 1, False, count_include_pad, pad_h_end, pad_w_end, total)


def global_avgpool(x, xo, y, yo, nc, hw):
    _reduce.reduce3d(x, xo, y, yo, nc, hw, 1, 1)


def global_maxpool(x, xo, y, yo, nc, hw):
    _reduce.reduce3d(x, xo, y, yo, nc, hw, 1, 2)
