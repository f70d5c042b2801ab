import math

import numpy as np
import pytest

from jitort.kernels.cpu import gemm as G

DTYPES = [np.float32, np.float64]


def _close(got, ref, dtype):
    rt = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, ref, rtol=rt, atol=rt)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('ba,bb,bo', [(1, 1, 1), (3, 1, 3), (1, 3, 3), (3, 3, 3), (1, 1, 2)])
@pytest.mark.parametrize('m,k,n', [(4, 5, 6), (1, 7, 1), (0, 3, 2), (3, 0, 2), (2, 3, 0),
                                   (1, 1, 1)])
def test_matmul3d(dtype, ba, bb, bo, m, k, n):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((ba, m, k)).astype(dtype)
    b = rng.standard_normal((bb, k, n)).astype(dtype)
    out = np.full((bo, m, n), np.nan, dtype)
    G.matmul3d(a, b, out)
    _close(out, np.matmul(a, b) * np.ones((bo, 1, 1), dtype), dtype)


def _act_ref(v, act, alpha, beta):
    if act == 1:
        return np.maximum(v, 0)
    if act == 2:
        erf = np.vectorize(math.erf)
        return 0.5 * v * (1 + erf(v.astype(np.float64) / math.sqrt(2)))
    if act == 3:
        return 1 / (1 + np.exp(-v.astype(np.float64)))
    if act == 4:
        return np.tanh(v)
    if act == 5:
        return np.where(v < 0, v * alpha, v)
    if act == 6:
        return np.clip(v, alpha, beta)
    return v


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('act', range(7))
@pytest.mark.parametrize('ba,bb,bo', [(2, 1, 2), (2, 2, 2), (1, 2, 2)])
def test_matmul3d_bias_act(dtype, act, ba, bb, bo):
    rng = np.random.default_rng(act)
    m, k, n = 70, 9, 1100   # several epilogue row blocks
    a = rng.standard_normal((ba, m, k)).astype(dtype)
    b = rng.standard_normal((bb, k, n)).astype(dtype)
    for bias in (rng.standard_normal(n).astype(dtype), np.zeros(0, dtype)):
        out = np.empty((bo, m, n), dtype)
        G.matmul3d_bias_act(a, b, bias, out, act, 0.1, 0.5)
        ref = np.matmul(a.astype(np.float64), b) + (bias if bias.size else 0)
        _close(out, _act_ref(ref, act, 0.1, 0.5), dtype)


@pytest.mark.parametrize('dtype', DTYPES)
def test_matmul3d_bias_act_empty(dtype):
    for m, k, n in [(0, 2, 3), (2, 0, 3), (2, 3, 0), (1, 1, 1)]:
        a = np.ones((1, m, k), dtype)
        b = np.ones((1, k, n), dtype)
        out = np.full((1, m, n), np.nan, dtype)
        G.matmul3d_bias_act(a, b, np.ones(n, dtype), out, 1, 0.0, 0.0)
        np.testing.assert_array_equal(out, np.full((1, m, n), k + 1, dtype))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('ta', [False, True])
@pytest.mark.parametrize('tb', [False, True])
@pytest.mark.parametrize('cshape', ['none', 'full', 'row', 'col', 'scalar'])
def test_gemm(dtype, ta, tb, cshape, ort_node):
    rng = np.random.default_rng(1)
    m, k, n = 5, 7, 3
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    cs = {'none': (1, 1), 'full': (m, n), 'row': (1, n), 'col': (m, 1), 'scalar': (1, 1)}
    c = rng.standard_normal(cs[cshape]).astype(dtype)
    has_c = cshape != 'none'
    out = np.empty((m, n), dtype)
    al, be = float(np.float32(0.7)), float(np.float32(1.3))   # ONNX attrs are float32
    G.gemm(a, b, c, out, al, be, ta, tb, has_c)
    ref = ort_node('Gemm', [a, b, c if has_c else None], alpha=0.7, beta=1.3,
                   transA=int(ta), transB=int(tb))
    _close(out, ref, dtype)


@pytest.mark.parametrize('dtype', DTYPES)
def test_gemm_degenerate(dtype):
    for m, k, n in [(0, 3, 2), (2, 0, 3), (2, 3, 0), (1, 1, 1)]:
        a = np.ones((m, k), dtype)
        b = np.ones((k, n), dtype)
        c = np.full((1, 1), 2.0, dtype)
        out = np.full((m, n), np.nan, dtype)
        G.gemm(a, b, c, out, 1.0, 1.0, False, False, True)
        np.testing.assert_array_equal(out, np.full((m, n), k + 2.0, dtype))


@pytest.mark.parametrize('dtype', DTYPES)
def test_one_row_products_take_the_matrix_vector_path(dtype):
    """An FC layer at batch 1 (one output row, >= _GEMV_MIN multiply-adds) streams B once
    instead of letting BLAS gemm pack it; ta/tb, alpha, beta * C and the small remainders of
    the four-row / four-column unrolling all agree with float64 numpy."""
    rng = np.random.default_rng(5)
    m, k, n = 1, 4099, 7
    assert k * n >= G._GEMV_MIN
    for ta in (False, True):
        for tb in (False, True):
            a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
            b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
            c = rng.standard_normal((1, n)).astype(dtype)
            ref = 0.5 * ((a.T if ta else a).astype(np.float64) @ (b.T if tb else b))
            for has_c in (False, True):
                out = np.full((m, n), np.nan, dtype)
                G.gemm(a, b, c, out, 0.5, -1.5, ta, tb, has_c)
                _close(out, ref - 1.5 * c if has_c else ref, dtype)


@pytest.mark.parametrize('m,n', [(70, 5000), (5000, 70), (300, 1200)])
def test_epilogue_blocks_split_the_wide_side(m, n):
    """A fused epilogue works on blocks of ~_EPI_BLOCK_ELEMS outputs: a wide output is cut
    into column blocks (each repacks only A), a tall one into row blocks; results are exact
    either way."""
    nrb, rbs, ncb, cbs = G._plan(1, m, n, 64, 1, True, 1)
    assert rbs * cbs <= max(G._EPI_BLOCK_ELEMS, G._EPI_MIN_ROWS * cbs, G._EPI_MIN_COLS * rbs)
    if n > m:
        assert nrb == 1 and ncb > 1
    else:
        assert ncb == 1 and nrb > 1
    rng = np.random.default_rng(1)
    a = rng.standard_normal((1, m, 64)).astype(np.float32)
    b = rng.standard_normal((1, 64, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    out = np.full((1, m, n), np.nan, np.float32)
    G.matmul3d_bias_act(a, b, bias, out, 1, 0.0, 0.0)
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
