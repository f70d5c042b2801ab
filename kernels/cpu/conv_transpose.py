"""CPU kernels: ConvTranspose (1-D, 2-D, 3-D; groups, strides, dilations, pads, output_padding).
Imports nothing from jitort.

Layouts (C-contiguous, float32 or float64, one dtype per call); 1-D and 2-D transposed
convolutions are passed as 3-D ones with leading spatial sizes of 1:
    x   (N, C, D, H, W)
    w   (C, M // group, KD, KH, KW)      (ONNX's layout, used as is)
    b   (M,)                             used only when has_bias
    out (N, M, OD, OH, OW)               preallocated, any size (positions no tap reaches
                                         hold the bias)
    col 1-D scratch, >= convt_scratch_elems(...) elements
Input position i of a spatial axis feeds output i * stride - pad_begin + k * dilation for
each tap k; outputs outside [0, O) are dropped (the end pads / output_padding are implied
by the output's size).

Method (the shape of the work decides nothing but block sizes): per (image, group, block of
output channels) task, the group's output block is filled with the bias, then for each block
of input rows one BLAS gemm  col (Mb*K, rows*W) = W_g[:, block]^T (Mb*K, Cg) @ X_g (Cg, rows*W)
-- the weights are read transposed in place -- and a scatter-add (col2im) of col into the
output. A task owns its output channels, so tasks run on ``prange`` workers without
conflicts; channels are split into as many blocks as keep the workers busy when images x
groups are fewer than the threads. Depthwise-like groups (one input channel per group) skip
the gemm: the scatter multiplies the input row by each tap's weight directly.
"""
import numpy as np
from numba import njit, prange

from .gemm import (_ceil_div, eptr, num_threads, pull_tasks, scratch_workers, task_split,
                   valid_range, xgemm)

_FM = {'reassoc', 'contract', 'arcp'}

# im2col-style column block per worker (elements; 512 KB of float32 stays in L2), but at
# least one input row of every tap of the task's channels.
_COL_BLOCK_ELEMS = 1 << 17
# 2 * multiply-adds above which tasks are spread over prange workers (below it a parallel
# region costs more than it saves; assumes jitort's pool, kernels/cpu/workers.py)
_PAR_MIN_FLOPS = 1 << 19


def convt_scratch_elems(cg, mg, k, rows, w, threads=None):
    """Elements of ``col`` scratch convt3d needs (plain Python, >= 1): one block per worker
    (``threads`` workers at most, default NUMBA_NUM_THREADS), each at least one input row of
    all taps of a group's output channels (``mg * k * w``), else at most _COL_BLOCK_ELEMS or
    the whole (mg * k, rows * w) matrix."""
    nt = scratch_workers(threads)
    if cg <= 1:
        return 1
    per_row = max(1, mg * k * w)
    cap = max(per_row, min(_COL_BLOCK_ELEMS, per_row * max(1, rows)))
    return cap * nt


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _tap(o, oo, src, so, lo, hi, sw, direct, wv):
    """o[oo + i * sw] += src[so + i] (times ``wv`` when ``direct``) for i in [lo, hi); ``oo``
    is the output offset of input index 0 (may be negative: lo >= the first valid i)."""
    nv = hi - lo
    if nv <= 0:
        return
    s = eptr(src, so + lo)
    d = eptr(o, oo + lo * sw)
    if direct:
        if sw == 1:
            for j in range(nv):
                d[j] += wv * s[j]
        else:
            for j in range(nv):
                d[sw * j] += wv * s[j]
    else:
        if sw == 1:
            for j in range(nv):
                d[j] += s[j]
        else:
            for j in range(nv):
                d[sw * j] += s[j]


