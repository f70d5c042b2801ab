"""2-D convolution (ONNX Conv, NCHW), optionally fused with bias, residual add, activation.

Layouts (all C-contiguous, float32 or float64, one dtype per call):
    x   (N, C, H, W)
    w   (M, C // group, KH, KW)
    b   (M,)                       used only when has_bias (else any 1-D dummy)
    res (N, M, OH, OW)             residual added before the activation (``*_add_act``)
    out (N, M, OH, OW)             preallocated; OH/OW come from the ONNX formulas
    col 1-D scratch, same dtype, >= conv2d_scratch_elems(C, KH, KW, OH, OW, group) elems
Begin pads are ``ph``/``pw``; end pads are implied by OH/OW: any input position outside
[0, H) x [0, W) reads as zero. Strides ``sh``/``sw`` >= 1, dilations ``dh``/``dw`` >= 1.

Paths: depthwise (group == C == M) direct loops; 1x1 / stride 1 / no pad with OH == H and
OW == W direct GEMM on the input view; otherwise im2col into ``col`` + np.dot per
(n, group). Activation codes are those of ``epilogue`` (0 none, 1 relu, 2 gelu,
3 sigmoid, 4 tanh, 5 leaky_relu(alpha_act), 6 clip(alpha_act, beta_act)).
"""
import numpy as np
from numba import njit, prange

from .epilogue import chan_bias_res_act_2d
from .gemm import _dot2d

# Work (elements touched) above which the data-movement loops use prange.
_PAR_MIN_WORK = 1 << 16


