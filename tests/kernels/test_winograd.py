"""Winograd F(2x2, 3x3) convolution kernel against onnxruntime (float32) and a float64 numpy
reference: odd and tiny planes, asymmetric and large pads, batches, every epilogue, the
block / output-channel splits at 1 and 2 threads, empty shapes and the scratch contract."""
import numpy as np
import pytest

from jitort.kernels.cpu import winograd as W


def _out(h, pb, pe):
    return h + pb + pe - 2


def _np_conv3x3(x, w, b, pads):
    """float64 direct 3x3 convolution, stride 1 (the definition, tap by tap)."""
    n, c, h, wd = x.shape
    oh, ow = _out(h, pads[0], pads[2]), _out(wd, pads[1], pads[3])
    xp = np.zeros((n, c, h + pads[0] + 3, wd + pads[1] + 3))
    xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = x
    out = np.zeros((n, w.shape[0], oh, ow))
    for i in range(3):
        for j in range(3):
            out += np.einsum('nchw,mc->nmhw', xp[:, :, i:i + oh, j:j + ow],
                             w[:, :, i, j].astype(np.float64))
    if b is not None:
        out += b[None, :, None, None]
    return out


def _run(x, w, b, pads, res=None, act=0, alpha=0.0, beta=0.0, scratch=None, tile=2):
    n, c, h, wd = x.shape
    m = w.shape[0]
    oh, ow = _out(h, pads[0], pads[2]), _out(wd, pads[1], pads[3])
    out = np.full((n, m, oh, ow), np.nan, x.dtype)
    scr = np.full(scratch or W.winograd_scratch_elems(c, m, oh, ow, m=tile), np.nan, x.dtype)
    bb = b if b is not None else np.zeros(1, x.dtype)
    W.conv3x3_winograd(x, W.winograd_weights(w, tile), bb, out if res is None else res, out,
                       scr, pads[0], pads[1], b is not None, res is not None, act, alpha, beta)
    return out


def _data(dtype, n, c, h, wd, m, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, c, h, wd)).astype(dtype),
            rng.standard_normal((m, c, 3, 3)).astype(dtype),
            rng.standard_normal(m).astype(dtype))


def _close(got, ref, dtype, c, tile=2):
    # float32 error grows like sqrt(9 c) ulps; F(4x4, 3x3)'s coefficients (up to 8, 1/24) add
    # about 10x F(2x2, 3x3)'s rounding
    tol = (2e-5 if tile == 2 else 1e-4) * max(1.0, np.sqrt(c / 16))
    tol = tol if dtype == np.float32 else tol * 1e-8
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * max(1.0, np.abs(ref).max()))


CASES = [
    # n, c, m, h, w, pads (hb, wb, he, we)
    (1, 8, 16, 7, 9, (1, 1, 1, 1)),      # odd output width, one partial tile row
    (2, 9, 5, 6, 5, (0, 0, 0, 0)),       # no padding, batch 2, odd sizes
    (1, 3, 4, 1, 1, (1, 1, 1, 1)),       # a 1x1 plane: one tile, three of its outputs cut
    (1, 2, 3, 3, 3, (0, 0, 0, 0)),       # a single output
    (1, 16, 32, 13, 11, (1, 2, 2, 1)),   # asymmetric pads
    (1, 4, 4, 2, 3, (2, 2, 2, 2)),       # pads of 2: output larger than the input
    (3, 5, 7, 17, 10, (1, 0, 0, 1)),     # end pads differ from begin pads
    (1, 1, 1, 4, 4, (1, 1, 1, 1)),       # one channel in and out
    (1, 6, 5, 11, 13, (1, 1, 2, 0)),     # width 12 and height 12: every 4x4 tile cut
    (1, 7, 3, 14, 9, (1, 3, 1, 2)),      # pads wider than a 4x4 tile's border
]


@pytest.mark.parametrize('tile', [2, 4])
@pytest.mark.parametrize('dtype', [np.float32, np.float64])
@pytest.mark.parametrize('case', CASES)
def test_winograd_matches_direct_convolution(dtype, case, tile, ort_node):
    n, c, m, h, wd, pads = case
    x, w, b = _data(dtype, n, c, h, wd, m)
    for bias in (b, None):
        got = _run(x, w, bias, pads, tile=tile)
        if dtype == np.float32:
            args = [x, w] + ([bias] if bias is not None else [])
            ref = ort_node('Conv', args, pads=list(pads))
        else:
            ref = _np_conv3x3(x, w, bias, pads)
        _close(got, ref, dtype, c, tile)


