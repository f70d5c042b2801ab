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


# --- dwconv_staged: NCHW tensors through channels-last bands ------------------------------

@pytest.mark.parametrize('threads', [1, 2])
@pytest.mark.parametrize('blocks', [1, 2])
@pytest.mark.parametrize('case', [
    # n, c, h, w, k, stride, pads (begin h, w; end h, w), act, residual
    (1, 240, 28, 28, 3, 1, (1, 1, 1, 1), 0, False),   # bands of rows (several per thread)
    (2, 72, 14, 14, 5, 2, (2, 2, 2, 2), 1, True),      # two images, a half-vector tail
    (1, 960, 7, 7, 5, 1, (2, 2, 2, 2), 1, False),      # a small plane: channel blocks
    (1, 64, 7, 7, 5, 2, (0, 0, 0, 0), 0, False),       # unpadded, 2x2 outputs
    (3, 20, 9, 11, 7, 1, (3, 3, 3, 3), 5, True),       # kernel as tall as the plane
    (1, 32, 112, 112, 3, 2, (1, 1, 1, 1), 0, False),   # one band at 1 thread
    (1, 96, 160, 96, 3, 1, (1, 1, 1, 1), 0, False),    # several bands: halo rows
    (1, 64, 150, 80, 5, 2, (2, 2, 2, 2), 1, True),     # several strided bands
    (1, 48, 30, 17, 3, 1, (0, 1, 2, 1), 1, False),     # uneven pads
])
def test_dwconv_staged_against_numpy(threads, blocks, case):
    import numba
    n, c, h, w_, k, s, (pt, pl, pb, pr), act, has_res = case
    if c % blocks:
        pytest.skip("channels not divisible by the blocks")
    rng = np.random.default_rng(c + k + w_)
    x = rng.standard_normal((n, c, h, w_)).astype(np.float32)
    wo = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    oh = (h + pt + pb - k) // s + 1
    ow = (w_ + pl + pr - k) // s + 1
    if 16 * h * w_ > CN._STAGE_ELEMS:   # the band rule the "several bands" cases rely on
        assert CN._stage_rows_py(w_, k, s, oh, ow) < oh
    res = rng.standard_normal((n, c, oh, ow)).astype(np.float32) if has_res else None
    want = _reference(x.transpose(0, 2, 3, 1), wo.transpose(2, 3, 1, 0), b,
                      None if res is None else res.transpose(0, 2, 3, 1), s, s, pt, pl, oh,
                      ow).transpose(0, 3, 1, 2)
    if act == 1:
        want = np.maximum(want, 0)
    elif act == 5:
        want = np.where(want < 0, 0.1 * want, want)
    out = np.full((n, c, oh, ow), np.nan, np.float32)
    scr = np.empty(CN.dw_staged_scratch_elems(w_, k, s, oh, ow, 2), np.float32)
    old = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        CN.dwconv_staged(x, CN.staged_weights(wo, blocks), b, res if has_res else out, out,
                         scr, s, s, pt, pl, True, has_res, act, 0.1, 0.0)
    finally:
        numba.set_num_threads(old)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_dwconv_staged_rejects_what_it_cannot_run():
    x = np.zeros((1, 32, 8, 8), np.float32)
    out = np.zeros((1, 32, 8, 8), np.float32)
    b = np.zeros(32, np.float32)
    scr = np.zeros(CN.dw_staged_scratch_elems(8, 3, 1, 8, 8, 2), np.float32)
    w = CN.staged_weights(np.zeros((32, 1, 3, 3), np.float32), 1)
    with pytest.raises(ValueError, match="scratch too small"):
        CN.dwconv_staged(x, w, b, out, out, scr[:10], 1, 1, 1, 1, True, False, 0, 0.0, 0.0)
    w4 = CN.staged_weights(np.zeros((32, 1, 4, 4), np.float32), 1)   # no 4-wide tiles
    with pytest.raises(ValueError, match="unsupported"):
        CN.dwconv_staged(x, w4, b, out, out, scr, 1, 1, 1, 1, True, False, 0, 0.0, 0.0)
    with pytest.raises(ValueError, match="unsupported"):   # 16 channels of weights for 32
        CN.dwconv_staged(x, CN.staged_weights(np.zeros((16, 1, 3, 3), np.float32), 1), b,
                         out, out, scr, 1, 1, 1, 1, True, False, 0, 0.0, 0.0)
    assert CN.staged_blocks(960, 49, 2) == 2 and CN.staged_blocks(960, 196, 2) == 1
    assert CN.staged_blocks(40, 49, 2) == 1 and CN.staged_blocks(960, 49, 1) == 1


