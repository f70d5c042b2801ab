import numpy as np
import pytest

from jitort.kernels.cpu import reduce as R

DTYPES = [np.float32, np.float64]
SHAPES = [(3, 7, 1), (2, 5, 4), (1, 1, 1), (2, 0, 3), (2, 0, 1), (0, 3, 2), (2, 3, 0),
          (64, 600, 1), (4, 100, 130)]


def _np_reduce(x, kind):
    x = x.astype(np.float64)
    with np.errstate(all='ignore'):
        if kind == R.REDUCE_SUM:
            return x.sum(1)
        if kind == R.REDUCE_MEAN:
            return x.sum(1) / x.shape[1]
        if kind == R.REDUCE_MAX:
            return x.max(1, initial=-np.inf)
        if kind == R.REDUCE_MIN:
            return x.min(1, initial=np.inf)
        if kind == R.REDUCE_PROD:
            return x.prod(1)
        if kind == R.REDUCE_L1:
            return np.abs(x).sum(1)
        if kind == R.REDUCE_L2:
            return np.sqrt((x * x).sum(1))
        if kind == R.REDUCE_LOG_SUM:
            return np.log(x.sum(1))
        if kind == R.REDUCE_LOG_SUM_EXP:
            m = x.max(1, initial=-np.inf, keepdims=True)
            m = np.where(np.isfinite(m), m, 0)
            return (m + np.log(np.exp(x - m).sum(1, keepdims=True)))[:, 0]
        if kind == R.REDUCE_SUM_SQUARE:
            return (x * x).sum(1)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', SHAPES)
@pytest.mark.parametrize('kind', range(10))
def test_reduce3d(dtype, shape, kind):
    rng = np.random.default_rng(kind)
    x = rng.uniform(0.5, 1.5, shape).astype(dtype)   # positive: log_sum, prod stay sane
    if kind in (R.REDUCE_SUM, R.REDUCE_MAX, R.REDUCE_MIN, R.REDUCE_L1, R.REDUCE_LOG_SUM_EXP):
        x = (rng.standard_normal(shape) * 3).astype(dtype)
    out = np.full((shape[0], shape[2]), np.nan, dtype)
    R.reduce3d(x, out, kind)
    rt = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, _np_reduce(x, kind), rtol=rt, atol=rt * 10)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('ni', [1, 3])
def test_reduce_lse_inf(dtype, ni):
    x = np.array([[-np.inf, -np.inf], [np.inf, 0], [-np.inf, 2]], dtype)
    x = np.ascontiguousarray(np.repeat(x[:, :, None], ni, axis=2))
    out = np.empty((3, ni), dtype)
    R.reduce3d(x, out, R.REDUCE_LOG_SUM_EXP)
    np.testing.assert_array_equal(out, np.repeat(np.array([[-np.inf], [np.inf], [2]], dtype),
                                                 ni, axis=1))


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('ni', [1, 3])
@pytest.mark.parametrize('kind', [R.REDUCE_MAX, R.REDUCE_MIN])
def test_reduce_max_min_propagate_nan(dtype, ni, kind):
    """As onnxruntime: a NaN anywhere in the reduced run gives NaN (first, middle or last)."""
    x = np.array([[np.nan, 1, 2], [1, np.nan, 2], [1, 2, np.nan], [1, 5, -2]], dtype)
    x = np.ascontiguousarray(np.repeat(x[:, :, None], ni, axis=2))
    out = np.zeros((4, ni), dtype)
    R.reduce3d(x, out, kind)
    want = np.array([np.nan, np.nan, np.nan, 5 if kind == R.REDUCE_MAX else -2], dtype)
    np.testing.assert_array_equal(out, np.repeat(want[:, None], ni, axis=1))


ORT_OPS = {R.REDUCE_SUM: 'ReduceSum', R.REDUCE_MEAN: 'ReduceMean', R.REDUCE_MAX: 'ReduceMax',
           R.REDUCE_MIN: 'ReduceMin', R.REDUCE_PROD: 'ReduceProd', R.REDUCE_L1: 'ReduceL1',
           R.REDUCE_L2: 'ReduceL2', R.REDUCE_LOG_SUM: 'ReduceLogSum',
           R.REDUCE_LOG_SUM_EXP: 'ReduceLogSumExp', R.REDUCE_SUM_SQUARE: 'ReduceSumSquare'}


@pytest.mark.parametrize('kind', range(10))
def test_reduce3d_vs_ort(kind, ort_node):
    x = np.random.default_rng(5).uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    out = np.empty((3, 5), np.float32)
    R.reduce3d(x, out, kind)
    ref = ort_node(ORT_OPS[kind], [x], axes=[1], keepdims=0, opset=11)
    np.testing.assert_allclose(out, ref, rtol=2e-5)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', [(3, 7, 1), (2, 5, 4), (1, 1, 1), (0, 3, 2), (2, 3, 0)])
@pytest.mark.parametrize('select_last', [False, True])
def test_argmax_argmin(dtype, shape, select_last, ort_node):
    x = np.random.default_rng(7).integers(0, 3, shape).astype(dtype)   # many ties
    for fn, op in ((R.argmax3d, 'ArgMax'), (R.argmin3d, 'ArgMin')):
        out = np.full((shape[0], shape[2]), -1, np.int64)
        fn(x, out, select_last)
        if x.size and dtype == np.float32:
            ref = ort_node(op, [x], axis=1, keepdims=0, select_last_index=int(select_last),
                           out_dtypes=[np.int64])
        else:
            xs = x[:, ::-1] if select_last else x
            ref = (np.argmax if op == 'ArgMax' else np.argmin)(xs, axis=1) if x.size else \
                np.zeros(out.shape, np.int64)
            if select_last and x.size:
                ref = shape[1] - 1 - ref
        np.testing.assert_array_equal(out, ref)
