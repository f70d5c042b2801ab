"""Direct 2-D convolution (NCHW, groups, strides, pads, dilations): one thread per output.

Simple and correct rather than fast: a tiled im2col + GEMM would reuse input rows through
shared memory. ``conv2d_bias_act`` fuses a bias and an activation (codes as in ``mathfn.act``),
``conv2d_bias_add_act`` a bias, a residual of the output's shape and an activation.
"""
from numba import cuda

from .launch import launch
from .mathfn import act, grid1, split2

BLOCK = 128


@cuda.jit
def _conv_k(x, xo, w, wo, b, bo, r, ro, y, yo, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph, pw,
            dh, dw, group, has_bias, has_res, code, alpha, beta, total):
    i = cuda.grid(1)
    if i >= total:
        return
    ox, oy, rr = split2(i, ow, oh)
    k = rr % kout
    n = rr // kout
    cg = c // group
    g = k // (kout // group)
    acc = w[wo] * 0
    for cc in range(cg):
        ch = g * cg + cc
        for u in range(kh):
            iy = oy * sh - ph + u * dh
            if iy < 0 or iy >= h:
                continue
            for v in range(kw):
                ix = ox * sw - pw + v * dw
                if ix < 0 or ix >= wd:
                    continue
                acc += x[xo + ((n * c + ch) * h + iy) * wd + ix] * w[wo + ((k * cg + cc) * kh + u) * kw + v]
    if has_bias:
        acc += b[bo + k]
    if has_res:  # each thread reads its residual element before writing the same position
        acc += r[ro + i]
    y[yo + i] = act(acc, code, alpha, beta)


def conv2d_bias_add_act(x, xo, w, wo, b, bo, r, ro, y, yo, n, c, h, wd, kout, kh, kw, oh, ow,
                        sh, sw, ph, pw, dh, dw, group, has_bias, has_res, code, alpha, beta):
    """``y = act(conv(x, w) + b + r)``; ``r`` (used when ``has_res``) has ``y``'s shape."""
    total = n * kout * oh * ow
    if total:
        dt = y.dtype.type
        launch(_conv_k, grid1(total, BLOCK), BLOCK, x, xo, w, wo, b, bo, r, ro, y, yo, c, h, wd,
               kout, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, group, has_bias, has_res, code,
               dt(alpha), dt(beta), total)


def conv2d_bias_act(x, xo, w, wo, b, bo, y, yo, n, c, h, wd, kout, kh, kw, oh, ow,
                    sh, sw, ph, pw, dh, dw, group, has_bias, code, alpha, beta=0.0):
    conv2d_bias_add_act(x, xo, w, wo, b, bo, y, yo, y, yo, n, c, h, wd, kout, kh, kw, oh, ow,
                        sh, sw, ph, pw, dh, dw, group, has_bias, False, code, alpha, beta)


def conv2d(x, xo, w, wo, b, bo, y, yo, n, c, h, wd, kout, kh, kw, oh, ow,
           sh, sw, ph, pw, dh, dw, group, has_bias):
    conv2d_bias_act(x, xo, w, wo, b, bo, y, yo, n, c, h, wd, kout, kh, kw, oh, ow,
                    sh, sw, ph, pw, dh, dw, group, has_bias, 0, 0.0)
