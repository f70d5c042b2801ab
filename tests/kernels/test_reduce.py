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
            return x.sum(1) / max(x.shape[1], 1)  # an empty mean is 0, as onnxruntime
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


# --- whole Reduce* nodes through jitort.compile (strict: nothing interpreted) vs onnxruntime ----
import onnxruntime as ort  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.helper import np_dtype_to_tensor_dtype as tt  # noqa: E402

import jitort  # noqa: E402

OPS = ['ReduceSum', 'ReduceMean', 'ReduceMax', 'ReduceMin', 'ReduceProd', 'ReduceL1',
       'ReduceL2', 'ReduceLogSum', 'ReduceLogSumExp', 'ReduceSumSquare']


def _run_both(op, x, axes, opset=18, keepdims=1, threads=1, axes_input=None, **attrs):
    """Compile one Reduce node (axes as input from opset 18, 13 for ReduceSum; else attribute)."""
    as_input = opset >= (13 if op == 'ReduceSum' else 18) if axes_input is None else axes_input
    ins, inits = ['x'], []
    if axes is not None:
        if as_input:
            ins.append('a')
            inits.append(numpy_helper.from_array(np.array(axes, np.int64), 'a'))
        else:
            attrs['axes'] = axes
    node = helper.make_node(op, ins, ['y'], keepdims=keepdims, **attrs)
    g = helper.make_graph([node], 'g', [helper.make_tensor_value_info('x', tt(x.dtype), x.shape)],
                          [helper.make_tensor_value_info('y', tt(x.dtype), None)],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 10
    cm = jitort.compile(m, threads=threads, strict=True)
    got = cm.run(None, {'x': x})[0]
    assert cm.fallback_nodes() == []
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref = ort.InferenceSession(m.SerializeToString(), so,
                               providers=['CPUExecutionProvider']).run(None, {'x': x})[0]
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, ref.shape)
    if x.dtype.kind == 'f':
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, ref)
    return got


def _data(op, shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in 'iu':
        lo = 1 if op in ('ReduceLogSum',) or np.dtype(dtype).kind == 'u' else -4
        return rng.integers(lo, 5, shape).astype(dtype)
    if op in ('ReduceProd', 'ReduceLogSum'):
        return rng.uniform(0.5, 1.5, shape).astype(dtype)
    return (rng.standard_normal(shape) * 2).astype(dtype)


@pytest.mark.parametrize('op', OPS)
def test_noncontiguous_axes(op):
    _run_both(op, _data(op, (3, 4, 5)), [0, 2])


@pytest.mark.parametrize('op,shape,axes,keepdims,opset', [
    ('ReduceSum', (2, 3, 4, 5), [1, 3], 0, 13),      # axes input (opset 13 ReduceSum)
    ('ReduceMean', (2, 3, 4, 5), [0, -2], 1, 11),    # axes attribute, negative axis
    ('ReduceMax', (2, 3, 4, 5), [0, 3], 0, 18),
    ('ReduceMean', (2, 3, 1, 5), [1, 2], 1, 18),     # size-1 axes dropped: contiguous
    ('ReduceSum', (1, 3, 4), [0], 0, 18),            # reduces only a size-1 axis
    ('ReduceL2', (1, 3, 4), [0], 0, 18),
    ('ReduceMax', (2, 0, 3), [1], 1, 18),            # empty reductions: identities
    ('ReduceSum', (2, 0, 3), [1], 0, 18),
    ('ReduceMin', (0, 3, 2), [0, 2], 1, 18),
    ('ReduceProd', (3, 0, 2), [0, 1], 0, 18),
    ('ReduceSum', (2, 3, 0), [0, 2], 0, 18),
])
def test_reduce_cases(op, shape, axes, keepdims, opset):
    _run_both(op, _data(op, shape), axes, opset=opset, keepdims=keepdims)


@pytest.mark.parametrize('op,dtype', [
    (op, np.int64) for op in ('ReduceSum', 'ReduceMean', 'ReduceMax', 'ReduceMin', 'ReduceProd',
                              'ReduceL1', 'ReduceL2', 'ReduceSumSquare', 'ReduceLogSum')]
    + [(op, np.int32) for op in ('ReduceSum', 'ReduceMax', 'ReduceMean')]
    + [('ReduceMax', np.int8), ('ReduceMin', np.uint8)])
def test_int(op, dtype):
    _run_both(op, _data(op, (3, 4, 5), dtype), [1, 2] if dtype == np.int32 else [0, 2])


def test_int_mean_truncates():
    x = np.array([[-5, 1, 1], [5, -1, -1], [-7, 0, 0]], np.int64)
    _run_both('ReduceMean', x, [1], keepdims=0)


def test_noop_and_all():
    x = _data('ReduceSum', (2, 3, 4))
    got = _run_both('ReduceSum', x, None, noop_with_empty_axes=1)
    np.testing.assert_array_equal(got, x)
    _run_both('ReduceMax', x, [], keepdims=0)   # empty axes input: reduce everything
    _run_both('ReduceMean', x, None, opset=13, keepdims=1)


def test_lse_inf_noncontiguous():
    x = np.full((2, 3, 2), -np.inf, np.float32)
    x[1, :, 0] = [1, 2, 3]
    _run_both('ReduceLogSumExp', x, [0, 2], keepdims=0)


@pytest.mark.parametrize('op', ['ReduceSum', 'ReduceMax'])
def test_parallel_noncontiguous(op, nthreads):
    _run_both(op, _data(op, (64, 16, 8, 32)), [1, 3], threads=nthreads)


def test_float64():
    _run_both('ReduceMean', _data('ReduceMean', (3, 4, 5), np.float64), [0, 2])