BIG = [
    (1, 64, 64, 56, 56, (1, 1, 1, 1)),   # several tile-row blocks
    (2, 32, 48, 40, 41, (1, 1, 1, 1)),   # blocks in two images, odd width
    (1, 96, 80, 14, 14, (1, 1, 1, 1)),   # one block: shared by the threads at 2 threads
    (1, 40, 37, 15, 15, (0, 0, 2, 2)),   # uneven output-channel blocks, end pads only
]


@pytest.mark.parametrize('tile', [2, 4])
@pytest.mark.parametrize('case', BIG)
def test_winograd_blocks_and_threads(nthreads, case, tile):
    n, c, m, h, wd, pads = case
    x, w, b = _data(np.float32, n, c, h, wd, m, seed=1)
    _close(_run(x, w, b, pads, tile=tile), _np_conv3x3(x, w, b, pads), np.float32, c, tile)


def _np_act(v, act, alpha, beta):
    from scipy.special import erf
    return {1: lambda: np.maximum(v, 0), 2: lambda: 0.5 * v * (1 + erf(v / np.sqrt(2))),
            5: lambda: np.where(v < 0, alpha * v, v), 6: lambda: np.clip(v, alpha, beta)}[act]()


@pytest.mark.parametrize('act,alpha,beta', [(1, 0.0, 0.0), (2, 0.0, 0.0), (5, 0.1, 0.0),
                                            (6, -0.5, 0.75)])
@pytest.mark.parametrize('residual', [False, True])
@pytest.mark.parametrize('tile', [2, 4])
def test_winograd_epilogues(nthreads, act, alpha, beta, residual, tile):
    x, w, b = _data(np.float32, 1, 24, 20, 19, 20, seed=2)
    pads = (1, 1, 1, 1)
    res = np.random.default_rng(3).standard_normal((1, 20, 20, 19)).astype(np.float32) \
        if residual else None
    got = _run(x, w, b, pads, res, act, alpha, beta, tile=tile)
    ref = _np_act(_np_conv3x3(x, w, b, pads) + (res if residual else 0), act, alpha, beta)
    _close(got, ref, np.float32, 24, tile)


@pytest.mark.parametrize('act,alpha,beta', [(1, 0.0, 0.0), (6, -0.5, 0.75)])
@pytest.mark.parametrize('tile', [2, 4])
def test_winograd_shared_blocks_epilogue(nthreads, act, alpha, beta, tile):
    """Three images of one tile-row block each, 40 -> 37 channels: at 2 threads too few
    blocks to divide evenly, so the threads share each block (``_wino_phased``: the transform
    by input-channel chunks, then the products by output-channel chunks, each next image's
    transform waiting for the previous one's products), with the residual and activation."""
    x, w, b = _data(np.float32, 3, 40, 28, 27, 37, seed=4)
    pads = (1, 1, 1, 1)
    res = np.random.default_rng(5).standard_normal((3, 37, 28, 27)).astype(np.float32)
    got = _run(x, w, b, pads, res, act, alpha, beta, tile=tile)
    pre = _np_conv3x3(x, w, b, pads) + res
    # the error follows the pre-activation values (|pre| up to ~30), not the clipped ones
    tol = (2e-5 if tile == 2 else 1e-4) * np.sqrt(40 / 16)
    np.testing.assert_allclose(got, _np_act(pre, act, alpha, beta), rtol=tol,
                               atol=tol * np.abs(pre).max())


@pytest.mark.parametrize('tile', [2, 4])
def test_winograd_empty_shapes(tile):
    for n, c, m, h in [(0, 8, 4, 5), (1, 8, 0, 5), (1, 8, 4, 0)]:
        x = np.ones((n, c, h, h), np.float32)
        w = np.ones((m, c, 3, 3), np.float32)
        out = np.zeros((n, m, max(h - 2, 0), max(h - 2, 0)), np.float32)
        W.conv3x3_winograd(x, W.winograd_weights(w, tile), np.ones(max(m, 1), np.float32),
                           out, out, np.zeros(1, np.float32), 0, 0, True, False, 0, 0.0, 0.0)
    # no input channels: the output is the bias (then the activation)
    x = np.ones((1, 0, 4, 4), np.float32)
    w = np.ones((3, 0, 3, 3), np.float32)
    b = np.array([1.0, -2.0, 3.0], np.float32)
    got = _run(x, w, b, (1, 1, 1, 1), act=1, tile=tile)
    np.testing.assert_array_equal(got, np.broadcast_to(np.maximum(b, 0)[None, :, None, None],
                                                       got.shape))


