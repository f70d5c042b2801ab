"""2-D transposed convolution (NCHW; groups, strides, pads, dilations): one thread per output.

ConvTranspose scatters each input element times the kernel into the output; scattering from
many threads would need atomics (and a zeroed output first), so each thread instead gathers
its output element: output (n, k, oy, ox) takes input (n, c, iy, ix) times tap (u, v) of
``w[c, k % kout_g]`` for every input channel c of k's group and every tap with
``oy + ph = iy * sh + u * dh`` (and likewise along x), i.e. where ``oy + ph - u * dh`` is a
non-negative multiple of the stride whose quotient is a row of the input. Output padding and
an ``output_shape`` only change the output's size, which the caller passes. The weight has
ONNX's layout (C_in, C_out / group, KH, KW).
"""
from numba import cuda

from .launch import launch
from .mathfn import conv_position, grid1

BLOCK = 128


@cuda.jit
def _convt_k(x, xo, w, wo, b, bo, y, yo, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph, pw,
             dh, dw, group, has_bias, zero, total):
    i = cuda.grid(1)
    if i >= total:
        return
    ox, oy, k, n, cg, kg = conv_position(i, ow, oh, kout, c, group)
    g = k // kg
    kk = k % kg
    acc = zero  # not w[wo] * 0: w is empty when C is
    for u in range(kh):
        ty = oy + ph - u * dh
        if ty < 0 or ty % sh != 0:
            continue
        iy = ty // sh
        if iy >= h:
            continue
        for v in range(kw):
            tx = ox + pw - v * dw
            if tx < 0 or tx % sw != 0:
                continue
            ix = tx // sw
            if ix >= wd:
                continue
            for cc in range(cg):
                ch = g * cg + cc
                acc += (x[xo + ((n * c + ch) * h + iy) * wd + ix]
                        * w[wo + ((ch * kg + kk) * kh + u) * kw + v])
    if has_bias:
        acc += b[bo + k]
    y[yo + i] = acc


def conv_transpose2d(x, xo, w, wo, b, bo, y, yo, n, c, h, wd, kout, kh, kw, oh, ow,
                     sh, sw, ph, pw, dh, dw, group, has_bias):
    """``y = conv_transpose(x, w) (+ b)``: x (N, C, H, W), w (C, KOUT / group, KH, KW),
    y (N, KOUT, OH, OW); ``ph``/``pw`` are the begin pads; ``b`` (KOUT,) read when
    ``has_bias``."""
    total = n * kout * oh * ow
    if total:
        launch(_convt_k, grid1(total, BLOCK), BLOCK, x, xo, w, wo, b, bo, y, yo, c, h, wd,
               kout, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, group, has_bias,
               y.dtype.type(0), total)
