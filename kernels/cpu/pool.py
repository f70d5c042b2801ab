"""Pooling kernels (ONNX MaxPool, AveragePool, GlobalAverage/MaxPool, LRN), NCHW.

All arrays C-contiguous float32 or float64 (one dtype per call). 2-D pools take x
(N, C, H, W) and a preallocated out (N, C, OH, OW) sized by the caller (ceil_mode
included); ``ph``/``pw`` are the begin pads. Windows are clipped to the valid input
region, so padding never contributes to a max or a sum.
"""
import numpy as np
from numba import njit, prange

from .conv import _valid_range

_PAR_MIN_WORK = 1 << 16


# --- MaxPool ---------------------------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _maxpool_plane(xp, op, kh_n, kw_n, sh, sw, ph, pw, dh, dw):
    """op (OH, OW) = max over windows of xp (H, W); -inf where a window is empty."""
    h, w = xp.shape
    oh_n, ow_n = op.shape
    ninf = -np.inf
    for oh in range(oh_n):
        dst = op[oh]
        for ow in range(ow_n):
            dst[ow] = ninf
        for kh in range(kh_n):
            ih = oh * sh - ph + kh * dh
            if ih < 0 or ih >= h:
                continue
            src = xp[ih]
            for kw in range(kw_n):
                off = kw * dw - pw
                ow0, ow1 = _valid_range(off, sw, w, ow_n)
                if sw == 1:
                    for ow in range(ow0, ow1):
                        v = src[ow + off]
                        dst[ow] = v if v > dst[ow] else dst[ow]
                else:
                    for ow in range(ow0, ow1):
                        v = src[ow * sw + off]
                        dst[ow] = v if v > dst[ow] else dst[ow]


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _maxpool_ser(x3, o3, kh, kw, sh, sw, ph, pw, dh, dw):
    for p in range(x3.shape[0]):
        _maxpool_plane(x3[p], o3[p], kh, kw, sh, sw, ph, pw, dh, dw)


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _maxpool_par(x3, o3, kh, kw, sh, sw, ph, pw, dh, dw):
    for p in prange(x3.shape[0]):
        _maxpool_plane(x3[p], o3[p], kh, kw, sh, sw, ph, pw, dh, dw)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def maxpool2d(x, out, kh, kw, sh, sw, ph, pw, dh, dw):
    """ONNX MaxPool: x (N, C, H, W) -> out (N, C, OH, OW); kernel kh x kw, strides
    sh/sw, begin pads ph/pw, dilations dh/dw. NaN inputs are skipped (not propagated)."""
    n, c, h, w = x.shape
    oh_n, ow_n = out.shape[2], out.shape[3]
    x3 = x.reshape(n * c, h, w)
    o3 = out.reshape(n * c, oh_n, ow_n)
    if n * c * oh_n * ow_n * kh * kw >= _PAR_MIN_WORK:
        _maxpool_par(x3, o3, kh, kw, sh, sw, ph, pw, dh, dw)
    else:
        _maxpool_ser(x3, o3, kh, kw, sh, sw, ph, pw, dh, dw)


