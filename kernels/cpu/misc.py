"""Kernels of the remaining numeric ops: Det, NegativeLogLikelihoodLoss,
SoftmaxCrossEntropyLoss, TensorScatter, DeformConv.

Arrays are C-contiguous, float32 or float64 (one dtype per call) unless said otherwise.
Accumulations (determinants, loss sums) run in float64.
"""
import math

import numpy as np
from numba import njit, prange

from .gemm import eptr, num_threads, xgemm
from .mathfn import fexpneg, fsigmoid

#: work from which these kernels split over the threads (4x below its value under Numba's
#: TBB layer, as a region's cost fell: kernels/cpu/workers.py)
_PAR_MIN_WORK = 1 << 14
_FM = {'reassoc', 'contract', 'arcp'}


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
def nll(x, t, w, has_w, ignore, has_ignore, red, lse, has_lse, loss):
    """NegativeLogLikelihoodLoss of x (N, C, D) (log-probabilities; x - lse (N, D) when
    has_lse: SoftmaxCrossEntropyLoss) at targets t (N, D) (int32 or int64), class weights w (C,)
    when has_w; red 0: loss (N, D), 1 sum / 2 mean: loss (1, 1)."""
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
            xv = np.float64(x[n, c, d])
            if has_lse:
                xv -= lse[n, d]
            v = -xv * wc
            if red == 0:
                loss[n, d] = v
            else:
                total += v
                wsum += wc
    if red == 1:
        loss[0, 0] = total
    elif red == 2:
        loss[0, 0] = total / wsum


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _lse_rows(x, lse, n0, n1):
    """lse[n, d] = log(sum_c exp(x[n, c, d])) for n in [n0, n1) (max-shifted)."""
    _, c_n, d_n = x.shape
    if d_n == 1:  # contiguous rows: vectorizable max and polynomial exp
        x2 = x.reshape(x.shape[0], c_n)
        for n in range(n0, n1):
            row = x2[n]
            m = row[0] if c_n > 0 else row.dtype.type(-np.inf)
            for c in range(c_n):
                v = row[c]
                m = v if v > m else m
            acc = row.dtype.type(0.0)
            for c in range(c_n):
                acc += fexpneg(row[c] - m)
            lse[n, 0] = np.float64(m) + math.log(np.float64(acc))
        return
    mx = np.empty(d_n, x.dtype)
    sm = np.empty(d_n, x.dtype)
    for n in range(n0, n1):
        for d in range(d_n):
            mx[d] = -np.inf
            sm[d] = 0.0
        for c in range(c_n):
            for d in range(d_n):
                v = x[n, c, d]
                mx[d] = v if v > mx[d] else mx[d]
        for c in range(c_n):
            for d in range(d_n):
                sm[d] += fexpneg(x[n, c, d] - mx[d])
        for d in range(d_n):
            lse[n, d] = np.float64(mx[d]) + math.log(np.float64(sm[d]))


@njit(cache=True, parallel=True, error_model='numpy')
def _lse_par(x, lse, nb):
    n_n = x.shape[0]
    bs = (n_n + nb - 1) // nb
    for b in prange(nb):
        _lse_rows(x, lse, b * bs, min(n_n, (b + 1) * bs))


