"""The channels-last depthwise kernel (kernels/cpu/conv_nhwc.py) called directly against a
numpy reference: the register-tiled stride-1 rows (``_dw_tile``: tiles cut at 1-8 pixels,
channel counts off the 16-lane vector, padding masked on every side, kernel rows past the
input's top and bottom, column strides 1 and 2, residual, Relu and another activation) and
the per-tap rows of the other cases, at 1 and 2 threads, float32 and float64."""
import numpy as np
import pytest

from jitort.kernels.cpu import conv_nhwc as CN


def _reference(x, w, b, res, sh, sw, ph, pw, oh, ow, dh=1, dw=1):
    n, h, wd, c = x.shape
    kh, kw = w.shape[:2]
    xp = np.zeros((n, h + 2 * kh * dh + ph, wd + 2 * kw * dw + pw, c))
    xp[:, ph:ph + h, pw:pw + wd] = x
    y = np.zeros((n, oh, ow, c)) + b
    for i in range(kh):
        for j in range(kw):
            y += xp[:, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                    j * dw:j * dw + sw * (ow - 1) + 1:sw] * w[i, j, 0]
    return y + (res if res is not None else 0)


@pytest.mark.parametrize('dtype', [np.float32, np.float64])
@pytest.mark.parametrize('threads', [1, 2])
@pytest.mark.parametrize('case', [
    # n, h, w, c, kh, kw, stride, pads (begin h, w; end h, w), act, residual
    (1, 7, 7, 40, 7, 7, 1, (3, 3, 3, 3), 1, False),     # 7x7 on 7x7: every tap row masked
    (2, 14, 9, 17, 3, 3, 1, (1, 1, 1, 1), 0, True),     # 17 channels: a 1-lane tail
    (1, 5, 17, 33, 5, 5, 1, (2, 0, 2, 4), 1, True),     # tiles 6 + 6 + 5, uneven pads
    (1, 6, 1, 16, 3, 5, 1, (1, 2, 1, 2), 5, False),     # 3x5 kernel, one column
    (1, 4, 20, 24, 7, 3, 1, (3, 1, 3, 1), 0, False),    # kernel taller than the plane
    (1, 9, 9, 20, 3, 3, 2, (1, 1, 1, 1), 1, False),     # stride 2
    (2, 15, 28, 24, 5, 5, 2, (2, 2, 2, 2), 0, True),    # stride 2, 5x5, tiles of 7
    (1, 16, 13, 8, 7, 7, 2, (3, 3, 3, 3), 5, False),    # stride 2, 7x7, odd width
    (1, 8, 9, 16, 4, 4, 1, (1, 2, 2, 1), 0, True),      # 4 wide: the per-tap rows
])
def test_depthwise_nhwc_against_numpy(dtype, threads, case):
    import numba
    n, h, w_, c, kh, kw, s, (pt, pl, pb, pr), act, has_res = case
    rng = np.random.default_rng(c + kh * 10 + w_)
    x = rng.standard_normal((n, h, w_, c)).astype(dtype)
    w = rng.standard_normal((kh, kw, 1, c)).astype(dtype)
    b = rng.standard_normal(c).astype(dtype)
    oh = (h + pt + pb - kh) // s + 1
    ow = (w_ + pl + pr - kw) // s + 1
    res = rng.standard_normal((n, oh, ow, c)).astype(dtype) if has_res else None
    want = _reference(x, w, b, res, s, s, pt, pl, oh, ow)
    if act == 1:
        want = np.maximum(want, 0)
    elif act == 5:   # leaky relu, alpha 0.1
        want = np.where(want < 0, 0.1 * want, want)
    out = np.full((n, oh, ow, c), np.nan, dtype)
    old = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        CN.dwconv_nhwc(x, w, b, res if has_res else out, out, s, s, pt, pl, 1, 1, True,
                       has_res, act, 0.1, 0.0)
    finally:
        numba.set_num_threads(old)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)
