"""Normalization kernels (ONNX LayerNormalization, InstanceNormalization,
BatchNormalization in inference mode).

All arrays C-contiguous float32 or float64 (one dtype per call); statistics are
accumulated in the input dtype with a two-pass (mean, then centered sum of squares)
algorithm. ``eps`` is a Python float. out may alias x.
"""
import math

import numpy as np
from numba import njit, prange

_PAR_MIN_WORK = 1 << 15


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _mean_invstd(r, eps):
    """(mean, 1/sqrt(var + eps)) of the 1-D row r (biased variance), in r's dtype."""
    n = r.shape[0]
    t = r.dtype.type
    s = t(0.0)
    for j in range(n):
        s += r[j]
    mean = s / t(n)
    q = t(0.0)
    for j in range(n):
        d = r[j] - mean
        q += d * d
    var = q / t(n)
    return mean, t(1.0) / math.sqrt(var + t(eps))


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _layernorm_row(r, scale, bias, o, eps, has_bias):
    mean, inv = _mean_invstd(r, eps)
    n = r.shape[0]
    if has_bias:
        for j in range(n):
            o[j] = (r[j] - mean) * inv * scale[j] + bias[j]
    else:
        for j in range(n):
            o[j] = (r[j] - mean) * inv * scale[j]


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _layernorm_par(x, scale, bias, out, eps, has_bias):
    for o in prange(x.shape[0]):
        _layernorm_row(x[o], scale, bias, out[o], eps, has_bias)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def layernorm2d(x, scale, bias, out, eps, has_bias):
    """LayerNormalization over the last axis: x, out (O, N); scale, bias (N,).

    out[o] = (x[o] - mean) / sqrt(var + eps) * scale + bias (bias only if has_bias; pass
    any 1-D dummy otherwise). N == 0 writes nothing.
    """
    o_n, n = x.shape
    if n == 0:
        return
    if o_n * n >= _PAR_MIN_WORK and o_n > 1:
        _layernorm_par(x, scale, bias, out, eps, has_bias)
        return
    for o in range(o_n):
        _layernorm_row(x[o], scale, bias, out[o], eps, has_bias)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _instnorm_row(r, a, b, o, eps):
    mean, inv = _mean_invstd(r, eps)
    k = inv * a
    for j in range(r.shape[0]):
        o[j] = (r[j] - mean) * k + b


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _instnorm_par(x2, scale, bias, o2, eps, c_n):
    for p in prange(x2.shape[0]):
        c = p % c_n
        _instnorm_row(x2[p], scale[c], bias[c], o2[p], eps)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def instancenorm3d(x, scale, bias, out, eps):
    """InstanceNormalization: x, out (N, C, S); scale, bias (C,). Normalizes each
    (n, c) row of S elements; S == 0 writes nothing."""
    n_n, c_n, s_n = x.shape
    if s_n == 0:
        return
    x2 = x.reshape(n_n * c_n, s_n)
    o2 = out.reshape(n_n * c_n, s_n)
    if n_n * c_n * s_n >= _PAR_MIN_WORK and n_n * c_n > 1:
        _instnorm_par(x2, scale, bias, o2, eps, c_n)
        return
    for p in range(n_n * c_n):
        c = p % c_n
        _instnorm_row(x2[p], scale[c], bias[c], o2[p], eps)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def batchnorm3d(x, scale, bias, mean, var, out, eps):
    """BatchNormalization (inference): x, out (N, C, S); scale, bias, mean, var (C,).

    out = (x - mean[c]) / sqrt(var[c] + eps) * scale[c] + bias[c], evaluated as
    x * a[c] + b[c].
    """
    n_n, c_n, s_n = x.shape
    t = x.dtype.type
    e = t(eps)
    for c in range(c_n):
        a = scale[c] / math.sqrt(var[c] + e)
        b = bias[c] - mean[c] * a
        for n in range(n_n):
            xr = x[n, c]
            orow = out[n, c]
            for s in range(s_n):
                orow[s] = xr[s] * a + b
