import numpy as np
import pytest

from jitort.kernels.cpu import softmax as S

DTYPES = [np.float32, np.float64]
SHAPES = [(3, 7, 1), (2, 5, 4), (1, 1, 1), (0, 3, 1), (2, 0, 3), (2, 3, 0), (64, 1000, 1),
          (8, 50, 100)]


def _ref(x, log):
    x = x.astype(np.float64)
    with np.errstate(invalid='ignore', divide='ignore'):
        m = np.max(x, axis=1, keepdims=True, initial=-np.inf)
        e = np.exp(x - m)
        s = e.sum(axis=1, keepdims=True)
        return x - m - np.log(s) if log else e / s


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', SHAPES)
@pytest.mark.parametrize('log', [False, True])
def test_softmax(dtype, shape, log):
    x = (np.random.default_rng(0).standard_normal(shape) * 5).astype(dtype)
    out = np.full(shape, np.nan, dtype)
    (S.logsoftmax3d if log else S.softmax3d)(x, out)
    rt = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, _ref(x, log), rtol=rt, atol=rt)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('log', [False, True])
def test_softmax_special(dtype, log):
    x = np.array([[-np.inf, -np.inf, -np.inf], [0, -np.inf, 1], [1000, 1000, -1000],
                  [np.nan, 0, 1]], dtype).reshape(4, 3, 1)
    out = np.empty_like(x)
    (S.logsoftmax3d if log else S.softmax3d)(x, out)
    np.testing.assert_allclose(out, _ref(x, log), rtol=1e-6)
    xt = np.ascontiguousarray(x.transpose(2, 1, 0))        # same rows with I = 4
    out = np.empty_like(xt)
    (S.logsoftmax3d if log else S.softmax3d)(xt, out)
    np.testing.assert_allclose(out, _ref(xt, log), rtol=1e-6)


@pytest.mark.parametrize('inner', [1, 5])
def test_softmax_causal_mask(inner):
    """A causal mask's -3.4e38 (finfo.min) entries become exact zeros, as do terms more than
    87.3 below the row max (float32 flushes them rather than going through denormals)."""
    n = 64
    x = np.random.default_rng(1).standard_normal((1, n, n)).astype(np.float32)
    x[0][np.triu_indices(n, 1)] = np.finfo(np.float32).min
    x[0, 3, 0] = -95.0                                     # exp(-95 - max) < 2**-126
    x3 = np.ascontiguousarray(np.repeat(x.reshape(n, n, 1), inner, axis=2))
    out = np.empty_like(x3)
    S.softmax3d(x3, out)
    np.testing.assert_allclose(out, _ref(x3, False), rtol=1e-5, atol=1e-37)
    got = out[:, :, 0]
    assert (got[np.triu_indices(n, 1)] == 0).all() and got[3, 0] == 0
    np.testing.assert_allclose(got.sum(axis=1), 1, rtol=1e-5)


def test_softmax_vs_ort(ort_node):
    x = np.random.default_rng(1).standard_normal((4, 6, 5)).astype(np.float32)
    out = np.empty_like(x)
    S.softmax3d(x, out)
    np.testing.assert_allclose(out, ort_node('Softmax', [x], axis=1, opset=13), rtol=1e-5)
    S.logsoftmax3d(x, out)
    np.testing.assert_allclose(out, ort_node('LogSoftmax', [x], axis=1, opset=13), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize('dtype', DTYPES)
def test_row_max_across_vector_widths(dtype):
    """row_max2: rows shorter than a 512-bit vector (select loop) and longer (llvm.maxnum over
    vectors, the last one overlapping the previous), with NaNs skipped, +-inf, and the max in
    the overlapped tail."""
    rng = np.random.default_rng(1)
    for n in (0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 128, 1000):
        x = rng.standard_normal((4, n)).astype(dtype)
        if n:
            x[1, n - 1] = 50.0            # the max in the last (overlapping) vector
            x[2, 1::3] = np.nan           # NaNs skipped
            x[3, :] = -np.inf
            x[3, n // 2] = -7.0
        for r in range(4):
            want = np.nanmax(x[r]) if n else -np.inf
            assert S.row_max2(x, r) == want, (n, r)
        if n:
            x[0, 0] = np.inf
            assert S.row_max2(x, 0) == np.inf
            x[0, :] = -np.inf
            assert S.row_max2(x, 0) == -np.inf
            x[0, :] = np.nan              # nothing to skip to: NaN or -inf, never a number
            got = S.row_max2(x, 0)
            assert np.isnan(got) or got == -np.inf
    for n in (16, 64, 79, 128, 200):  # the max in every lane of every accumulator
        x = rng.standard_normal((1, n)).astype(dtype)
        x[0, ::5] = np.nan
        for p in range(n):
            y = x.copy()
            y[0, p] = 9.0
            assert S.row_max2(y, 0) == 9.0, (n, p)
