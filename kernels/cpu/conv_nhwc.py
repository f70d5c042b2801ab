"""Channels-last (NHWC) 2-D convolutions: depthwise and pointwise, with the conv epilogue.

A graph pass (``jitort.passes.layout``) runs chains of depthwise and pointwise convolutions
(MobileNet / EfficientNet / GhostNet blocks, with their elementwise ops, squeeze-excite pools
and channel concats) channels-last, with one transpose where a chain starts and ends, as
onnxruntime's NCHWc transformer does. Channels-last, a depthwise tap is one contiguous
multiply-add over the channels of a pixel, whatever the plane's size (the NCHW kernels pay
loop setup per row of 7-14 elements on small planes), and a pointwise convolution is one
plain gemm ``out (P, M) = x (P, C) @ w (C, M)`` over the P = N*H*W pixels.

Layouts (C-contiguous, float32 or float64, one dtype per call):
    x   (N, H, W, C)
    w   (KH, KW, C // group, M)    "HWIO"; depthwise: (KH, KW, 1, C)
    b   (M,)                       used only when has_bias
    res (N, OH, OW, M)             residual added before the activation (has_res)
    out (N, OH, OW, M)
Begin pads ``ph``/``pw``; end pads implied by OH/OW; strides, dilations >= 1. Activation codes
are those of ``epilogue``.
"""
import numpy as np
from numba import njit, prange

from .epilogue import act_row
from .gemm import eptr, next_task, num_threads, xgemm
from .mathfn import wide_vectors

_FM = {'reassoc', 'contract', 'arcp'}

