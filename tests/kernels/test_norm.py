import numpy as np
import pytest

from jitort.kernels.cpu import norm as NM

DTYPES = [np.float32, np.float64]


def _tol(dtype):
    return (1e-4, 1e-5) if dtype == np.float32 else (1e-10, 1e-10)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', [(3, 8), (1, 1), (0, 4), (2, 0), (64, 768), (5, 17)])
@pytest.mark.parametrize('has_bias', [True, False])
def test_layernorm(dtype, shape, has_bias, ort_node):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3 + 10).astype(dtype)
    sc = rng.standard_normal(shape[1]).astype(dtype)
    bi = rng.standard_normal(shape[1]).astype(dtype)
    out = np.full(shape, np.nan, dtype)
    eps = float(np.float32(1e-5))
    NM.layernorm2d(x, sc, bi if has_bias else np.zeros(1, dtype), out, eps, has_bias)
    if shape[0] and shape[1]:
        ref = ort_node('LayerNormalization', [x, sc, bi if has_bias else None], axis=-1,
                       epsilon=eps, opset=17)
        rt, at = _tol(dtype)
        np.testing.assert_allclose(out, ref, rtol=rt, atol=at)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', [(2, 3, 10), (1, 1, 1), (2, 2, 0), (2, 32, 1024)])