@njit(cache=True, error_model='numpy', fastmath=_FM, inline='always')
def _tap_ends(o, oo, src, so, lo, hi, sw, direct, wv):
    """:func:`_tap` for the one or two columns at a row's ends that only one tap of a pair
    reaches: a scalar loop inlined into :func:`_scatter` (four calls of _tap a row, mostly
    over empty or one-element ranges, would be most of a depthwise 4x4 stride-2
    ConvTranspose's time)."""
    s = eptr(src, so)   # (flat offsets into arrays of any rank)
    d = eptr(o, oo)
    for i in range(lo, hi):
        v = s[i]
        d[i * sw] += wv * v if direct else v


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _scatter(src, soff, tld, direct, w, woff, out, ooff, r0, r1, hn, wn, od_n, oh_n, ow_n,
             kd, kh, kw_n, sd, sh, sw, pd, ph, pw, dd, dh, dw):
    """Output plane (at ``ooff``) += taps (kd, kh, *) of input rows [r0, r1) of the
    flattened (D, H) axis: row r of tap kw at src[soff + kw * tld + (r - r0) * wn] (tld = 0:
    the same input row, scaled by w[woff + kw] when ``direct``). Tap by tap (a tap's column
    range is the same on every row), then row by row. With stride 2 and an odd dilation,
    taps kw and kw + 1 land on alternate columns of the same output positions: they are
    added in one interleaved pass (LLVM vectorizes the pair of stride-2 stores), the ends
    that only one of them reaches separately, and only where there are such ends: on short
    rows the calls for them cost more than the pair loop even when their ranges are empty.
    Each tap's column range is worked out once, not again on every row."""
    z = out.dtype.type(0)
    kw = 0
    while kw < kw_n:
        ea = kw * dw - pw
        loa, hia = valid_range(ea, sw, ow_n, wn)
        wa = w[woff + kw] if direct else z
        pair = sw == 2 and dw % 2 == 1 and kw + 1 < kw_n
        eb = ea + dw
        lob, hib = valid_range(eb, sw, ow_n, wn)
        wb = w[woff + kw + 1] if direct and pair else z
        delta = (1 - dw) // 2          # tap kw+1's input index for A's index q: q + delta
        q0 = max(loa, lob - delta)
        q1 = min(hia, hib - delta)
        n = q1 - q0 if pair else 0
        # columns only one tap of the pair reaches
        edges = min(hia, q0) > loa or hia > max(loa, q1) or min(hib, q0 + delta) > lob \
            or hib > max(lob, q1 + delta)
        i_d = r0 // hn
        i_h = r0 - i_d * hn
        for r in range(r0, r1):
            o_d = i_d * sd - pd + kd * dd
            o_h = i_h * sh - ph + kh * dh
            i_h += 1
            if i_h == hn:
                i_h = 0
                i_d += 1
            if o_d < 0 or o_d >= od_n or o_h < 0 or o_h >= oh_n:
                continue
            orow = ooff + (o_d * oh_n + o_h) * ow_n
            so = soff + (r - r0) * wn
            if n <= 0:
                _tap(out, orow + ea, src, so + kw * tld, loa, hia, sw, direct, wa)
                if pair:
                    _tap(out, orow + eb, src, so + (kw + 1) * tld, lob, hib, sw, direct, wb)
                continue
            a = eptr(src, so + kw * tld + q0)
            b = eptr(src, so + (kw + 1) * tld + q0 + delta)
            d = eptr(out, orow + ea + 2 * q0)
            if direct:
                for t in range(n):
                    d[2 * t] += wa * a[t]
                    d[2 * t + 1] += wb * b[t]
            else:
                for t in range(n):
                    d[2 * t] += a[t]
                    d[2 * t + 1] += b[t]
            if edges:
                _tap_ends(out, orow + ea, src, so + kw * tld, loa, min(hia, q0), sw, direct, wa)
                _tap_ends(out, orow + ea, src, so + kw * tld, max(loa, q1), hia, sw, direct, wa)
                _tap_ends(out, orow + eb, src, so + (kw + 1) * tld, lob, min(hib, q0 + delta),
                          sw, direct, wb)
                _tap_ends(out, orow + eb, src, so + (kw + 1) * tld, max(lob, q1 + delta), hib,
                          sw, direct, wb)
        kw += 2 if pair else 1


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _task(t, nmb, mbs, x, w, b, out, colw, sd, sh, sw, pd, ph, pw, dd, dh, dw, group,
          has_bias):
    """Task t = (n * group + g) * nmb + blk: output channels [blk * mbs, ...) of group g of
    image n (bias fill, then per block of input rows a gemm and the scatter-add)."""
    n_n, c_n, d_n, hn, wn = x.shape
    mg, kd_n, kh_n, kw_n = w.shape[1], w.shape[2], w.shape[3], w.shape[4]
    m_n = out.shape[1]
    od_n, oh_n, ow_n = out.shape[2], out.shape[3], out.shape[4]
    cg = c_n // group
    kk = kd_n * kh_n * kw_n
    rows = d_n * hn
    s_in = rows * wn
    s_out = od_n * oh_n * ow_n
    n, g, blk = task_split(t, nmb, group)
    m0 = blk * mbs
    m1 = min(mg, m0 + mbs)
    if m1 <= m0:
        return
    mb = m1 - m0
    z = out.dtype.type(0)
    for mi in range(m0, m1):
        m = g * mg + mi
        bv = b[m] if has_bias else z
        o = eptr(out, (n * m_n + m) * s_out)
        for j in range(s_out):
            o[j] = bv
    if cg == 0 or s_in == 0:
        return
    xoff = (n * c_n + g * cg) * s_in
    w1 = w.reshape(-1)
    if cg == 1:
        # one input channel per group: col would be an outer product; scale the input rows
        for mi in range(m0, m1):
            ooff = (n * m_n + g * mg + mi) * s_out
            for kd in range(kd_n):
                for kh in range(kh_n):
                    _scatter(x, xoff, 0, True, w1, ((g * mg + mi) * kd_n + kd) * kh_n * kw_n
                             + kh * kw_n, out, ooff, 0, rows, hn, wn, od_n, oh_n, ow_n, kd, kh,
                             kw_n, sd, sh, sw, pd, ph, pw, dd, dh, dw)
        return
    per_row = mb * kk * wn
    nr = max(1, min(rows, colw.shape[0] // per_row))
    for r0 in range(0, rows, nr):
        r1 = min(rows, r0 + nr)
        ncol = (r1 - r0) * wn
        st = xgemm(1, 0, mb * kk, ncol, cg, 1.0, w, g * cg * mg * kk + m0 * kk, mg * kk,
                   x, xoff + r0 * wn, s_in, 0.0, colw, 0, ncol)
        if st != 0:
            raise RuntimeError("BLAS gemm failed")
        for mi in range(mb):
            ooff = (n * m_n + g * mg + m0 + mi) * s_out
            q = mi * kk
            for kd in range(kd_n):
                for kh in range(kh_n):
                    _scatter(colw, q * ncol, ncol, False, w1, 0, out, ooff, r0, r1, hn, wn,
                             od_n, oh_n, ow_n, kd, kh, kw_n, sd, sh, sw, pd, ph, pw, dd, dh, dw)
                    q += kw_n


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _par(nw, ntask, nmb, mbs, x, w, b, out, col, cap, sd, sh, sw, pd, ph, pw, dd, dh, dw,
         group, has_bias):
    """nw workers, each with scratch col[wk*cap:(wk+1)*cap], pull tasks from a counter."""
    counter = np.zeros(1, np.int64)
    for wk in prange(nw):
        pull_tasks(counter, ntask, _task, (nmb, mbs, x, w, b, out, col[wk * cap:(wk + 1) * cap],
                                           sd, sh, sw, pd, ph, pw, dd, dh, dw, group, has_bias))


@njit(cache=True, error_model='numpy', fastmath=_FM)
def convt3d(x, w, b, out, col, sd, sh, sw, pd, ph, pw, dd, dh, dw, group, has_bias):
    """ONNX ConvTranspose on 5-D arrays (see the module docstring); strides and dilations
    >= 1, begin pads may be any integer (negative ones crop nothing: outputs before the
    first reachable position keep the bias)."""
    n_n, c_n = x.shape[0], x.shape[1]
    mg = w.shape[1]
    kk = w.shape[2] * w.shape[3] * w.shape[4]
    sd, sh, sw = np.int64(sd), np.int64(sh), np.int64(sw)
    pd, ph, pw = np.int64(pd), np.int64(ph), np.int64(pw)
    dd, dh, dw = np.int64(dd), np.int64(dh), np.int64(dw)
    group = np.int64(group)
    has_bias = bool(has_bias)
    if n_n == 0 or out.shape[1] == 0 or out.size == 0:
        return
    cg = c_n // group
    s_in = x.shape[2] * x.shape[3] * x.shape[4]
    nth = num_threads()
    n_img = n_n * group
    par = nth > 1 and 2 * n_n * out.shape[1] * cg * kk * s_in >= _PAR_MIN_FLOPS
    nmb = 1
    if par and n_img < nth:
        nmb = min(mg, _ceil_div(nth, n_img))
    mbs = _ceil_div(mg, nmb)
    nmb = _ceil_div(mg, mbs)
    ntask = n_img * nmb
    if cg > 1:
        per_row = mbs * kk * x.shape[4]
        if col.shape[0] < per_row:
            raise ValueError("convt3d: col scratch smaller than one input row")
        nw = min(nth, ntask, col.shape[0] // per_row) if par else 1
        cap = col.shape[0] // max(1, nw)
    else:
        nw = min(nth, ntask) if par else 1
        cap = 0
    if nw > 1:
        _par(nw, ntask, nmb, mbs, x, w, b, out, col, cap, sd, sh, sw, pd, ph, pw, dd, dh, dw,
             group, has_bias)
    else:
        colw = col[:max(cap, 1)]
        for t in range(ntask):
            _task(t, nmb, mbs, x, w, b, out, colw, sd, sh, sw, pd, ph, pw, dd, dh, dw, group,
                  has_bias)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def col2im3d(x, out, ld, lh, lw, sd, sh, sw, pd, ph, pw, dd, dh, dw):
    """ONNX Col2Im: x (N, C, KD, KH, KW, L) with L = ld * lh * lw block positions, out
    (N, C, D, H, W) zeroed then accumulated (the col2im scatter-add of ConvTranspose);
    begin pads ``p*`` (end pads are implied by the grid size ``l*``)."""
    n_n, c_n, kd_n, kh_n, kw_n, l_n = x.shape
    d_n, h_n, w_n = out.shape[2], out.shape[3], out.shape[4]
    o = out.reshape(-1)
    for i in range(o.shape[0]):
        o[i] = 0
    if l_n != ld * lh * lw:
        raise ValueError("Col2Im: the block grid does not match the input's last dimension")
    rows = ld * lh
    for n in range(n_n):
        for c in range(c_n):
            ooff = (n * c_n + c) * d_n * h_n * w_n
            for kd in range(kd_n):
                for kh in range(kh_n):
                    for kw in range(kw_n):
                        offw = kw * dw - pw
                        lo, hi = valid_range(offw, sw, w_n, lw)
                        if hi <= lo:
                            continue
                        src = x[n, c, kd, kh, kw]
                        for r in range(rows):
                            i_d = r // lh
                            i_h = r - i_d * lh
                            o_d = i_d * sd - pd + kd * dd
                            o_h = i_h * sh - ph + kh * dh
                            if o_d < 0 or o_d >= d_n or o_h < 0 or o_h >= h_n:
                                continue
                            s = eptr(src, r * lw + lo)
                            dst = eptr(out, ooff + (o_d * h_n + o_h) * w_n + lo * sw + offw)
                            for j in range(hi - lo):
                                dst[sw * j] += s[j]