def test_winograd_bad_arguments_raise():
    x, w, b = _data(np.float32, 1, 8, 10, 10, 8)
    for tile in (2, 4):
        with pytest.raises(ValueError, match="scratch"):
            _run(x, w, b, (1, 1, 1, 1), scratch=100, tile=tile)
    out = np.zeros((1, 8, 10, 10), np.float32)
    with pytest.raises(ValueError, match="16 or 36"):
        W.conv3x3_winograd(x, np.zeros((9, 8, 8), np.float32), b, out, out,
                           np.zeros(10 ** 6, np.float32), 1, 1, True, False, 0, 0.0, 0.0)


def _np_grouped(x, w, b, pads, g):
    cg, mg = x.shape[1] // g, w.shape[0] // g
    return np.concatenate([_np_conv3x3(x[:, i * cg:(i + 1) * cg], w[i * mg:(i + 1) * mg],
                                       b[i * mg:(i + 1) * mg], pads) for i in range(g)], 1)


@pytest.mark.parametrize('tile', [2, 4])
@pytest.mark.parametrize('n,c,m,g,h', [(1, 64, 48, 2, 30), (2, 48, 40, 4, 17), (3, 96, 72, 8, 28)])
def test_winograd_grouped(nthreads, n, c, m, g, h, tile):
    """Grouped weights (u (a*a, M, C / g)): each product gemm per group, in whole blocks and
    in blocks shared by the threads (3 images: uneven over 2 threads, ``_wino_phased``, whose
    output-channel chunks cross the groups' edges), with a residual and Relu; a u whose
    channels do not divide x's raises."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, c, h, h)).astype(np.float32)
    w = rng.standard_normal((m, c // g, 3, 3)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    res = rng.standard_normal((n, m, h, h)).astype(np.float32)
    got = _run(x, w, b, (1, 1, 1, 1), res, 1, tile=tile)
    ref = np.maximum(_np_grouped(x, w, b, (1, 1, 1, 1), g) + res, 0)
    _close(got, ref, np.float32, c // g, tile)
    out = np.zeros((n, m, h, h), np.float32)
    scr = np.zeros(W.winograd_scratch_elems(c, m, h, h, m=tile), np.float32)
    with pytest.raises(ValueError, match="does not match"):
        W.conv3x3_winograd(x, W.winograd_weights(rng.standard_normal((m, 7, 3, 3)).astype(
            np.float32), tile), b, out, out, scr, 1, 1, True, False, 0, 0.0, 0.0)


def test_winograd_weights_are_g_g_gt():
    w = np.random.default_rng(4).standard_normal((2, 3, 3, 3)).astype(np.float32)
    G2 = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    G4 = np.array([[6, 0, 0], [-4, -4, -4], [-4, 4, -4], [1, 2, 4], [1, -2, 4], [0, 0, 24]]) / 24
    for tile, G in ((2, G2), (4, G4)):
        a = tile + 2
        u = W.winograd_weights(w, tile)
        assert u.shape == (a * a, 2, 3) and u.dtype == np.float32
        for m in range(2):
            for c in range(3):
                np.testing.assert_allclose(u[:, m, c].reshape(a, a), G @ w[m, c] @ G.T,
                                           rtol=1e-6, atol=1e-7)


def test_winograd_selection():
    assert W.winograd_wins(64, 64, 56, 56)
    assert W.winograd_wins(8, 32, 112, 112)
    assert W.winograd_wins(256, 256, 10, 10)       # 25 tiles
    assert not W.winograd_wins(512, 512, 7, 7)     # 16 tiles: gemms too narrow
    assert not W.winograd_wins(3, 64, 224, 224)    # K = 3 gemms
    assert W.winograd_tile(64, 64, 56, 56) == 4
    assert W.winograd_tile(32, 128, 28, 28) == 4     # 49 4x4 tiles
    assert W.winograd_tile(256, 256, 14, 14) == 2    # 16 4x4 tiles: gemms too narrow
    assert W.winograd_tile(16, 64, 55, 55) == 2      # few channels: the transforms dominate
    # grouped (per-group channels): 32+ per group, 16 on planes of 28x28 and up
    assert W.winograd_grouped_wins(32, 32, 14, 14) and W.winograd_grouped_wins(16, 16, 28, 28)
    assert not W.winograd_grouped_wins(16, 16, 14, 14)
    assert not W.winograd_grouped_wins(8, 8, 56, 56)