# --- AveragePool -----------------------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _window_count(o, k, s, pb, pe, size, include_pad):
    """Number of window cells counted in the divisor for output index o."""
    start = o * s - pb
    if include_pad:
        lo = start if start > -pb else -pb
        hi = min(start + k, size + pe)
    else:
        lo = max(start, 0)
        hi = min(start + k, size)
    return max(hi - lo, 0)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _avgpool_plane(xp, op, cnt_w, kh_n, kw_n, sh, sw, ph, pw, include_pad, pe_h):
    """op (OH, OW) = window sums of xp (H, W) / divisor; cnt_w (OW,) holds the width
    counts (already as the dtype)."""
    h, w = xp.shape
    oh_n, ow_n = op.shape
    for oh in range(oh_n):
        dst = op[oh]
        for ow in range(ow_n):
            dst[ow] = 0
        for kh in range(kh_n):
            ih = oh * sh - ph + kh
            if ih < 0 or ih >= h:
                continue
            src = xp[ih]
            for kw in range(kw_n):
                off = kw - pw
                ow0, ow1 = _valid_range(off, sw, w, ow_n)
                if sw == 1:
                    for ow in range(ow0, ow1):
                        dst[ow] += src[ow + off]
                else:
                    for ow in range(ow0, ow1):
                        dst[ow] += src[ow * sw + off]
        ch = op.dtype.type(_window_count(oh, kh_n, sh, ph, pe_h, h, include_pad))
        for ow in range(ow_n):
            dst[ow] = dst[ow] / (ch * cnt_w[ow])


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _avgpool_ser(x3, o3, cnt_w, kh, kw, sh, sw, ph, pw, include_pad, pe_h):
    for p in range(x3.shape[0]):
        _avgpool_plane(x3[p], o3[p], cnt_w, kh, kw, sh, sw, ph, pw, include_pad, pe_h)


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _avgpool_par(x3, o3, cnt_w, kh, kw, sh, sw, ph, pw, include_pad, pe_h):
    for p in prange(x3.shape[0]):
        _avgpool_plane(x3[p], o3[p], cnt_w, kh, kw, sh, sw, ph, pw, include_pad, pe_h)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def avgpool2d(x, out, kh, kw, sh, sw, ph, pw, count_include_pad, pad_h_end, pad_w_end):
    """ONNX AveragePool (no dilation): x (N, C, H, W) -> out (N, C, OH, OW).

    Sums cover the window clipped to the input. Divisor: number of window cells inside the
    input, or with ``count_include_pad`` inside the explicitly padded input
    [-ph, H + pad_h_end) x [-pw, W + pad_w_end) (cells added by ceil_mode beyond the end
    pads are never counted).
    """
    n, c, h, w = x.shape
    oh_n, ow_n = out.shape[2], out.shape[3]
    cnt_w = np.empty(ow_n, x.dtype)
    for ow in range(ow_n):
        cnt_w[ow] = _window_count(ow, kw, sw, pw, pad_w_end, w, count_include_pad)
    x3 = x.reshape(n * c, h, w)
    o3 = out.reshape(n * c, oh_n, ow_n)
    if n * c * oh_n * ow_n * kh * kw >= _PAR_MIN_WORK:
        _avgpool_par(x3, o3, cnt_w, kh, kw, sh, sw, ph, pw, count_include_pad, pad_h_end)
    else:
        _avgpool_ser(x3, o3, cnt_w, kh, kw, sh, sw, ph, pw, count_include_pad, pad_h_end)


# --- Global pools ----------------------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _row_sum(r):
    s = r.dtype.type(0)
    for i in range(r.shape[0]):
        s += r[i]
    return s


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _row_max(r):
    m = r.dtype.type(-np.inf)
    for i in range(r.shape[0]):
        v = r[i]
        m = v if v > m else m
    return m


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _global_avg_par(x2, o1):
    cnt = x2.dtype.type(x2.shape[1])
    for p in prange(x2.shape[0]):
        o1[p] = _row_sum(x2[p]) / cnt


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _global_max_par(x2, o1):
    for p in prange(x2.shape[0]):
        o1[p] = _row_max(x2[p])


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def global_avgpool(x, out):
    """ONNX GlobalAveragePool: x (N, C, S) (S = H*W...) -> out (N, C); S == 0 gives NaN."""
    n, c, s = x.shape
    x2 = x.reshape(n * c, s)
    o1 = out.reshape(n * c)
    if n * c * s >= _PAR_MIN_WORK and n * c > 1:
        _global_avg_par(x2, o1)
        return
    cnt = x.dtype.type(s)
    for p in range(n * c):
        o1[p] = _row_sum(x2[p]) / cnt


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def global_maxpool(x, out):
    """ONNX GlobalMaxPool: x (N, C, S) -> out (N, C); S == 0 gives -inf; NaN skipped."""
    n, c, s = x.shape
    x2 = x.reshape(n * c, s)
    o1 = out.reshape(n * c)
    if n * c * s >= _PAR_MIN_WORK and n * c > 1:
        _global_max_par(x2, o1)
        return
    for p in range(n * c):
        o1[p] = _row_max(x2[p])


# --- LRN -------------------------------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def lrn(x, out, size, alpha, beta, bias):
    """ONNX LRN over channels: x, out (N, C, S).

    out[n, c, s] = x[n, c, s] / (bias + alpha / size * sum_{c'} x[n, c', s]**2) ** beta
    with c' in [c - (size-1)//2, c + size//2] clipped to [0, C).
    """
    n_n, c_n, s_n = x.shape
    t = x.dtype.type
    coef = t(alpha / size)
    bi = t(bias)
    be = t(beta)
    acc = np.empty(s_n, x.dtype)
    for n in range(n_n):
        for c in range(c_n):
            lo = max(0, c - (size - 1) // 2)
            hi = min(c_n - 1, c + size // 2)
            for s in range(s_n):
                acc[s] = 0
            for cc in range(lo, hi + 1):
                src = x[n, cc]
                for s in range(s_n):
                    acc[s] += src[s] * src[s]
            xr = x[n, c]
            dst = out[n, c]
            for s in range(s_n):
                dst[s] = xr[s] / (bi + coef * acc[s]) ** be