def test_instancenorm(dtype, shape, ort_node):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 2 - 5).astype(dtype)
    sc = rng.standard_normal(shape[1]).astype(dtype)
    bi = rng.standard_normal(shape[1]).astype(dtype)
    out = np.full(shape, np.nan, dtype)
    NM.instancenorm3d(x, sc, bi, out, 1e-5)
    if shape[2]:
        x4 = x.reshape(shape + (1,)).astype(np.float32)
        ref = ort_node('InstanceNormalization', [x4, sc.astype(np.float32),
                                                 bi.astype(np.float32)], epsilon=1e-5)
        np.testing.assert_allclose(out, ref.reshape(shape), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', [(2, 3, 10), (1, 1, 1), (2, 2, 0), (0, 2, 3)])
def test_batchnorm(dtype, shape, ort_node):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(dtype)
    c = shape[1]
    sc, bi, mu = (rng.standard_normal(c).astype(dtype) for _ in range(3))
    var = rng.uniform(0.5, 2, c).astype(dtype)
    out = np.full(shape, np.nan, dtype)
    NM.batchnorm3d(x, sc, bi, mu, var, out, 1e-5)
    if x.size:
        ref = ort_node('BatchNormalization', [x, sc, bi, mu, var], epsilon=1e-5, opset=15)
        rt, at = _tol(dtype)
        np.testing.assert_allclose(out, ref, rtol=rt, atol=at)


# --- whole nodes through jitort.compile (strict: nothing interpreted) vs onnxruntime ------------
import onnxruntime as ort  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.helper import np_dtype_to_tensor_dtype as tt  # noqa: E402

import jitort  # noqa: E402


def _run_both(node, inputs, inits=(), opset=18, threads=1):
    vi = [helper.make_tensor_value_info(n, tt(a.dtype), a.shape) for n, a in inputs]
    init = [numpy_helper.from_array(np.asarray(a), n) for n, a in inits]
    outs = [helper.make_tensor_value_info(node.output[0], tt(inputs[0][1].dtype), None)]
    g = helper.make_graph([node], 'g', vi, outs, initializer=init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 10
    cm = jitort.compile(m, threads=threads, strict=True)
    got = cm.run(None, dict(inputs))[0]
    assert cm.fallback_nodes() == []
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref = ort.InferenceSession(m.SerializeToString(), so,
                               providers=['CPUExecutionProvider']).run(None, dict(inputs))[0]
    assert got.shape == ref.shape and got.dtype == ref.dtype
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=2e-5)
    return got


def _x(*shape, dtype=np.float32, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 2 + 1).astype(dtype)


@pytest.mark.parametrize('shape,groups,opset', [
    ((2, 6, 5, 4), 3, 18), ((2, 6, 5, 4), 3, 21), ((1, 8, 16), 2, 21), ((3, 4), 2, 21),
    ((2, 4, 2, 3, 2), 4, 21), ((1, 64, 32, 32), 32, 21)])
def test_groupnorm(shape, groups, opset, nthreads):
    c = shape[1]
    k = c if opset >= 21 else groups
    sc, bi = _x(k, seed=1), _x(k, seed=2)
    node = helper.make_node('GroupNormalization', ['x', 's', 'b'], ['y'], num_groups=groups,
                            epsilon=1e-3)
    _run_both(node, [('x', _x(*shape))], [('s', sc), ('b', bi)], opset=opset, threads=nthreads)


@pytest.mark.parametrize('shape', [(2, 3, 10), (2, 3, 4, 5), (1, 2, 3, 2, 4), (2, 3, 0, 2),
                                   (1, 32, 64, 64)])
def test_instancenorm_ranks(shape, nthreads):
    node = helper.make_node('InstanceNormalization', ['x', 's', 'b'], ['y'], epsilon=1e-5)
    _run_both(node, [('x', _x(*shape)), ('s', _x(shape[1], seed=1)), ('b', _x(shape[1], seed=2))],
              opset=17, threads=nthreads)


@pytest.mark.parametrize('shape,axis,p', [((3, 5), -1, 2), ((3, 5), 0, 2), ((2, 4, 6), 1, 1),
                                          ((2, 4, 6), 2, 1), ((64, 256), 1, 2), ((4, 3), 1, 2)])
def test_lpnorm(shape, axis, p, nthreads):
    x = _x(*shape)
    x[-1] = 0  # zero norms give 0
    node = helper.make_node('LpNormalization', ['x'], ['y'], axis=axis, p=p)
    _run_both(node, [('x', x)], opset=13, threads=nthreads)


@pytest.mark.parametrize('shape,axes', [((2, 3, 4, 5), None), ((2, 3, 4, 5), [2, 3]),
                                        ((2, 3, 4, 5), [1]), ((2, 3, 4, 5), [1, 3]),
                                        ((2, 3, 4, 5), [0, 2]), ((3, 1, 4), [0, 1, 2])])
def test_mvn(shape, axes):
    kw = {} if axes is None else {'axes': axes}
    node = helper.make_node('MeanVarianceNormalization', ['x'], ['y'], **kw)
    _run_both(node, [('x', _x(*shape))], opset=13)


@pytest.mark.parametrize('shape,axis', [((4, 16), -1), ((2, 3, 8), 1), ((2, 0, 4), -1),
                                        ((64, 768), -1)])
def test_rmsnorm(shape, axis, nthreads):
    inner = int(np.prod(shape[axis:]))
    node = helper.make_node('RMSNormalization', ['x', 's'], ['y'], axis=axis, epsilon=1e-6)
    _run_both(node, [('x', _x(*shape))], [('s', _x(inner, seed=3).reshape(shape[axis:]))],
              opset=23, threads=nthreads)


@pytest.mark.parametrize('shape,axis,nout,bias', [
    ((2, 3, 5), -1, 3, True), ((2, 3, 5), 1, 2, False), ((4, 6), 0, 3, True),
    ((64, 1024), -1, 3, True)])   # the last one big enough for the parallel rows
def test_layernorm_mean_invstd_outputs(shape, axis, nout, bias, nthreads):
    """LayerNormalization's optional Mean / InvStdDev outputs, shaped like x with the
    normalized axes set to 1, against onnxruntime; strict compile (nothing interpreted)."""
    a = axis % len(shape)
    x, sc, bi = _x(*shape), _x(*shape[a:], seed=1), _x(*shape[a:], seed=2)
    names = ['y', 'mean', 'inv'][:nout]
    node = helper.make_node('LayerNormalization', ['x', 's'] + (['b'] if bias else []), names,
                            axis=axis, epsilon=1e-3)
    outs = [helper.make_tensor_value_info(nm, tt(np.dtype(np.float32)), None) for nm in names]
    g = helper.make_graph([node], 'g', [helper.make_tensor_value_info('x', tt(np.dtype(np.float32)), shape)],
                          outs, initializer=[numpy_helper.from_array(sc, 's')]
                          + ([numpy_helper.from_array(bi, 'b')] if bias else []))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)])
    m.ir_version = 10
    cm = jitort.compile(m, threads=nthreads, strict=True)
    got = cm.run(None, {'x': x})
    assert cm.fallback_nodes() == []
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=['CPUExecutionProvider']).run(None, {'x': x})
    assert len(got) == nout
    for gv, wv in zip(got, want):
        assert gv.shape == wv.shape and gv.dtype == wv.dtype
        np.testing.assert_allclose(gv, wv, rtol=1e-4, atol=2e-5)
