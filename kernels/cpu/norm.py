"""Normalization kernels (ONNX LayerNormalization, InstanceNormalization,
BatchNormalization in inference mode).

All arrays C-contiguous float32 or float64 (one dtype per call); statistics are
accumulated in the input dtype with a two-pass (mean, then centered sum of squares)
algorithm. ``eps`` is a Python float. out may alias x.
"""
import math

import numpy as np
from numba import njit, prange

from .nthreads import num_threads

#: work from which these kernels split over the threads (4x below its value under Numba's
#: TBB layer, as a region's cost fell: kernels/cpu/workers.py)
_PAR_MIN_WORK = 1 << 13


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
    if num_threads() > 1 and o_n * n >= _PAR_MIN_WORK and o_n > 1:
        _layernorm_par(x, scale, bias, out, eps, has_bias)
        return
    for o in range(o_n):
        _layernorm_row(x[o], scale, bias, out[o], eps, has_bias)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _layernorm_stats_row(x, scale, bias, out, mean, inv, eps, has_bias, o):
    m, v = _mean_invstd(x[o], eps)
    mean[o] = m
    inv[o] = v
    r = x[o]
    w = out[o]
    if has_bias:
        for j in range(r.shape[0]):
            w[j] = (r[j] - m) * v * scale[j] + bias[j]
    else:
        for j in range(r.shape[0]):
            w[j] = (r[j] - m) * v * scale[j]


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _layernorm_stats_par(x, scale, bias, out, mean, inv, eps, has_bias):
    for o in prange(x.shape[0]):
        _layernorm_stats_row(x, scale, bias, out, mean, inv, eps, has_bias, o)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def layernorm2d_stats(x, scale, bias, out, mean, inv, eps, has_bias):
    """layernorm2d that also writes each row's mean and 1/sqrt(var + eps) to mean[o], inv[o]
    (LayerNormalization's optional Mean and InvStdDev outputs)."""
    o_n, n = x.shape
    if n == 0:
        return
    if num_threads() > 1 and o_n * n >= _PAR_MIN_WORK and o_n > 1:
        _layernorm_stats_par(x, scale, bias, out, mean, inv, eps, has_bias)
        return
    for o in range(o_n):
        _layernorm_stats_row(x, scale, bias, out, mean, inv, eps, has_bias, o)


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
    if num_threads() > 1 and n_n * c_n * s_n >= _PAR_MIN_WORK and n_n * c_n > 1:
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


# --- GroupNormalization ----------------------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _groupnorm_group(xg, og, scale, bias, g, eps, per_channel):
    """Normalize one (n, g) group: xg, og (Cg, S)."""
    cg, s_n = xg.shape
    mean, inv = _mean_invstd(xg.reshape(cg * s_n), eps)
    for c in range(cg):
        ch = g * cg + c if per_channel else g
        a = inv * scale[ch]
        b = bias[ch] - mean * a
        xr = xg[c]
        orow = og[c]
        for j in range(s_n):
            orow[j] = xr[j] * a + b


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _groupnorm_par(x, scale, bias, out, eps, per_channel):
    n_n, g_n = x.shape[0], x.shape[1]
    for p in prange(n_n * g_n):
        n = p // g_n
        g = p - n * g_n
        _groupnorm_group(x[n, g], out[n, g], scale, bias, g, eps, per_channel)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def groupnorm4d(x, scale, bias, out, eps, per_channel):
    """GroupNormalization: x, out (N, G, Cg, S); statistics per (n, g) over Cg * S elements.

    scale, bias are (G * Cg,) per channel (opset 21) or (G,) per group (opset 18,
    ``per_channel`` False). An empty group writes nothing.
    """
    n_n, g_n, cg, s_n = x.shape
    if cg * s_n == 0:
        return
    if num_threads() > 1 and n_n * g_n * cg * s_n >= _PAR_MIN_WORK and n_n * g_n > 1:
        _groupnorm_par(x, scale, bias, out, eps, per_channel)
        return
    for n in range(n_n):
        for g in range(g_n):
            _groupnorm_group(x[n, g], out[n, g], scale, bias, g, eps, per_channel)


# --- RMSNormalization ------------------------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _rms_row(r, scale, o, eps):
    n = r.shape[0]
    t = r.dtype.type
    q = t(0.0)
    for j in range(n):
        q += r[j] * r[j]
    inv = t(1.0) / math.sqrt(q / t(n) + t(eps))
    for j in range(n):
        o[j] = r[j] * inv * scale[j]


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _rms_par(x, scale, out, eps):
    for o in prange(x.shape[0]):
        _rms_row(x[o], scale, out[o], eps)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def rmsnorm2d(x, scale, out, eps):
    """RMSNormalization over the last axis: x, out (O, N); scale (N,).
    out[o] = x[o] / sqrt(mean(x[o]^2) + eps) * scale."""
    o_n, n = x.shape
    if n == 0:
        return
    if num_threads() > 1 and o_n * n >= _PAR_MIN_WORK and o_n > 1:
        _rms_par(x, scale, out, eps)
        return
    for o in range(o_n):
        _rms_row(x[o], scale, out[o], eps)