def conv2d_scratch_elems(C, KH, KW, OH, OW, group):
    """Number of ``col`` scratch elements conv2d needs (plain Python, >= 1)."""
    return max(1, (C // group) * KH * KW * OH * OW)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _valid_range(off, stride, size, n_out):
    """[lo, hi) of output indices o in [0, n_out) with 0 <= o*stride + off < size."""
    lo = 0 if off >= 0 else (-off + stride - 1) // stride
    last = size - 1 - off
    hi = 0 if last < 0 else last // stride + 1
    hi = min(hi, n_out)
    lo = min(lo, n_out)
    return lo, max(lo, hi)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _im2col_row(xg, col3, row, kh_n, kw_n, sh, sw, ph, pw, dh, dw):
    """Fill col3[row] (OH, OW) for row = (c*KH + kh)*KW + kw from xg (Cg, H, W)."""
    h = xg.shape[1]
    w = xg.shape[2]
    oh_n = col3.shape[1]
    ow_n = col3.shape[2]
    c = row // (kh_n * kw_n)
    kh = (row // kw_n) % kh_n
    kw = row % kw_n
    off_w = kw * dw - pw
    ow0, ow1 = _valid_range(off_w, sw, w, ow_n)
    for oh in range(oh_n):
        ih = oh * sh - ph + kh * dh
        dst = col3[row, oh]
        if ih < 0 or ih >= h:
            for ow in range(ow_n):
                dst[ow] = 0
            continue
        src = xg[c, ih]
        for ow in range(ow0):
            dst[ow] = 0
        if sw == 1:
            for ow in range(ow0, ow1):
                dst[ow] = src[ow + off_w]
        else:
            for ow in range(ow0, ow1):
                dst[ow] = src[ow * sw + off_w]
        for ow in range(ow1, ow_n):
            dst[ow] = 0


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _im2col(xg, col3, kh_n, kw_n, sh, sw, ph, pw, dh, dw):
    """Serial im2col: col3 (Cg*KH*KW, OH, OW) from xg (Cg, H, W)."""
    for row in range(col3.shape[0]):
        _im2col_row(xg, col3, row, kh_n, kw_n, sh, sw, ph, pw, dh, dw)


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _im2col_par(xg, col3, kh_n, kw_n, sh, sw, ph, pw, dh, dw):
    """Parallel im2col (prange over col rows); same contract as ``_im2col``."""
    for row in prange(col3.shape[0]):
        _im2col_row(xg, col3, row, kh_n, kw_n, sh, sw, ph, pw, dh, dw)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _depthwise_plane(xc, wc, oc, sh, sw, ph, pw, dh, dw):
    """One channel: oc (OH, OW) = conv of xc (H, W) with wc (KH, KW), zero padding."""
    h, w = xc.shape
    kh_n, kw_n = wc.shape
    oh_n, ow_n = oc.shape
    for oh in range(oh_n):
        dst = oc[oh]
        for ow in range(ow_n):
            dst[ow] = 0
        for kh in range(kh_n):
            ih = oh * sh - ph + kh * dh
            if ih < 0 or ih >= h:
                continue
            src = xc[ih]
            for kw in range(kw_n):
                wv = wc[kh, kw]
                off_w = kw * dw - pw
                ow0, ow1 = _valid_range(off_w, sw, w, ow_n)
                if sw == 1:
                    for ow in range(ow0, ow1):
                        dst[ow] += wv * src[ow + off_w]
                else:
                    for ow in range(ow0, ow1):
                        dst[ow] += wv * src[ow * sw + off_w]


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _depthwise(xn, w, outn, sh, sw, ph, pw, dh, dw):
    """Serial depthwise conv of one image: xn (C, H, W), w (C, 1, KH, KW), outn (C, OH, OW)."""
    for c in range(xn.shape[0]):
        _depthwise_plane(xn[c], w[c, 0], outn[c], sh, sw, ph, pw, dh, dw)


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _depthwise_par(xn, w, outn, sh, sw, ph, pw, dh, dw):
    """Parallel (prange over channels) version of ``_depthwise``."""
    for c in prange(xn.shape[0]):
        _depthwise_plane(xn[c], w[c, 0], outn[c], sh, sw, ph, pw, dh, dw)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _conv2d_core(x, w, b, res, out, col, sh, sw, ph, pw, dh, dw, group, has_bias, has_res,
                 act, alpha_act, beta_act):
    """Shared implementation; see module docstring for the contract. The wrappers pass
    ``np.int64(...)``/``np.float64(...)`` so that literal constants do not make Numba
    compile a separate (slow, ~10 s) specialization of this function per wrapper."""
    n_n, c_n, h, wd = x.shape
    m_n, cg, kh_n, kw_n = w.shape
    oh_n = out.shape[2]
    ow_n = out.shape[3]
    s = oh_n * ow_n
    if n_n == 0 or m_n == 0 or s == 0:
        return
    mg = m_n // group
    kdim = cg * kh_n * kw_n
    out4 = out.reshape(n_n, group, mg, s)
    res4 = res.reshape(res.shape[0], group, mg, s)
    depthwise = group == c_n and group == m_n
    pointwise = (kh_n == 1 and kw_n == 1 and sh == 1 and sw == 1 and ph == 0 and pw == 0
                 and oh_n == h and ow_n == wd)
    if depthwise:
        par = c_n * s * kh_n * kw_n >= _PAR_MIN_WORK
        for n in range(n_n):
            if par:
                _depthwise_par(x[n], w, out[n], sh, sw, ph, pw, dh, dw)
            else:
                _depthwise(x[n], w, out[n], sh, sw, ph, pw, dh, dw)
    w3 = w.reshape(group, mg, kdim)
    x4 = x.reshape(n_n, group, cg, h * wd)
    x5 = x.reshape(n_n, group, cg, h, wd)
    col3 = col[:kdim * s].reshape(kdim, oh_n, ow_n)
    colm = col[:kdim * s].reshape(kdim, s)
    par = kdim * s >= _PAR_MIN_WORK
    for n in range(n_n):
        for g in range(group):
            og = out4[n, g]
            if not depthwise:
                if pointwise:
                    _dot2d(w3[g], x4[n, g], og)
                else:
                    if par:
                        _im2col_par(x5[n, g], col3, kh_n, kw_n, sh, sw, ph, pw, dh, dw)
                    else:
                        _im2col(x5[n, g], col3, kh_n, kw_n, sh, sw, ph, pw, dh, dw)
                    _dot2d(w3[g], colm, og)
            if has_bias or has_res or act != 0:
                rg = res4[n, g] if has_res else og
                chan_bias_res_act_2d(og, b[g * mg:(g + 1) * mg], has_bias, rg, has_res,
                                     act, alpha_act, beta_act)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def conv2d(x, w, b, out, col, sh, sw, ph, pw, dh, dw, group, has_bias):
    """ONNX Conv: out = conv(x, w) + b. See module docstring for shapes."""
    _conv2d_core(x, w, b, out, out, col, sh, sw, ph, pw, dh, dw, group, has_bias,
                 np.int64(0), np.int64(0), np.float64(0.0), np.float64(0.0))


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def conv2d_bias_act(x, w, b, out, col, sh, sw, ph, pw, dh, dw, group, has_bias, act,
                    alpha_act, beta_act):
    """out = act(conv(x, w) + b); ``act`` code and params as in ``epilogue``."""
    _conv2d_core(x, w, b, out, out, col, sh, sw, ph, pw, dh, dw, group, has_bias,
                 np.int64(0), np.int64(act), np.float64(alpha_act), np.float64(beta_act))


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def conv2d_bias_add_act(x, w, b, res, out, col, sh, sw, ph, pw, dh, dw, group, has_bias,
                        act, alpha_act, beta_act):
    """out = act(conv(x, w) + b + res); res (N, M, OH, OW) must not alias ``out``
    (the GEMM overwrites ``out`` before the residual is read)."""
    _conv2d_core(x, w, b, res, out, col, sh, sw, ph, pw, dh, dw, group, has_bias,
                 np.int64(1), np.int64(act), np.float64(alpha_act), np.float64(beta_act))
