"""Kernels of the remaining numeric ops: Det, NegativeLogLikelihoodLoss,
SoftmaxCrossEntropyLoss, TensorScatter, DeformConv.

Arrays are C-contiguous, float32 or float64 (one dtype per call) unless said otherwise.
Accumulations (determinants, loss sums) run in float64.
"""
import math

import numpy as np
from numba import njit, prange

from .gemm import num_threads, xgemm

_PAR_MIN_WORK = 1 << 16


@njit(cache=True, error_model='numpy')
def det(x, y):
    """y (B,) = determinants of x (B, n, n): LU with partial pivoting in float64."""
    b_n, n, _ = x.shape
    a = np.empty((n, n), np.float64)
    for b in range(b_n):
        for i in range(n):
            for j in range(n):
                a[i, j] = x[b, i, j]
        d = 1.0
        for k in range(n):
            p = k
            m = abs(a[k, k])
            for i in range(k + 1, n):
                v = abs(a[i, k])
                if v > m:
                    m = v
                    p = i
            if m == 0.0:
                d = 0.0
                break
            if m != m:  # NaN pivot: the determinant is NaN
                d = m
                break
            if p != k:
                for j in range(k, n):
                    t = a[k, j]
                    a[k, j] = a[p, j]
                    a[p, j] = t
                d = -d
            piv = a[k, k]
            d *= piv
            inv = 1.0 / piv
            for i in range(k + 1, n):
                f = a[i, k] * inv
                if f != 0.0:
                    for j in range(k + 1, n):
                        a[i, j] -= f * a[k, j]
        y[b] = d


@njit(cache=True, error_model='numpy')
def nll(x, t, w, has_w, ignore, has_ignore, red, loss):
    """NegativeLogLikelihoodLoss of x (N, C, D) (log-probabilities) at targets t (N, D) (int32
    or int64), class weights w (C,) when has_w; red 0: loss (N, D), 1 sum / 2 mean: loss (1,)."""
    n_n, c_n, d_n = x.shape
    total = 0.0
    wsum = 0.0
    for n in range(n_n):
        for d in range(d_n):
            c = t[n, d]
            if has_ignore and c == ignore:
                if red == 0:
                    loss[n, d] = 0.0
                continue
            if c < 0 or c >= c_n:
                raise IndexError("NegativeLogLikelihoodLoss: target out of [0, C)")
            wc = w[c] if has_w else 1.0
            v = -x[n, c, d] * wc
            if red == 0:
                loss[n, d] = v
            else:
                total += v
                wsum += wc
    if red == 1:
        loss[0, 0] = total
    elif red == 2:
        loss[0, 0] = total / wsum


@njit(cache=True, error_model='numpy')
def _log_softmax_rows(x, lp, n0, n1):
    """lp[n] (C, D) = log_softmax of x[n] over axis 0, for n in [n0, n1)."""
    _, c_n, d_n = x.shape
    mx = np.empty(d_n, np.float64)
    sm = np.empty(d_n, np.float64)
    for n in range(n0, n1):
        for d in range(d_n):
            mx[d] = -np.inf
            sm[d] = 0.0
        for c in range(c_n):
            for d in range(d_n):
                v = x[n, c, d]
                if v > mx[d]:
                    mx[d] = v
        for c in range(c_n):
            for d in range(d_n):
                sm[d] += math.exp(x[n, c, d] - mx[d])
        for d in range(d_n):
            sm[d] = mx[d] + math.log(sm[d])
        for c in range(c_n):
            for d in range(d_n):
                lp[n, c, d] = x[n, c, d] - sm[d]


@njit(cache=True, parallel=True, error_model='numpy')
def _log_softmax_par(x, lp, nb):
    n_n = x.shape[0]
    bs = (n_n + nb - 1) // nb
    for b in prange(nb):
        _log_softmax_rows(x, lp, b * bs, min(n_n, (b + 1) * bs))


@njit(cache=True, error_model='numpy')
def log_softmax1(x, lp):
    """lp (N, C, D) = log_softmax of x (N, C, D) over axis 1 (float64 sums)."""
    n_n, c_n, d_n = x.shape
    nth = num_threads()
    if nth > 1 and n_n >= 2 and n_n * c_n * d_n >= _PAR_MIN_WORK:
        _log_softmax_par(x, lp, min(n_n, nth))
    else:
        _log_softmax_rows(x, lp, 0, n_n)


@njit(cache=True, error_model='numpy')
def tensor_scatter(past, upd, idx, has_idx, circular, out):
    """TensorScatter on (B, P, S, I) views: out = past with upd (B, P, s, I) written at sequence
    rows idx[b] + j (mod S when circular). Indices are validated (linear mode: the whole
    update must fit)."""
    b_n, p_n, s_n, i_n = past.shape
    u_n = upd.shape[2]
    of = out.reshape(-1)
    pf = past.reshape(-1)
    for k in range(of.shape[0]):
        of[k] = pf[k]
    for b in range(b_n):
        w0 = idx[b] if has_idx else 0
        if w0 < 0 or (not circular and w0 + u_n > s_n) or (circular and s_n == 0 and u_n > 0):
            raise IndexError("TensorScatter: write index out of the cache")
        for p in range(p_n):
            for j in range(u_n):
                r = w0 + j
                if circular:
                    r = r % s_n
                for i in range(i_n):
                    out[b, p, r, i] = upd[b, p, j, i]