# --- LpNormalization -------------------------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _lp_block(xb, ob, tmp, p):
    """ob (A, I) = xb / ||xb||_p over axis 0, per column; tmp (I,) scratch. A zero norm
    gives 0 (as onnxruntime)."""
    a_n, ni = xb.shape
    t = xb.dtype.type
    for i in range(ni):
        tmp[i] = t(0.0)
    for a in range(a_n):
        xr = xb[a]
        if p == 1:
            for i in range(ni):
                tmp[i] += abs(xr[i])
        else:
            for i in range(ni):
                tmp[i] += xr[i] * xr[i]
    for i in range(ni):
        nv = tmp[i] if p == 1 else math.sqrt(tmp[i])
        tmp[i] = t(1.0) / nv if nv != t(0.0) else t(0.0)
    for a in range(a_n):
        xr = xb[a]
        orow = ob[a]
        for i in range(ni):
            orow[i] = xr[i] * tmp[i]


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _lp_row(r, o, p):
    n = r.shape[0]
    t = r.dtype.type
    s = t(0.0)
    if p == 1:
        for j in range(n):
            s += abs(r[j])
    else:
        for j in range(n):
            s += r[j] * r[j]
        s = math.sqrt(s)
    k = t(1.0) / s if s != t(0.0) else t(0.0)
    for j in range(n):
        o[j] = r[j] * k


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _lp_planes(x, out, p, o0, o1):
    """Planes [o0, o1) of x, out (O, A, I): each row (I == 1) or each (A, I) block."""
    o_n, a_n, ni = x.shape
    if ni == 1:
        x2 = x.reshape(o_n, a_n)
        o2 = out.reshape(o_n, a_n)
        for o in range(o0, o1):
            _lp_row(x2[o], o2[o], p)
        return
    tmp = np.empty(ni, x.dtype)
    for o in range(o0, o1):
        _lp_block(x[o], out[o], tmp, p)


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _lp_par(x, out, p):
    o_n = x.shape[0]
    nw = min(num_threads(), o_n)
    for w in prange(nw):
        _lp_planes(x, out, p, w * o_n // nw, (w + 1) * o_n // nw)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def lpnorm3d(x, out, p):
    """LpNormalization over axis 1 of x, out (O, A, I); p is 1 or 2."""
    o_n, a_n, ni = x.shape
    if o_n * a_n * ni == 0:
        return
    if num_threads() > 1 and o_n * a_n * ni >= _PAR_MIN_WORK and o_n > 1:
        _lp_par(x, out, p)
    else:
        _lp_planes(x, out, p, 0, o_n)


# --- MeanVarianceNormalization ---------------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _mvn_rows(x4, o4, p, c):
    """One (p, c) of x4, o4 (P, A, C, B): statistics over its A rows of B elements."""
    a_n, b_n = x4.shape[1], x4.shape[3]
    t = x4.dtype.type
    cnt = t(a_n * b_n)
    s = t(0.0)
    for a in range(a_n):
        r = x4[p, a, c]
        for b in range(b_n):
            s += r[b]
    mean = s / cnt
    q = t(0.0)
    for a in range(a_n):
        r = x4[p, a, c]
        for b in range(b_n):
            d = r[b] - mean
            q += d * d
    k = t(1.0) / (math.sqrt(q / cnt) + t(1e-9))
    for a in range(a_n):
        r = x4[p, a, c]
        o = o4[p, a, c]
        for b in range(b_n):
            o[b] = (r[b] - mean) * k


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _mvn_rows_par(x4, o4):
    c_n = x4.shape[2]
    for pc in prange(x4.shape[0] * c_n):
        p = pc // c_n
        _mvn_rows(x4, o4, p, pc - p * c_n)


@njit(inline='always')
def _mvn_pass(xp, op, s, v, step):
    """One pass over the rows of Q elements of xp (A, C, B, Q): ``step`` 0 sums them into s
    (C, Q), 1 their squared deviations from the mean s into v, 2 writes (x - s) * v into op.
    Inlined with a constant step: one loop nest each."""
    a_n, c_n, b_n, q_n = xp.shape
    for a in range(a_n):
        for c in range(c_n):
            sr = s[c]
            vr = v[c]
            for b in range(b_n):
                xr = xp[a, c, b]
                if step == 0:
                    for q in range(q_n):
                        sr[q] += xr[q]
                elif step == 1:
                    for q in range(q_n):
                        d = xr[q] - sr[q]
                        vr[q] += d * d
                else:
                    orow = op[a, c, b]
                    for q in range(q_n):
                        orow[q] = (xr[q] - sr[q]) * vr[q]


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def mvn5d(x, out):
    """MeanVarianceNormalization over axes 1 and 3 of x, out (P, A, C, B, Q): per (p, c, q)
    out = (x - mean) / (sqrt(var) + 1e-9), the function body of the ONNX schema.
    Any reduced axis set with at most two reduced runs maps onto this view."""
    p_n, a_n, c_n, b_n, q_n = x.shape
    cnt = a_n * b_n
    if cnt == 0 or p_n * c_n * q_n == 0:
        return
    if q_n == 1:  # rows of B contiguous elements
        x4 = x.reshape(p_n, a_n, c_n, b_n)
        o4 = out.reshape(p_n, a_n, c_n, b_n)
        if num_threads() > 1 and p_n * c_n > 1 and p_n * a_n * c_n * b_n >= _PAR_MIN_WORK:
            _mvn_rows_par(x4, o4)
        else:
            for p in range(p_n):
                for c in range(c_n):
                    _mvn_rows(x4, o4, p, c)
        return
    t = x.dtype.type
    s = np.empty((c_n, q_n), x.dtype)
    v = np.empty((c_n, q_n), x.dtype)
    for p in range(p_n):
        s[:, :] = t(0.0)
        v[:, :] = t(0.0)
        _mvn_pass(x[p], out[p], s, v, 0)
        for c in range(c_n):
            for q in range(q_n):
                s[c, q] = s[c, q] / t(cnt)
        _mvn_pass(x[p], out[p], s, v, 1)
        for c in range(c_n):
            for q in range(q_n):
                v[c, q] = t(1.0) / (math.sqrt(v[c, q] / t(cnt)) + t(1e-9))
        _mvn_pass(x[p], out[p], s, v, 2)