# output elements * taps above which the depthwise rows are split over threads; gemm flops
# above which pointwise row blocks are (as one plane's gemm in kernels/cpu/conv.py: at 2
# threads 1.8-2.7 MFLOP ran 1.01-1.02x the 1-thread time, 6-7.5 MFLOP 0.40-0.96x, 11-19
# MFLOP 0.54-0.77x; Xeon host, 2026-11-27)
_PAR_MIN_DW = 1 << 15
_PAR_MIN_FLOPS = 1 << 22
# pointwise: output elements per row block (256 KB of float32: the epilogue pass stays in L2)
_PW_BLOCK_ELEMS = 1 << 16


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _dw_row(r, x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act, aa, ab):
    """Output row r = n * OH + oh of a depthwise convolution: the row (OW * C values) starts
    as the bias (or zero), and each tap adds its weights times the input row it reads, one
    contiguous run of C per output pixel (no bounds test inside: each tap's valid output
    columns are computed once)."""
    wide_vectors()
    n_h, n_w, c_n = x.shape[1], x.shape[2], x.shape[3]
    kh_n, kw_n = w.shape[0], w.shape[1]
    oh_n, ow_n = out.shape[1], out.shape[2]
    n = r // oh_n
    oh = r - n * oh_n
    lo = ow_n * c_n
    o = eptr(out, r * lo)
    z = out.dtype.type(0)
    if has_bias:
        for q in range(ow_n):
            oq = eptr(out, r * lo + q * c_n)
            for c in range(c_n):
                oq[c] = b[c]
    else:
        for q in range(lo):
            o[q] = z
    # each tap's valid output columns [q0, q1): input column q * sw + kw * dw - pw in [0, W);
    # between qa and qb all of a row's taps are valid: there the taps of one kernel row are
    # added in one pass (3, 5, 7 wide: one load and store of the output per kernel row, not
    # per tap)
    qa = 0
    qb = ow_n
    for kw in range(kw_n):
        off = kw * dw - pw
        q0 = 0 if off >= 0 else (-off + sw - 1) // sw
        q1 = min(ow_n, (n_w - off + sw - 1) // sw) if n_w > off else 0
        qa = max(qa, q0)
        qb = min(qb, q1)
    fuse = kw_n == 3 or kw_n == 5 or kw_n == 7
    if not fuse or qb < qa:
        qa = qb = 0
    cs = sw * c_n
    dc = dw * c_n
    ih0 = oh * sh - ph
    # 3x3 with all three input rows inside: the interior's nine taps in one pass (one load and
    # store of the output per pixel, not three)
    all9 = (kh_n == 3 and kw_n == 3 and qb > qa and ih0 >= 0 and ih0 + 2 * dh < n_h)
    if all9:
        rs = dh * n_w * c_n
        xb = (n * n_h + ih0) * n_w * c_n + (qa * sw - pw) * c_n
        w0 = eptr(w, 0)
        w1 = eptr(w, c_n)
        w2 = eptr(w, 2 * c_n)
        w3 = eptr(w, 3 * c_n)
        w4 = eptr(w, 4 * c_n)
        w5 = eptr(w, 5 * c_n)
        w6 = eptr(w, 6 * c_n)
        w7 = eptr(w, 7 * c_n)
        w8 = eptr(w, 8 * c_n)
        for q in range(qb - qa):
            oq = eptr(out, r * lo + (qa + q) * c_n)
            e = xb + q * cs
            x0 = eptr(x, e)
            x1 = eptr(x, e + dc)
            x2 = eptr(x, e + 2 * dc)
            x3 = eptr(x, e + rs)
            x4 = eptr(x, e + rs + dc)
            x5 = eptr(x, e + rs + 2 * dc)
            x6 = eptr(x, e + 2 * rs)
            x7 = eptr(x, e + 2 * rs + dc)
            x8 = eptr(x, e + 2 * rs + 2 * dc)
            for c in range(c_n):
                oq[c] += (w0[c] * x0[c] + w1[c] * x1[c] + w2[c] * x2[c] + w3[c] * x3[c]
                          + w4[c] * x4[c] + w5[c] * x5[c] + w6[c] * x6[c] + w7[c] * x7[c]
                          + w8[c] * x8[c])
    for kh in range(kh_n):
        ih = ih0 + kh * dh
        if ih < 0 or ih >= n_h:
            continue
        xrow = (n * n_h + ih) * n_w * c_n
        for kw in range(kw_n):
            off = kw * dw - pw          # input column of output column q: q * sw + off
            q0 = 0 if off >= 0 else (-off + sw - 1) // sw
            q1 = min(ow_n, (n_w - off + sw - 1) // sw) if n_w > off else 0
            wv = eptr(w, (kh * kw_n + kw) * c_n)
            for q in range(q0, q1):
                if q == qa and qb > qa:   # the fused interior, done below
                    continue
                if qa < q < qb:
                    continue
                oq = eptr(out, r * lo + q * c_n)
                xq = eptr(x, xrow + (q * sw + off) * c_n)
                for c in range(c_n):
                    oq[c] += wv[c] * xq[c]
        if qb <= qa or all9:
            continue
        wk = (kh * kw_n) * c_n
        w0 = eptr(w, wk)
        w1 = eptr(w, wk + c_n)
        w2 = eptr(w, wk + 2 * c_n)
        xb = xrow + (qa * sw - pw) * c_n
        ob = r * lo + qa * c_n
        if kw_n == 3:
            for q in range(qb - qa):
                oq = eptr(out, ob + q * c_n)
                x0 = eptr(x, xb + q * cs)
                x1 = eptr(x, xb + q * cs + dc)
                x2 = eptr(x, xb + q * cs + 2 * dc)
                for c in range(c_n):
                    oq[c] += w0[c] * x0[c] + w1[c] * x1[c] + w2[c] * x2[c]
        else:
            w3 = eptr(w, wk + 3 * c_n)
            w4 = eptr(w, wk + 4 * c_n)
            if kw_n == 5:
                for q in range(qb - qa):
                    oq = eptr(out, ob + q * c_n)
                    x0 = eptr(x, xb + q * cs)
                    x1 = eptr(x, xb + q * cs + dc)
                    x2 = eptr(x, xb + q * cs + 2 * dc)
                    x3 = eptr(x, xb + q * cs + 3 * dc)
                    x4 = eptr(x, xb + q * cs + 4 * dc)
                    for c in range(c_n):
                        oq[c] += (w0[c] * x0[c] + w1[c] * x1[c] + w2[c] * x2[c]
                                  + w3[c] * x3[c] + w4[c] * x4[c])
            else:
                w5 = eptr(w, wk + 5 * c_n)
                w6 = eptr(w, wk + 6 * c_n)
                for q in range(qb - qa):
                    oq = eptr(out, ob + q * c_n)
                    x0 = eptr(x, xb + q * cs)
                    x1 = eptr(x, xb + q * cs + dc)
                    x2 = eptr(x, xb + q * cs + 2 * dc)
                    x3 = eptr(x, xb + q * cs + 3 * dc)
                    x4 = eptr(x, xb + q * cs + 4 * dc)
                    x5 = eptr(x, xb + q * cs + 5 * dc)
                    x6 = eptr(x, xb + q * cs + 6 * dc)
                    for c in range(c_n):
                        oq[c] += (w0[c] * x0[c] + w1[c] * x1[c] + w2[c] * x2[c]
                                  + w3[c] * x3[c] + w4[c] * x4[c] + w5[c] * x5[c]
                                  + w6[c] * x6[c])
    if has_res:
        rr = eptr(res, r * lo)
        for q in range(lo):
            o[q] += rr[q]
    if act != 0:
        act_row(out.reshape(-1)[r * lo:(r + 1) * lo], act, aa, ab)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _dw_par(nw, x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act, aa, ab):
    """nw workers pull output rows from a shared counter."""
    nrow = out.shape[0] * out.shape[1]
    counter = np.zeros(1, np.int64)
    for wk in prange(nw):
        while True:
            r = next_task(counter)
            if r >= nrow:
                break
            _dw_row(r, x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act,
                    aa, ab)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def dwconv_nhwc(x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act, alpha_act,
                beta_act):
    """Depthwise convolution, channels-last (module docstring). ``res`` is read only when
    ``has_res`` (else pass ``out``); it must not alias ``out``."""
    nrow = out.shape[0] * out.shape[1]
    if nrow == 0 or out.shape[2] == 0 or out.shape[3] == 0:
        return
    sh, sw, ph, pw = np.int64(sh), np.int64(sw), np.int64(ph), np.int64(pw)
    dh, dw, act = np.int64(dh), np.int64(dw), np.int64(act)
    has_bias, has_res = bool(has_bias), bool(has_res)
    aa, ab = np.float64(alpha_act), np.float64(beta_act)
    kh_n, kw_n = w.shape[0], w.shape[1]
    oh_n, ow_n = out.shape[1], out.shape[2]
    # few output columns with every tap inside the input (small planes, wide kernels: 7x7 on
    # a 7x7 plane has one): copy the input zero-padded once, so every column takes the fused
    # path of _dw_row, instead of one pass per tap on the edge columns
    inner = ow_n
    for kw in range(kw_n):
        off = kw * dw - pw
        lo = 0 if off >= 0 else (-off + sw - 1) // sw
        hi = min(ow_n, (x.shape[2] - off + sw - 1) // sw) if x.shape[2] > off else 0
        inner = min(inner, hi - lo)
    if (ph > 0 or pw > 0) and 2 * inner < ow_n:
        hp = (oh_n - 1) * sh + (kh_n - 1) * dh + 1
        wp = (ow_n - 1) * sw + (kw_n - 1) * dw + 1
        xp = np.zeros((x.shape[0], hp, wp, x.shape[3]), x.dtype)
        for n in range(x.shape[0]):
            for i in range(min(x.shape[1], hp - ph)):
                for j in range(min(x.shape[2], wp - pw)):
                    d = xp[n, ph + i, pw + j]
                    src = x[n, i, j]
                    for c in range(x.shape[3]):
                        d[c] = src[c]
        _dw_run(xp, w, b, res, out, sh, sw, np.int64(0), np.int64(0), dh, dw, has_bias, has_res,
                act, aa, ab)
    else:
        _dw_run(x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act, aa, ab)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _dw_run(x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act, aa, ab):
    nrow = out.shape[0] * out.shape[1]
    nth = num_threads()
    work = out.size * w.shape[0] * w.shape[1]
    if nth > 1 and nrow > 1 and work >= _PAR_MIN_DW:
        _dw_par(min(nth, nrow), x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res,
                act, aa, ab)
    else:
        for r in range(nrow):
            _dw_row(r, x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act,
                    aa, ab)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _pw_task(t, rb, x, w, b, res, out, has_bias, has_res, act, aa, ab):
    """Pixels [t * rb, t * rb + rb) of a pointwise convolution: one gemm into ``out`` (onto
    the residual + bias when there is a residual), then bias and activation while the block
    is in cache."""
    wide_vectors()
    p_n = x.shape[0] * x.shape[1] * x.shape[2]
    c_n = x.shape[3]
    m_n = out.shape[3]
    p0 = t * rb
    p1 = min(p_n, p0 + rb)
    o = eptr(out, p0 * m_n)
    nel = (p1 - p0) * m_n
    beta = 0.0
    if has_res:
        rr = eptr(res, p0 * m_n)
        if has_bias:
            for p in range(p1 - p0):
                oq = eptr(out, (p0 + p) * m_n)
                rq = eptr(res, (p0 + p) * m_n)
                for m in range(m_n):
                    oq[m] = rq[m] + b[m]
        else:
            for q in range(nel):
                o[q] = rr[q]
        beta = 1.0
    if c_n == 0:
        if not has_res:
            for q in range(nel):
                o[q] = 0
            if has_bias:
                for p in range(p1 - p0):
                    oq = eptr(out, (p0 + p) * m_n)
                    for m in range(m_n):
                        oq[m] += b[m]
    else:
        st = xgemm(0, 0, p1 - p0, m_n, c_n, 1.0, x, p0 * c_n, c_n, w, 0, m_n, beta, out,
                   p0 * m_n, m_n)
        if st != 0:
            raise RuntimeError("BLAS gemm failed")
        if has_bias and not has_res:
            for p in range(p1 - p0):
                oq = eptr(out, (p0 + p) * m_n)
                for m in range(m_n):
                    oq[m] += b[m]
    if act != 0:
        act_row(out.reshape(-1)[p0 * m_n:p1 * m_n], act, aa, ab)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _pw_par(nw, ntask, rb, x, w, b, res, out, has_bias, has_res, act, aa, ab):
    counter = np.zeros(1, np.int64)
    for wk in prange(nw):
        while True:
            t = next_task(counter)
            if t >= ntask:
                break
            _pw_task(t, rb, x, w, b, res, out, has_bias, has_res, act, aa, ab)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def pwconv_nhwc(x, w, b, res, out, has_bias, has_res, act, alpha_act, beta_act):
    """Pointwise (1x1, stride 1, no pad, one group) convolution, channels-last: out (P, M) =
    act(x (P, C) @ w (C, M) + b [+ res]) in row blocks of ~_PW_BLOCK_ELEMS outputs, over
    threads when the gemm is big enough. ``w`` is (1, 1, C, M)."""
    p_n = x.shape[0] * x.shape[1] * x.shape[2]
    m_n = out.shape[3]
    if p_n == 0 or m_n == 0:
        return
    has_bias, has_res, act = bool(has_bias), bool(has_res), np.int64(act)
    aa, ab = np.float64(alpha_act), np.float64(beta_act)
    nth = num_threads()
    rb = max(1, _PW_BLOCK_ELEMS // m_n)
    flops = 2 * p_n * m_n * x.shape[3]
    if nth > 1 and flops >= _PAR_MIN_FLOPS:
        # at least two blocks per worker so that an uneven last block does not idle one
        rb = max(8, min(rb, (p_n + 2 * nth - 1) // (2 * nth)))
    ntask = (p_n + rb - 1) // rb
    if nth > 1 and ntask > 1 and flops >= _PAR_MIN_FLOPS:
        _pw_par(min(nth, ntask), ntask, rb, x, w, b, res, out, has_bias, has_res, act, aa, ab)
    else:
        for t in range(ntask):
            _pw_task(t, rb, x, w, b, res, out, has_bias, has_res, act, aa, ab)