@njit(cache=True, error_model='numpy')
def _bilinear(xp, h, w, y, x):
    """Bilinear sample of plane xp (H, W) at (y, x), zero outside (as onnxruntime)."""
    if y <= -1.0 or y >= h or x <= -1.0 or x >= w:
        return 0.0
    y0 = math.floor(y)
    x0 = math.floor(x)
    ly = y - y0
    lx = x - x0
    iy = int(y0)
    ix = int(x0)
    v = 0.0
    if iy >= 0 and ix >= 0:
        v += (1.0 - ly) * (1.0 - lx) * xp[iy, ix]
    if iy >= 0 and ix + 1 < w:
        v += (1.0 - ly) * lx * xp[iy, ix + 1]
    if iy + 1 < h and ix >= 0:
        v += ly * (1.0 - lx) * xp[iy + 1, ix]
    if iy + 1 < h and ix + 1 < w:
        v += ly * lx * xp[iy + 1, ix + 1]
    return v


@njit(cache=True, error_model='numpy')
def _deform_col(x, off, msk, has_mask, n, col, kh, kw, sh, sw, ph, pw, dh, dw, og):
    """col (C*kh*kw, OH*OW) = deformed im2col of image n of x (N, C, H, W)."""
    _, c_n, h, w = x.shape
    oh, ow = off.shape[2], off.shape[3]
    cpg = c_n // og
    for c in range(c_n):
        g = c // cpg
        xp = x[n, c]
        for i in range(kh):
            for j in range(kw):
                k = i * kw + j
                row = (c * kh + i) * kw + j
                ob = (g * kh * kw + k) * 2
                for oy in range(oh):
                    for ox in range(ow):
                        yy = oy * sh - ph + i * dh + off[n, ob, oy, ox]
                        xx = ox * sw - pw + j * dw + off[n, ob + 1, oy, ox]
                        v = _bilinear(xp, h, w, yy, xx)
                        if has_mask:
                            v *= msk[n, g * kh * kw + k, oy, ox]
                        col[row, oy * ow + ox] = v


@njit(cache=True, error_model='numpy')
def _deform_image(x, wt, off, msk, has_mask, bias, has_bias, y, col, n, kh, kw, sh, sw, ph, pw,
                  dh, dw, og, grp):
    _deform_col(x, off, msk, has_mask, n, col, kh, kw, sh, sw, ph, pw, dh, dw, og)
    oc = wt.shape[0]
    ocg = oc // grp
    kd = wt.shape[1] * kh * kw
    ohw = y.shape[2] * y.shape[3]
    yf = y.reshape(y.shape[0], oc, ohw)
    if kd > 0 and ohw > 0 and ocg > 0:
        for g in range(grp):
            xgemm(0, 0, ocg, ohw, kd, 1.0, wt, g * ocg * kd, kd, col, g * kd * ohw, ohw, 0.0,
                  yf, (n * oc + g * ocg) * ohw, ohw)
    elif ohw > 0:
        for o in range(oc):
            for s in range(ohw):
                yf[n, o, s] = 0.0
    if has_bias:
        for o in range(oc):
            bo = bias[o]
            for s in range(ohw):
                yf[n, o, s] += bo


@njit(cache=True, parallel=True, error_model='numpy')
def _deform_par(x, wt, off, msk, has_mask, bias, has_bias, y, col, kh, kw, sh, sw, ph, pw,
                dh, dw, og, grp):
    n_n = x.shape[0]
    per = col.shape[0] // n_n
    for n in prange(n_n):
        c2 = col[n * per:(n + 1) * per].reshape(x.shape[1] * kh * kw, y.shape[2] * y.shape[3])
        _deform_image(x, wt, off, msk, has_mask, bias, has_bias, y, c2, n, kh, kw, sh, sw, ph,
                      pw, dh, dw, og, grp)


@njit(cache=True, error_model='numpy')
def deform_conv2d(x, wt, off, msk, has_mask, bias, has_bias, y, col, kh, kw, sh, sw, ph, pw,
                  dh, dw, og, grp, par):
    """DeformConv (2-D) of x (N, C, H, W) with weights wt (OC, C/grp * kh * kw) and offsets off
    (N, og*2*kh*kw, OH, OW) (dy, dx pairs), mask (N, og*kh*kw, OH, OW) when has_mask, bias (OC,)
    when has_bias, into y (N, OC, OH, OW). col: scratch of C*kh*kw*OH*OW elements per image
    (N of them when par)."""
    n_n = x.shape[0]
    if par:
        _deform_par(x, wt, off, msk, has_mask, bias, has_bias, y, col, kh, kw, sh, sw, ph, pw,
                    dh, dw, og, grp)
        return
    ck = x.shape[1] * kh * kw
    c2 = col[:ck * y.shape[2] * y.shape[3]].reshape(ck, y.shape[2] * y.shape[3])
    for n in range(n_n):
        _deform_image(x, wt, off, msk, has_mask, bias, has_bias, y, c2, n, kh, kw, sh, sw, ph,
                      pw, dh, dw, og, grp)
