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