@njit(cache=True, error_model='numpy')
def log_sum_exp1(x, lse):
    """lse (N, D) (float64) = log-sum-exp of x (N, C, D) over axis 1."""
    n_n, c_n, d_n = x.shape
    nth = num_threads()
    if nth > 1 and n_n >= 2 and n_n * c_n * d_n >= _PAR_MIN_WORK:
        _lse_par(x, lse, min(n_n, nth))
    else:
        _lse_rows(x, lse, 0, n_n)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def sub_lse(x, lse, lp):
    """lp (N, C, D) = x - lse[:, None, :] (the log-softmax)."""
    n_n, c_n, d_n = x.shape
    for n in range(n_n):
        for c in range(c_n):
            for d in range(d_n):
                lp[n, c, d] = x[n, c, d] - lse[n, d]


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


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _deform_taps(off, msk, has_mask, n, g, h, w, kh, kw, sh, sw, ph, pw, dh, dw, s0, s1, idx,
                 wts):
    """For offset group g of image n and output pixels [s0, s1): each tap's four bilinear
    corners: flat plane indices ``idx`` (kk, s1 - s0, 4) and weights ``wts`` with the mask
    folded in, zero for corners outside the image (as onnxruntime)."""
    ow = off.shape[3]
    kk = kh * kw
    zero = wts.dtype.type(0.0)
    for i in range(kh):
        for j in range(kw):
            k = i * kw + j
            ob = (g * kk + k) * 2
            for s in range(s0, s1):
                oy = s // ow
                ox = s - oy * ow
                t = s - s0
                yy = np.float64(oy * sh - ph + i * dh) + off[n, ob, oy, ox]
                xx = np.float64(ox * sw - pw + j * dw) + off[n, ob + 1, oy, ox]
                m = np.float64(msk[n, g * kk + k, oy, ox]) if has_mask else 1.0
                for q in range(4):
                    idx[k, t, q] = 0
                    wts[k, t, q] = zero
                if yy <= -1.0 or yy >= h or xx <= -1.0 or xx >= w:
                    continue
                y0 = math.floor(yy)
                x0 = math.floor(xx)
                ly = yy - y0
                lx = xx - x0
                iy = int(y0)
                ix = int(x0)
                if iy >= 0 and ix >= 0:
                    idx[k, t, 0] = iy * w + ix
                    wts[k, t, 0] = (1.0 - ly) * (1.0 - lx) * m
                if iy >= 0 and ix + 1 < w:
                    idx[k, t, 1] = iy * w + ix + 1
                    wts[k, t, 1] = (1.0 - ly) * lx * m
                if iy + 1 < h and ix >= 0:
                    idx[k, t, 2] = (iy + 1) * w + ix
                    wts[k, t, 2] = ly * (1.0 - lx) * m
                if iy + 1 < h and ix + 1 < w:
                    idx[k, t, 3] = (iy + 1) * w + ix + 1
                    wts[k, t, 3] = ly * lx * m


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _deform_block(xt, wp, off, msk, has_mask, bias, has_bias, yf, n, s0, s1, h, w, kh, kw,
                  sh, sw, ph, pw, dh, dw, og, grp):
    """Output pixels [s0, s1) of image n: per offset group the tap corners, then the sampled
    columns colT (pixels, grp, kk, C/grp) as weighted sums of four channel rows of the
    channels-last image xt[n] (HW, C); per conv group Y = W' @ colT^T (BLAS, B transposed)
    with W' (OC, kk, C/grp) the weights taps-outermost; bias added on the block."""
    c_n = xt.shape[2]
    oc = wp.shape[0]
    ocg = oc // grp
    cg = c_n // grp
    cpo = c_n // og
    kk = kh * kw
    kd = kk * cg
    ohw = yf.shape[2]
    bs = s1 - s0
    colt = np.empty((bs, grp, kk, cg), xt.dtype)
    idx = np.empty((kk, bs, 4), np.int64)
    wts = np.empty((kk, bs, 4), xt.dtype)
    hw = xt.shape[1]
    for g in range(og):
        _deform_taps(off, msk, has_mask, n, g, h, w, kh, kw, sh, sw, ph, pw, dh, dw, s0, s1,
                     idx, wts)
        c0 = g * cpo
        c1 = c0 + cpo
        while c0 < c1:  # channel runs inside one conv group
            gg = c0 // cg
            e = min(c1, (gg + 1) * cg)
            a = c0 - gg * cg
            nch = e - c0
            # channels [c0, e) of the four corner pixels, by raw pointers: offsets built from
            # the arguments kept Numba's negative-index wraparound in the loop (gathers)
            xo = n * hw * c_n + c0
            for t in range(bs):
                for k in range(kk):
                    r0 = eptr(xt, xo + idx[k, t, 0] * c_n)
                    r1 = eptr(xt, xo + idx[k, t, 1] * c_n)
                    r2 = eptr(xt, xo + idx[k, t, 2] * c_n)
                    r3 = eptr(xt, xo + idx[k, t, 3] * c_n)
                    w0, w1, w2, w3 = wts[k, t, 0], wts[k, t, 1], wts[k, t, 2], wts[k, t, 3]
                    dst = eptr(colt, ((t * grp + gg) * kk + k) * cg + a)
                    for cl in range(nch):
                        dst[cl] = w0 * r0[cl] + w1 * r1[cl] + w2 * r2[cl] + w3 * r3[cl]
            c0 = e
    if kd > 0 and ocg > 0:
        for g in range(grp):
            xgemm(0, 1, ocg, bs, kd, 1.0, wp, g * ocg * kd, kd, colt, g * kd, grp * kd, 0.0,
                  yf, (n * oc + g * ocg) * ohw + s0, ohw)
    else:
        for o in range(oc):
            yr = yf[n, o, s0:s1]
            for s in range(bs):
                yr[s] = 0.0
    if has_bias:
        for o in range(oc):
            bo = bias[o]
            yr = yf[n, o, s0:s1]
            for s in range(bs):
                yr[s] += bo