def test_depthwise_tiles_at_the_start_of_an_allocation():
    """The register tiles' padded-pixel loads are masked off entirely and address a pixel of
    the row (not the bytes before the tensor, which were before the allocation when the
    tensor began it: correct either way, ~4-15x slower on the Zen 5 host). A tensor at the
    very start of a fresh mmap'd buffer gives the reference's result."""
    import mmap
    c, h, w_ = 64, 9, 9
    buf = mmap.mmap(-1, 1 << 20)
    x = np.frombuffer(buf, np.float32, count=h * w_ * c).reshape(1, h, w_, c)
    rng = np.random.default_rng(1)
    x[...] = rng.standard_normal(x.shape)
    w = rng.standard_normal((5, 5, 1, c)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    out = np.empty((1, h, w_, c), np.float32)
    CN.dwconv_nhwc(x, w, b, out, out, 1, 1, 2, 2, 1, 1, True, False, 0, 0.0, 0.0)
    np.testing.assert_allclose(out, _reference(x, w, b, None, 1, 1, 2, 2, h, w_), rtol=1e-4,
                               atol=1e-4)
    del x
    buf.close()


def test_staged_sizes_for_the_default_thread_count():
    """compile(threads=None) sizes for Numba's whole pool."""
    import numba
    n = numba.config.NUMBA_NUM_THREADS
    assert CN.staged_blocks(960, 49, None) == CN.staged_blocks(960, 49, n)
    assert (CN.dw_staged_scratch_elems(8, 3, 1, 8, 8, None)
            == CN.dw_staged_scratch_elems(8, 3, 1, 8, 8, n))


def test_dwconv_staged_without_bias():
    """has_bias False with the 1-element placeholder the code generator passes: the kernel
    gives the tiles a zero bias of its own (they read C values either way)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 48, 10, 10)).astype(np.float32)
    wo = rng.standard_normal((48, 1, 3, 3)).astype(np.float32)
    out = np.full((1, 48, 10, 10), np.nan, np.float32)
    scr = np.empty(CN.dw_staged_scratch_elems(10, 3, 1, 10, 10, 2), np.float32)
    CN.dwconv_staged(x, CN.staged_weights(wo, 1), np.zeros(1, np.float32), out, out, scr, 1, 1,
                     1, 1, False, False, 0, 0.0, 0.0)
    want = _reference(x.transpose(0, 2, 3, 1), wo.transpose(2, 3, 1, 0), 0.0, None, 1, 1, 1, 1,
                      10, 10).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('dtype', [np.float32, np.float64])
@pytest.mark.parametrize('case', [
    # n, h, w, c, m, bias, residual, act
    (1, 1, 1, 96, 1280, True, False, 1),    # a batch-1 classifier head: weights streamed
    (1, 2, 2, 40, 33, True, True, 0),       # 4 pixels, residual
    (3, 1, 1, 17, 50, False, False, 1),     # 3 images of one pixel, no bias
    (1, 3, 3, 24, 40, True, True, 1),       # 9 pixels: the gemm path
    (2, 7, 7, 64, 256, True, False, 0),     # 98 pixels in blocks
])
def test_pointwise_nhwc_against_numpy(dtype, case):
    """pwconv_nhwc: blocks of at most _PW_STREAM_ROWS pixels stream the weights, bigger ones
    take the gemm; bias, residual (onto which the product accumulates) and Relu."""
    n, h, wd, c, m, bias, residual, act = case
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, h, wd, c)).astype(dtype)
    w = (rng.standard_normal((1, 1, c, m)) / c ** 0.5).astype(dtype)
    b = rng.standard_normal(m).astype(dtype) if bias else np.zeros(m, dtype)
    res = rng.standard_normal((n, h, wd, m)).astype(dtype) if residual else None
    out = np.empty((n, h, wd, m), dtype)
    CN.pwconv_nhwc(x, w, b, res if residual else out, out, bias, residual, act, 0.0, 0.0)
    want = x.astype(np.float64) @ w[0, 0].astype(np.float64) + b
    if residual:
        want = want + res
    if act == 1:
        want = np.maximum(want, 0)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)
