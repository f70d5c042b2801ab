import numpy as np
import pytest

from jitort.kernels.cpu import conv as CV

DTYPES = [np.float32, np.float64]


def _out_size(h, k, s, pb, pe, d):
    return (h + pb + pe - d * (k - 1) - 1) // s + 1


def _run(dtype, n, c, h, w, m, kh, kw, stride=(1, 1), pads=(0, 0, 0, 0), dil=(1, 1),
         group=1, bias=True, act=0, alpha=0.0, beta=0.0, res=False, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((m, c // group, kh, kw)).astype(dtype)
    b = rng.standard_normal(m).astype(dtype) if bias else np.zeros(1, dtype)
    oh = _out_size(h, kh, stride[0], pads[0], pads[2], dil[0])
    ow = _out_size(w, kw, stride[1], pads[1], pads[3], dil[1])
    out = np.full((n, m, oh, ow), np.nan, dtype)
    col = np.full(CV.conv2d_scratch_elems(c, kh, kw, oh, ow, group, None, m, stride, dil, w), np.nan,
                  dtype)
    args = (stride[0], stride[1], pads[0], pads[1], dil[0], dil[1], group, bias)
    r = rng.standard_normal(out.shape).astype(dtype)
    if res:
        CV.conv2d_bias_add_act(x, wt, b, r, out, col, *args, act, alpha, beta)
    elif act:
        CV.conv2d_bias_act(x, wt, b, out, col, *args, act, alpha, beta)
    else:
        CV.conv2d(x, wt, b, out, col, *args)
    return x, wt, (b if bias else None), r, out


def _np_conv(x, wt, b, stride, pads, dil, group):
    """Naive float64 reference (ORT has no double Conv)."""
    n, c, h, w = x.shape
    m, cg, kh, kw = wt.shape
    oh = _out_size(h, kh, stride[0], pads[0], pads[2], dil[0])
    ow = _out_size(w, kw, stride[1], pads[1], pads[3], dil[1])
    big = max(pads) + max(kh, kw) * max(dil) + max(stride) * (oh + ow)
    xp = np.zeros((n, c, h + pads[0] + big, w + pads[1] + big))
    xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + w] = x
    out = np.zeros((n, m, oh, ow))
    mg = m // group
    for g in range(group):
        xs = xp[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                r0, c0 = i * dil[0], j * dil[1]
                patch = xs[:, :, r0:r0 + stride[0] * oh:stride[0], c0:c0 + stride[1] * ow:stride[1]]
                out[:, g * mg:(g + 1) * mg] += np.einsum('nchw,mc->nmhw', patch,
                                                         wt[g * mg:(g + 1) * mg, :, i, j])
    if b is not None:
        out += b[None, :, None, None]
    return out


def _ref(ort_node, x, wt, b, stride, pads, dil, group):
    if x.dtype == np.float64:
        return _np_conv(x, wt, b, stride, pads, dil, group)
    return ort_node('Conv', [x, wt, b], strides=list(stride), pads=list(pads),
                    dilations=list(dil), group=group)


def _close(got, ref, dtype):
    rt = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, ref, rtol=rt, atol=rt)


CASES = [
    # n, c, h, w, m, kh, kw, stride, pads(hb, wb, he, we), dil, group
    (1, 3, 7, 6, 4, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),
    (2, 3, 8, 9, 5, 3, 2, (2, 1), (1, 0, 0, 1), (1, 1), 1),
    (1, 2, 9, 9, 3, 3, 3, (1, 2), (2, 2, 2, 2), (2, 2), 1),
    (2, 4, 6, 5, 6, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 2),
    (2, 4, 7, 8, 4, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 4),    # depthwise
    (1, 5, 9, 7, 5, 5, 3, (2, 3), (2, 1, 1, 2), (1, 2), 5),    # depthwise, odd
    (1, 4, 6, 6, 8, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 4),    # multiplier 2 (not dw)
    (2, 6, 5, 4, 3, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),    # pointwise fast path
    (1, 6, 5, 4, 4, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 2),    # grouped pointwise
    (1, 3, 5, 5, 2, 1, 1, (2, 2), (0, 0, 0, 0), (1, 1), 1),    # 1x1 strided
    (1, 3, 4, 4, 2, 1, 1, (1, 1), (1, 1, 1, 1), (1, 1), 1),    # 1x1 padded
    (1, 1, 1, 1, 1, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),
    (1, 2, 3, 3, 2, 3, 3, (1, 1), (0, 0, 0, 0), (1, 1), 1),    # 1x1 output
    (1, 2, 2, 3, 2, 3, 3, (3, 3), (2, 2, 2, 2), (1, 1), 1),    # big pads
    (1, 2, 4, 4, 2, 2, 2, (1, 1), (0, 0, 1, 1), (1, 1), 1),    # end pads only
    (1, 3, 1, 11, 4, 1, 3, (1, 2), (0, 1, 0, 1), (1, 1), 1),   # conv1d as H=1
    # strided depthwise with short output rows: blocks of 16 channels, channels last
    # (conv._dw_cblock)
    (2, 37, 7, 7, 37, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 37),  # 2 full blocks + 5, stride 2
    (1, 20, 11, 9, 20, 5, 3, (3, 2), (0, 2, 1, 0), (1, 1), 20),   # stride 3, uneven pads
    # other depthwise: flat stencils over stride phases (conv._dw_flat)
    (1, 16, 14, 13, 16, 3, 3, (1, 1), (2, 2, 2, 2), (2, 2), 16),  # dilation
    (1, 18, 32, 32, 18, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 18),
    (1, 18, 33, 32, 18, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 18),
    (1, 17, 3, 3, 17, 3, 3, (1, 1), (0, 0, 0, 0), (1, 1), 17),   # one output per plane
    (1, 19, 29, 27, 19, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 19),  # stride 2, odd first column
    (1, 19, 28, 27, 19, 3, 3, (2, 2), (0, 0, 1, 1), (1, 1), 19),  # stride 2, odd last column
    (2, 5, 30, 61, 5, 3, 5, (2, 3), (0, 2, 1, 1), (1, 2), 5),     # column stride 3, dilated
    # taps in passes of eight, four, two, one (49 = 6 * 8 + 1, 25 = 3 * 8 + 1, 8, 6 = 4 + 2)
    (1, 8, 15, 17, 8, 7, 7, (1, 1), (3, 3, 3, 3), (1, 1), 8),     # ConvNeXt-style 7x7
    # 3x3 / 5x5 / 7x7 stride 1: conv._dw_rows, 4 output rows per pass (13 = 3 * 4 + 1 rows; a
    # 7x7 plane's 13-column rows, under one vector; 22- and 40-wide rows, two and three
    # vectors; uneven pads)
    (2, 5, 13, 22, 5, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 5),
    (1, 3, 18, 40, 3, 3, 3, (1, 1), (0, 1, 2, 1), (1, 1), 3),
    (2, 5, 13, 10, 5, 5, 5, (1, 1), (2, 2, 2, 2), (1, 1), 5),
    (1, 7, 7, 7, 7, 7, 7, (1, 1), (3, 3, 3, 3), (1, 1), 7),
    (1, 3, 11, 21, 3, 5, 5, (1, 1), (0, 3, 2, 1), (1, 1), 3),
    # ... and stride 2 on its four stride phases (7x7: kernel rows in passes 0,2 / 4,6 / 1,3,5)
    (1, 6, 19, 17, 6, 7, 7, (2, 2), (3, 3, 3, 3), (1, 1), 6),
    (2, 4, 30, 33, 4, 3, 3, (2, 2), (1, 0, 0, 1), (1, 1), 4),
    (2, 6, 23, 26, 6, 5, 5, (2, 2), (2, 2, 2, 2), (1, 1), 6),     # 5x5 stride 2
    (1, 4, 9, 20, 4, 2, 4, (1, 1), (1, 1, 0, 2), (1, 1), 4),      # 2x4, uneven pads
    (1, 3, 8, 18, 3, 3, 2, (1, 1), (0, 1, 1, 0), (1, 2), 3),      # 3x2 dilated columns
    # at most 4 output channels and at least 16 input channels per group, rows >= 16 wide,
    # column stride 1: direct (conv._direct_rows, no im2col)
    (1, 16, 9, 20, 3, 7, 7, (1, 1), (3, 3, 3, 3), (1, 1), 1),     # an image head, 7x7
    (2, 16, 11, 18, 1, 3, 3, (2, 1), (0, 2, 1, 0), (2, 1), 1),    # row stride/dilation
    (1, 32, 8, 17, 4, 3, 5, (1, 1), (1, 2, 1, 2), (1, 2), 2),     # groups, dilated columns
    (1, 16, 8, 20, 16, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 4),    # 4 in / 4 out: im2col
    # output rows of at most conv._FLAT_MAX_OW positions, few output channels per group: the
    # flat im2col (conv._im2col_flat; stride 1 with OW <= W straight from the plane)
    (1, 32, 14, 14, 32, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 4),     # grouped, same padding
    (2, 32, 14, 14, 32, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 4),     # stride 2: phase planes
    (1, 24, 9, 11, 24, 3, 3, (2, 2), (0, 1, 1, 0), (1, 1), 3),      # odd widths, uneven pads
    (1, 16, 10, 12, 16, 5, 3, (1, 1), (2, 0, 2, 2), (1, 1), 2),     # pads on one side only
    (1, 16, 12, 12, 32, 3, 3, (1, 1), (2, 2, 2, 2), (2, 2), 4),     # dilated, same size
    (1, 8, 6, 6, 8, 3, 3, (1, 1), (2, 2, 2, 2), (1, 1), 2),         # OW > W: phase planes
    (1, 12, 7, 7, 12, 3, 3, (3, 3), (1, 1, 1, 1), (1, 1), 3),       # stride 3
    (1, 64, 7, 7, 64, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),       # dense, OW == W
    (1, 8, 3, 20, 8, 3, 3, (1, 2), (1, 1, 1, 1), (2, 1), 2),        # rows fewer than taps
]


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('case', CASES)
def test_conv2d_vs_ort(dtype, case, ort_node):
    n, c, h, w, m, kh, kw, stride, pads, dil, group = case
    for bias in (True, False):
        x, wt, b, _, out = _run(dtype, n, c, h, w, m, kh, kw, stride, pads, dil, group, bias)
        _close(out, _ref(ort_node, x, wt, b, stride, pads, dil, group), dtype)


@pytest.mark.parametrize('dtype', DTYPES)
def test_conv2d_empty(dtype):
    for n, c, m in [(0, 2, 3), (1, 2, 0)]:
        x = np.ones((n, c, 4, 4), dtype)
        wt = np.ones((m, c, 3, 3), dtype)
        out = np.zeros((n, m, 2, 2), dtype)
        col = np.zeros(CV.conv2d_scratch_elems(c, 3, 3, 2, 2, 1), dtype)
        CV.conv2d(x, wt, np.ones(max(m, 1), dtype), out, col, 1, 1, 0, 0, 1, 1, 1, True)


def test_conv2d_big_parallel_paths(ort_node):
    """Shapes big enough to take the prange im2col / depthwise / direct paths."""
    for group, m in ((1, 16), (16, 16), (1, 3)):
        case = (1, 16, 40, 40, m, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), group)
        n, c, h, w, m, kh, kw, stride, pads, dil, group = case
        x, wt, b, _, out = _run(np.float32, n, c, h, w, m, kh, kw, stride, pads, dil, group)
        _close(out, _ref(ort_node, x, wt, b, stride, pads, dil, group), np.float32)


def test_import_launches_threading_layer():
    """Cached kernels that call prange helpers segfault unless the threading layer is up;
    jitort.kernels.cpu launches it on import (see its __init__)."""
    import subprocess
    import sys
    code = ('import jitort.kernels.cpu.gemm\n'
            'from numba.np.ufunc import parallel\n'
            'assert parallel._is_initialized\n')
    subprocess.run([sys.executable, '-c', code], check=True)