@njit(cache=True, parallel=True, error_model='numpy')
def _deform_par(xt, wp, off, msk, has_mask, bias, has_bias, yf, nblk, bsz, h, w, kh, kw, sh,
                sw, ph, pw, dh, dw, og, grp):
    ohw = yf.shape[2]
    for task in prange(yf.shape[0] * nblk):
        n = task // nblk
        s0 = (task - n * nblk) * bsz
        _deform_block(xt, wp, off, msk, has_mask, bias, has_bias, yf, n, s0, min(ohw, s0 + bsz),
                      h, w, kh, kw, sh, sw, ph, pw, dh, dw, og, grp)


_DEFORM_BLOCK = 256


@njit(cache=True, error_model='numpy')
def deform_conv2d(x, wt, off, msk, has_mask, bias, has_bias, y, kh, kw, sh, sw, ph, pw,
                  dh, dw, og, grp):
    """DeformConv (2-D) of x (N, C, H, W) with weights wt (OC, C/grp, kh, kw) and offsets off
    (N, og*2*kh*kw, OH, OW) (dy, dx pairs), mask (N, og*kh*kw, OH, OW) when has_mask, bias (OC,)
    when has_bias, into y (N, OC, OH, OW). Tasks of 256 output pixels (one image each) run in
    parallel when there is enough work."""
    n_n, c_n, h, w = x.shape
    oc = wt.shape[0]
    ohw = y.shape[2] * y.shape[3]
    if n_n == 0 or oc == 0 or ohw == 0:
        return
    yf = y.reshape(n_n, oc, ohw)
    xt = np.empty((n_n, h * w, c_n), x.dtype)
    for n in range(n_n):
        for c in range(c_n):
            for i in range(h):
                for j in range(w):
                    xt[n, i * w + j, c] = x[n, c, i, j]
    cg = wt.shape[1]
    kk = kh * kw
    wp = np.empty((oc, kk, cg), x.dtype)
    for o in range(oc):
        for c in range(cg):
            for i in range(kh):
                for j in range(kw):
                    wp[o, i * kw + j, c] = wt[o, c, i, j]
    bsz = _DEFORM_BLOCK
    nblk = (ohw + bsz - 1) // bsz
    nth = num_threads()
    if nth > 1 and n_n * nblk > 1 and n_n * ohw * oc * kk * cg >= _PAR_MIN_WORK:
        _deform_par(xt, wp, off, msk, has_mask, bias, has_bias, yf, nblk, bsz, h, w, kh, kw, sh,
                    sw, ph, pw, dh, dw, og, grp)
    else:
        for n in range(n_n):
            for b in range(nblk):
                _deform_block(xt, wp, off, msk, has_mask, bias, has_bias, yf, n, b * bsz,
                              min(ohw, (b + 1) * bsz), h, w, kh, kw, sh, sw, ph, pw, dh, dw, og,
                              grp)


# --- CausalConvWithState (opset 27) ----------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath=_FM)
def _causal_rows(x, w, bias, has_b, past, has_past, act, y, st, r0, r1):
    """Rows [r0, r1) of (batch * channel): one tap at a time over the whole row (vectorized
    loops), then the activation over the row."""
    _, c_n, l_n = x.shape
    k = w.shape[2]
    km = k - 1
    pad = np.empty(km + l_n, x.dtype)
    acc = np.empty(l_n, x.dtype)
    zero = x.dtype.type(0.0)
    padx = pad[km:]  # x's part, indexed from 0 (pad[km + t] kept the wraparound: scatters)
    for r in range(r0, r1):
        b = r // c_n
        c = r - b * c_n
        for j in range(km):
            pad[j] = past[b, c, j] if has_past else zero
        xr = x[b, c]
        for t in range(l_n):
            padx[t] = xr[t]
        bb = bias[c] if has_b else zero
        for t in range(l_n):
            acc[t] = bb
        for j in range(k):
            wj = w[c, 0, j]
            for t in range(l_n):
                acc[t] += wj * pad[t + j]
        yr = y[b, c]
        if act:
            for t in range(l_n):
                a = acc[t]
                yr[t] = a * fsigmoid(a)
        else:
            for t in range(l_n):
                yr[t] = acc[t]
        for j in range(km):
            st[b, c, j] = pad[l_n + j]


@njit(cache=True, parallel=True, error_model='numpy')
def _causal_par(x, w, bias, has_b, past, has_past, act, y, st, nb):
    rows = x.shape[0] * x.shape[1]
    bs = (rows + nb - 1) // nb
    for i in prange(nb):
        _causal_rows(x, w, bias, has_b, past, has_past, act, y, st, i * bs,
                     min(rows, (i + 1) * bs))


