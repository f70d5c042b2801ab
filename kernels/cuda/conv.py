"""Direct 2-D convolution (NCHW, groups, strides, pads, dilations): one thread per output.

Simple and correct rather than fast: a tiled im2col + GEMM would reuse input rows through
shared memory. ``conv2d_bias_act`` fuses a bias and an activation (codes as in ``mathfn.act``).
"""
from numba import cuda

from .mathfn import act, grid1

BLOCK = 128


@cuda.jit
def _conv_k(x, xo, w, wo, b, bo, y, yo, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw,
            group, has_bias, code, alpha, total):
    i = cuda.grid(1)
    if i >= total:
        return
    ox = i % ow
    r = i // ow
    oy = r % oh
    r //= oh
    k = r % kout
    n = r // kout
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
    y[yo + i] = act(acc, code, alpha)


def conv2d_bias_act(x, xo, w, wo, b, bo, y, yo, n, c, h, wd, kout, kh, kw, oh, ow,
                    sh, sw, ph, pw, dh, dw, group, has_bias, code, alpha):
    total = n * kout * oh * ow
    if total:
        _conv_k[grid1(total, BLOCK), BLOCK](x, xo, w, wo, b, bo, y, yo, c, h, wd, kout, kh, kw,
                                            oh, ow, sh, sw, ph, pw, dh, dw, group, has_bias,
                                            code, y.dtype.type(alpha), total)


def conv2d(x, xo, w, wo, b, bo, y, yo, n, c, h, wd, kout, kh, kw, oh, ow,
           sh, sw, ph, pw, dh, dw, group, has_bias):
    conv2d_bias_act(x, xo, w, wo, b, bo, y, yo, n, c, h, wd, kout, kh, kw, oh, ow,
                    sh, sw, ph, pw, dh, dw, group, has_bias, 0, 0.0)