@njit(cache=True, error_model='numpy')
def causal_conv(x, w, bias, has_b, past, has_past, act, y, st):
    """CausalConvWithState: y (B, C, L) = depthwise causal conv of [past | x] with w (C, 1, k)
    (+ bias (C,) when has_b; past (B, C, k-1) when has_past, else zeros), SiLU when act;
    st (B, C, k-1) = the last k-1 positions of [past | x]."""
    rows = x.shape[0] * x.shape[1]
    nth = num_threads()
    if nth > 1 and rows >= 2 and rows * (x.shape[2] + w.shape[2]) * w.shape[2] >= _PAR_MIN_WORK:
        _causal_par(x, w, bias, has_b, past, has_past, act, y, st, min(rows, nth))
    else:
        _causal_rows(x, w, bias, has_b, past, has_past, act, y, st, 0, rows)


# --- LinearAttention (opset 27) --------------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath=_FM)
def _lin_attn_head(q, k, v, past, has_past, dec, has_dec, bet, has_bet, scale, out, st, b, h):
    """The recurrence of kv head h of batch b over all steps (state st[b, h] (dk, dv)); query
    heads h*grp .. (h+1)*grp - 1 read it."""
    t_n, hq, dk = q.shape[1], q.shape[2], q.shape[3]
    hkv, dv = k.shape[2], v.shape[3]
    grp = hq // hkv
    s = st[b, h]
    for d in range(dk):
        for m in range(dv):
            s[d, m] = past[b, h, d, m] if has_past else 0.0
    vt = np.empty(dv, st.dtype)
    o = np.empty(dv, st.dtype)
    dg = dec.shape[3]
    nbh = bet.shape[2]
    for t in range(t_n):
        if has_dec:
            for d in range(dk):
                gd = math.exp(dec[b, t, h, d if dg > 1 else 0])
                for m in range(dv):
                    s[d, m] *= gd
        if has_bet:
            for m in range(dv):
                vt[m] = 0.0
            for d in range(dk):
                kd = k[b, t, h, d]
                for m in range(dv):
                    vt[m] += s[d, m] * kd
            be = bet[b, t, h if nbh > 1 else 0]
            for m in range(dv):
                vt[m] = be * (v[b, t, h, m] - vt[m])
        else:
            for m in range(dv):
                vt[m] = v[b, t, h, m]
        for d in range(dk):
            kd = k[b, t, h, d]
            for m in range(dv):
                s[d, m] += kd * vt[m]
        for qh in range(h * grp, (h + 1) * grp):
            for m in range(dv):
                o[m] = 0.0
            for d in range(dk):
                qd = q[b, t, qh, d]
                for m in range(dv):
                    o[m] += qd * s[d, m]
            for m in range(dv):
                out[b, t, qh, m] = scale * o[m]


@njit(cache=True, parallel=True, error_model='numpy')
def _lin_attn_par(q, k, v, past, has_past, dec, has_dec, bet, has_bet, scale, out, st):
    hkv = k.shape[2]
    for i in prange(q.shape[0] * hkv):
        _lin_attn_head(q, k, v, past, has_past, dec, has_dec, bet, has_bet, scale, out, st,
                       i // hkv, i % hkv)


@njit(cache=True, error_model='numpy')
def linear_attention(q, k, v, past, has_past, dec, has_dec, bet, has_bet, scale, out, st):
    """LinearAttention: q (B, T, Hq, dk), k (B, T, Hkv, dk), v (B, T, Hkv, dv); state st
    (B, Hkv, dk, dv) (from past when has_past, else zeros) decayed by exp(dec (B, T, Hkv, 1|dk))
    when has_dec, delta-corrected with bet (B, T, Hkv|1) when has_bet; out (B, T, Hq, dv) =
    scale * q . state (scale 0: 1/sqrt(dk))."""
    b_n, t_n, hq, dk = q.shape
    hkv, dv = k.shape[2], v.shape[3]
    if scale == 0.0:
        scale = 1.0 / math.sqrt(dk)
    nth = num_threads()
    if nth > 1 and b_n * hkv >= 2 and b_n * t_n * hq * dk * dv * 3 >= _PAR_MIN_WORK:
        _lin_attn_par(q, k, v, past, has_past, dec, has_dec, bet, has_bet, scale, out, st)
    else:
        for b in range(b_n):
            for h in range(hkv):
                _lin_attn_head(q, k, v, past, has_past, dec, has_dec, bet, has_bet, scale, out,
                               st, b, h)
