"""Pooling kernels (ONNX MaxPool, AveragePool, GlobalAverage/MaxPool, LRN), NCHW.

All arrays C-contiguous float32 or float64 (one dtype per call). 2-D pools take x
(N, C, H, W) and a preallocated out (N, C, OH, OW) sized by the caller (ceil_mode
included); ``ph``/``pw`` are the begin pads. Windows are clipped to the valid input
region, so padding never contributes to a max or a sum.
"""
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from .conv import conv2d
from .gemm import eptr, num_threads
from .qgemm import _ptr, splat, masked_load, masked_store
from .softmax import row_max

#: work from which these kernels split over the threads (4x below its value under Numba's
#: TBB layer, as a region's cost fell: kernels/cpu/workers.py)
_PAR_MIN_WORK = 1 << 14
# Stride-1 pools over planes narrower than this run as one flat loop per tap (_flat_rows).
_FLAT_MAX_OW = 32
# AveragePool on planes of at most this many outputs sums its windows as a depthwise
# convolution across blocks of channels (conv._dw_cblock): on small planes the per-plane
# loops' overhead dominates; on bigger ones (28x28) the per-plane loops stay faster.
_DW_SUM_MAX_S = 256


@njit(inline='always')
def _max3(a, b, c, init):
    """The max of init, a, b, c as the scalar loops take it (``m = v if v > m else m`` in that
    order): with init = -inf, NaN skipped."""
    m = a if a > init else init
    m = b if b > m else m
    return c if c > m else m


# --- three taps at stride 2 along a row ---------------------------------------------------
#: outputs per call of _h3s2_max / _h3s2_avg (one vector of 16 lanes)
_H3 = 16


def _h3s2_intrinsic(mx):
    """The typer of the intrinsic ``f(v, voff, d, doff, iv, ivoff)``: d[doff + j] for j < 16 = the max
    (``mx``) of v[voff + 2j + k], k = 0, 1, 2, in the scalar loops' order (``m = b if b > m
    else m``), or their sum (a + b) + c times iv[ivoff + j]. v, d, iv: arrays of one float
    type; reads v[voff : voff + 34] (the last element unused). The loop vectorizer turns the
    scalar loop's stride-2 loads into gathers; here two
    unit-stride loads per tap pair and shuffles that split even and odd lanes."""
    def typer(typingctx, v, voff, d, doff, iv, ivoff):
        if not (isinstance(v, types.Array) and isinstance(v.dtype, types.Float)
                and isinstance(d, types.Array) and d.dtype == v.dtype
                and isinstance(iv, types.Array) and iv.dtype == v.dtype):
            return None
        sig = types.void(v, voff, d, doff, iv, ivoff)

        def codegen(context, builder, sig, args):
            v_, voff_, d_, doff_, iv_, ivoff_ = args
            lane = context.get_value_type(sig.args[0].dtype)
            i32, i64 = ir.IntType(32), ir.IntType(64)
            vec = ir.VectorType(lane, _H3)
            src = _ptr(context, builder, sig.args[0], v_, voff_, lane)

            def load(k):
                p = builder.bitcast(builder.gep(src, [ir.Constant(i64, k)]), vec.as_pointer())
                return builder.load(p, align=1)

            def pick(a, b, first):
                mask = ir.Constant(ir.VectorType(i32, _H3), [first + 2 * j for j in range(_H3)])
                return builder.shuffle_vector(a, b, mask)
            lo, hi = load(0), load(_H3)
            a, b = pick(lo, hi, 0), pick(lo, hi, 1)
            c = pick(load(2), load(_H3 + 2), 0)
            if mx:
                m = builder.select(builder.fcmp_ordered('>', b, a), b, a)
                r = builder.select(builder.fcmp_ordered('>', c, m), c, m)
            else:
                sc = _ptr(context, builder, sig.args[4], iv_, ivoff_, lane)
                w = builder.load(builder.bitcast(sc, vec.as_pointer()), align=1)
                r = builder.fmul(builder.fadd(builder.fadd(a, b), c), w)
            dst = _ptr(context, builder, sig.args[2], d_, doff_, lane)
            builder.store(r, builder.bitcast(dst, vec.as_pointer()), align=1)
            return context.get_dummy_value()
        return sig, codegen
    return typer


def _max_avg(make, name):
    """The max and the average intrinsic of the typer factory ``make`` (``make(mx)``), named
    ``name_max`` / ``name_avg`` (the names Numba reports them by)."""
    out = []
    for mx, kind in ((True, "max"), (False, "avg")):
        typer = make(mx)
        typer.__name__ = f"{name}_{kind}"
        out.append(intrinsic(typer))
    return out


_h3s2_max, _h3s2_avg = _max_avg(_h3s2_intrinsic, "_h3s2")


#: planes at most this many elements wide (one 64-byte vector a row) take _s2_small's rows
_S2_SMALL_BYTES = 64


def _s2_small_intrinsic(mx):
    """The typer of the intrinsic ``f(x, ra, rb, rc, use_a, use_c, w, d, doff, ow, pw, iv,
    ivoff)``: one
    output row of a 3x3 stride-2 pool of a plane at most one vector wide (w <= 64 bytes of
    elements): V = the elementwise max (``mx``) or sum of the rows at x[ra], x[rb], x[rc]
    (a and c only where use_a / use_c), then d[doff + j] for j < ow = the max of V[2j - pw +
    k], k < 3 (max: NaN skipped, as the scalar loops' ``m = v if v > m else m`` from -inf) or
    their sum times iv[ivoff + j]; columns outside 0..w-1 are padding. Masked loads and
    stores and constant shuffles: on small planes the row-by-row loops' overhead dominates."""
    def typer(typingctx, x, ra, rb, rc, use_a, use_c, w, d, doff, ow, pw, iv, ivoff):
        if not (isinstance(x, types.Array) and isinstance(x.dtype, types.Float)
                and isinstance(d, types.Array) and d.dtype == x.dtype
                and isinstance(iv, types.Array) and iv.dtype == x.dtype):
            return None
        sig = types.void(x, ra, rb, rc, use_a, use_c, w, d, doff, ow, pw, iv, ivoff)

        def codegen(context, builder, sig, args):
            at = sig.args
            lane = context.get_value_type(at[0].dtype)
            n = _S2_SMALL_BYTES * 8 // at[0].dtype.bitwidth
            i32, i64 = ir.IntType(32), ir.IntType(64)
            vec = ir.VectorType(lane, n)
            ld, st = masked_load(builder, vec), masked_store(builder, vec)

            def arg(k, ty=types.int64):
                return context.cast(builder, args[k], at[k], ty)

            def below(v):
                return builder.icmp_signed('<', ir.Constant(ir.VectorType(i32, n),
                                                            list(range(n))),
                                           splat(builder, builder.trunc(v, i32), n))
            fill = ir.Constant(vec, [float('-inf') if mx else 0.0] * n)
            inw = below(arg(6))

            def row(k, use):
                m = inw
                if use is not None:
                    u = builder.icmp_signed('!=', arg(use), ir.Constant(i64, 0))
                    m = builder.and_(m, splat(builder, u, n))
                p = builder.bitcast(_ptr(context, builder, at[0], args[0], args[k], lane),
                                    vec.as_pointer())
                return builder.call(ld, [p, ir.Constant(i32, 1), m, fill])

            def comb(a, b):
                if mx:
                    return builder.select(builder.fcmp_ordered('>', b, a), b, a)
                return builder.fadd(a, b)
            rows = [row(1, 4), row(2, None), row(3, 5)]
            v = fill
            for r in rows:
                v = comb(v, r)
            outm = below(arg(9))
            dst = builder.bitcast(_ptr(context, builder, at[7], args[7], args[8], lane),
                                  vec.as_pointer())
            if not mx:
                sc = builder.bitcast(_ptr(context, builder, at[11], args[11], args[12], lane),
                                     vec.as_pointer())
                wv = builder.call(ld, [sc, ir.Constant(i32, 1), outm, ir.Constant(vec, None)])
            pw0 = builder.icmp_signed('==', arg(10), ir.Constant(i64, 0))
            with builder.if_else(pw0) as (then, otherwise):
                for blk, pad in ((then, 0), (otherwise, 1)):
                    with blk:
                        r = fill
                        for k in range(3):
                            idx = [2 * j - pad + k for j in range(n)]
                            idx = [i if 0 <= i < n else n for i in idx]   # n: fill's lane 0
                            t = builder.shuffle_vector(v, fill, ir.Constant(
                                ir.VectorType(i32, n), idx))
                            r = comb(r, t)
                        if not mx:
                            r = builder.fmul(r, wv)
                        builder.call(st, [r, dst, ir.Constant(i32, 1), outm])
            return context.get_dummy_value()
        return sig, codegen
    return typer


_s2_small_max, _s2_small_avg = _max_avg(_s2_small_intrinsic, "_s2_small")


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'}, inline='always')
def _row3_s2(vb, vo, o1, oo, n, iv, io, is_max):
    """o1[oo + j] (j < n) = max / scaled sum of vb[vo + 2j + k], k < 3, as _h3s2_* (which need
    vb readable up to vo + 2 * n + 2: the callers' row buffers have _H3 + 2 elements of
    slack)."""
    j = np.int64(0)
    while j + _H3 <= n:
        if is_max:
            _h3s2_max(vb, vo + 2 * j, o1, oo + j, iv, io + j)
        else:
            _h3s2_avg(vb, vo + 2 * j, o1, oo + j, iv, io + j)
        j += _H3
    a = eptr(vb, vo)
    d = eptr(o1, oo)
    if is_max:
        for q in range(j, n):
            m = a[2 * q]
            v = a[2 * q + 1]
            m = v if v > m else m
            v = a[2 * q + 2]
            d[q] = v if v > m else m
    else:
        w = eptr(iv, io)
        for q in range(j, n):
            d[q] = (a[2 * q] + a[2 * q + 1] + a[2 * q + 2]) * w[q]


# --- padded planes ----------------------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _pad_plane(xp, scratch, hp, wp, ph, pw, fill):
    """(hp, wp) copy of xp (H, W) shifted by the begin pads, ``fill`` outside, written row by
    row into the 1-D ``scratch`` (>= hp * wp elements; one per worker, not one allocation per
    plane): window loops over it need no boundary tests. Copies go through raw pointers (no
    per-row views)."""
    h, w = xp.shape
    buf = scratch
    f = xp.dtype.type(fill)
    j0 = min(pw, wp)
    j1 = max(j0, min(wp, pw + w))
    for i in range(hp):
        ih = i - ph
        d = eptr(buf, i * wp)
        if ih < 0 or ih >= h:
            for j in range(wp):
                d[j] = f
            continue
        for j in range(j0):
            d[j] = f
        dd = eptr(buf, i * wp + j0)
        ss = eptr(xp, ih * w + j0 - pw)
        for j in range(j1 - j0):
            dd[j] = ss[j]
        for j in range(j1, wp):
            d[j] = f


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _plane_rows(xp, scratch, hp, wp, ph, pw, fill):
    """The plane the windows read, flat, and its row length: xp itself when every window lies
    inside it (no pads), else its padded copy in ``scratch`` (see _pad_plane)."""
    if ph == 0 and pw == 0 and hp <= xp.shape[0] and wp <= xp.shape[1]:
        return xp.reshape(-1), xp.shape[1]
    _pad_plane(xp, scratch, hp, wp, ph, pw, fill)
    return scratch, wp


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _padded_elems(oh_n, ow_n, kh_n, kw_n, sh, sw, dh, dw):
    """Scratch elements of one padded plane (see _pad_plane)."""
    if oh_n <= 0 or ow_n <= 0:
        return 1
    wp = (ow_n - 1) * sw + (kw_n - 1) * dw + 1
    return ((oh_n - 1) * sh + (kh_n - 1) * dh + 1) * wp + oh_n * wp  # + _flat_rows' output


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _flat_rows(buf, ld, scratch, t0, oh_n, ow_n, kh_n, kw_n, dh, dw, is_max):
    """Stride-1 windows of a narrow plane as one flat loop: the window sums (or maxima) at
    every position q < (oh_n - 1) * ld + ow_n of the plane ``buf`` (row length ``ld``) into
    ``scratch[t0:]``; output (oh, ow) is at q = oh * ld + ow. Rows of a 7x7 or 14x14 plane are
    shorter than two vectors, so per-row loops run mostly in scalar remainders; this runs the
    taps over all rows at once (computing ld - ow_n discarded columns per row)."""
    n = (oh_n - 1) * ld + ow_n
    t = eptr(scratch, t0)
    r = eptr(buf, 0)
    if is_max:  # from -inf: a NaN first tap must not stick (NaN is skipped)
        ninf = scratch.dtype.type(-np.inf)
        for q in range(n):
            v = r[q]
            t[q] = v if v > ninf else ninf
    else:
        for q in range(n):
            t[q] = r[q]
    for kh in range(kh_n):
        for kw in range(kw_n):
            if kh == 0 and kw == 0:
                continue
            r = eptr(buf, kh * dh * ld + kw * dw)
            if is_max:
                for q in range(n):
                    v = r[q]
                    t[q] = v if v > t[q] else t[q]
            else:
                for q in range(n):
                    t[q] += r[q]


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _whole_plane(h, w, oh_n, ow_n, kh, kw, ph, pw, dh, dw):
    """One output whose window covers the whole plane, pads only adding cells outside it
    (inception v1's final 7x7 AveragePool over 6x6 with an end pad, resnet's over 7x7): a
    global pool, far cheaper than the windowed kernels."""
    return (oh_n == 1 and ow_n == 1 and dh == 1 and dw == 1 and kh - ph >= h
            and kw - pw >= w)


# --- 3x3 windows, separably over chunks of planes --------------------------------------
# 3x3 max / average pools (dilation 1, strides 1 or 2) whose window centres all lie inside
# the plane: every window is {c-1, c, c+1} x {d-1, d, d+1} clipped to the plane, so the result
# is the full-resolution 3x3 "same" pool F, sampled at the centres. F is separable (rows of
# three, then columns of three), and each pass is one flat, unit-stride loop over a range
# of planes (wrong only in each row's first and last column, or each plane's first and last
# row, which are then redone): no per-plane or per-row loop overhead, which dominated on
# 14x14 and 7x7 planes. The passes go over chunks of planes of about _SEP_CHUNK elements,
# so their scratch stays in L1/L2. Stride 2 in both axes does not compute every position
# (``_s2_range``: columns first, then every other column, one vector of 16 outputs at a time in
# ``_row3_s2``, even and odd lanes split by shuffles where the loop vectorizer would use
# gathers); wide unpadded planes take the same kernel.
_SEP_CHUNK = 1 << 13
_SEP_FM = {'reassoc', 'contract', 'arcp'}


@njit(cache=True, error_model='numpy', fastmath=_SEP_FM)
def _sep3_planes(x1, bx, t1, f1, bf, n, h, w, is_max):
    """f1[bf:bf+n] = 3x3 'same' window max (NaN skipped, -inf when all NaN) or sum of the
    (n // (h*w)) planes at x1[bx:bx+n], clipped at every plane's border; t1[:n] scratch."""
    if n == 0:
        return
    X = eptr(x1, bx)
    T = eptr(t1, 0)
    F = eptr(f1, bf)
    ninf = x1.dtype.type(-np.inf)
    rows = n // w
    # rows of three (T holds no NaN: every max starts from -inf)
    if w == 1:
        for q in range(n):
            v = X[q]
            T[q] = (v if v > ninf else ninf) if is_max else v
    else:
        if is_max:
            for q in range(1, n - 1):
                T[q] = _max3(X[q - 1], X[q], X[q + 1], ninf)
            for r in range(rows):
                q = r * w
                v = X[q]
                m = v if v > ninf else ninf
                v = X[q + 1]
                T[q] = v if v > m else m
                q += w - 1
                v = X[q - 1]
                m = v if v > ninf else ninf
                v = X[q]
                T[q] = v if v > m else m
        else:
            for q in range(1, n - 1):
                T[q] = X[q - 1] + X[q] + X[q + 1]
            for r in range(rows):
                q = r * w
                T[q] = X[q] + X[q + 1]
                q += w - 1
                T[q] = X[q - 1] + X[q]
    # columns of three
    if h == 1:
        for q in range(n):
            F[q] = T[q]
        return
    if is_max:
        for q in range(w, n - w):
            a = T[q - w]
            c = T[q]
            m = a if a > c else c
            a = T[q + w]
            F[q] = a if a > m else m
    else:
        for q in range(w, n - w):
            F[q] = T[q - w] + T[q] + T[q + w]
    hw = h * w
    for p in range(n // hw):
        q0 = p * hw
        q1 = q0 + hw - w
        for j in range(w):
            a = T[q0 + j]
            c = T[q0 + w + j]
            e = T[q1 - w + j]
            g = T[q1 + j]
            if is_max:
                F[q0 + j] = a if a > c else c
                F[q1 + j] = e if e > g else g
            else:
                F[q0 + j] = a + c
                F[q1 + j] = e + g


@njit(cache=True, error_model='numpy', fastmath=_SEP_FM)
def _s2_range(x1, o3, inv, p0, p1, h, w, ph, pw, is_max):
    """Planes [p0, p1) of a 3x3 pool at stride 2 in both axes (the conditions of _sep3_ok),
    columns first: per output row, V = the (up to) three input rows combined elementwise
    (unit stride, vectorized), then output j combines V at columns 2j - pw .. 2j - pw + 2 (V
    is padded by one fill value on each side). No full-resolution pass: a quarter of the
    positions are kept. Averages are multiplied by ``inv``."""
    oh_n, ow_n = o3.shape[1], o3.shape[2]
    vb = np.empty(w + 3 + _H3 + 2, x1.dtype)  # (slack: _row3_s2)
    o1 = o3.reshape(-1)
    s = oh_n * ow_n
    dt = x1.dtype.type
    ninf = dt(-np.inf)
    V = eptr(vb, 0)
    V[0] = ninf if is_max else dt(0)     # column -1
    V[w + 1] = V[0]                      # columns w, w + 1
    V[w + 2] = V[0]
    Vd = eptr(vb, 1)                     # Vd[c]: column c
    if w * x1.itemsize <= _S2_SMALL_BYTES:   # rows of one vector: masked vector code
        for p in range(p0, p1):
            for i in range(oh_n):
                r0 = 2 * i - ph
                b0 = (p * h + r0) * w
                oo = p * s + i * ow_n
                if is_max:
                    _s2_small_max(x1, b0, b0 + w, b0 + 2 * w, r0 >= 0, r0 + 2 < h, w, o1, oo,
                                  ow_n, pw, vb, 0)
                else:
                    _s2_small_avg(x1, b0, b0 + w, b0 + 2 * w, r0 >= 0, r0 + 2 < h, w, o1, oo,
                                  ow_n, pw, inv, i * ow_n)
        return
    for p in range(p0, p1):
        for i in range(oh_n):
            r0 = 2 * i - ph              # the centre row r0 + 1 is inside the plane
            lo = r0 >= 0
            hi = r0 + 2 < h
            ra = eptr(x1, (p * h + (r0 if lo else r0 + 1)) * w)
            rb = eptr(x1, (p * h + r0 + 1) * w)
            rc = eptr(x1, (p * h + (r0 + 2 if hi else r0 + 1)) * w)
            if is_max:                   # (a missing row repeats the centre one)
                for c in range(w):
                    Vd[c] = _max3(ra[c], rb[c], rc[c], ninf)
            elif lo and hi:
                for c in range(w):
                    Vd[c] = ra[c] + rb[c] + rc[c]
            elif lo or hi:
                for c in range(w):
                    Vd[c] = ra[c] + rb[c] if lo else rb[c] + rc[c]
            else:
                for c in range(w):
                    Vd[c] = rb[c]
            # (max: iv unused; one bool argument, not two literal builds)
            _row3_s2(vb, 1 - pw, o1, p * s + i * ow_n, ow_n, vb if is_max else inv,
                     0 if is_max else i * ow_n, is_max)


@njit(cache=True, error_model='numpy', fastmath=_SEP_FM)
def _sep3_range(x1, o3, inv, p0, p1, h, w, sh, sw, ph, pw, is_max, direct):
    """Planes [p0, p1) of a 3x3 pool (see above), in chunks of planes of about _SEP_CHUNK
    elements (the two scratch arrays stay in L1/L2, and are small enough that allocating
    them never maps fresh pages): F straight into the output when ``direct`` (stride 1, pads
    1, same size), else into scratch and then sampled at the window centres. Averages are
    multiplied by ``inv`` (length 0 for max). Stride 2 in both axes goes to _s2_range."""
    if sh == 2 and sw == 2:
        _s2_range(x1, o3, inv, p0, p1, h, w, ph, pw, is_max)
        return
    hw = h * w
    cp = max(1, _SEP_CHUNK // hw)
    t1 = np.empty(cp * hw, x1.dtype)
    f1 = t1 if direct else np.empty(cp * hw, x1.dtype)
    oh_n, ow_n = o3.shape[1], o3.shape[2]
    s = oh_n * ow_n
    avg = not is_max
    o1 = o3.reshape(-1)
    for c0 in range(p0, p1, cp):
        c1 = min(p1, c0 + cp)
        if direct:
            _sep3_planes(x1, c0 * hw, t1, o1, c0 * hw, (c1 - c0) * hw, h, w, is_max)
            if avg:
                iv = eptr(inv, 0)
                for p in range(c0, c1):
                    d = eptr(o1, p * s)
                    for j in range(s):
                        d[j] *= iv[j]
            continue
        _sep3_planes(x1, c0 * hw, t1, f1, np.int64(0), (c1 - c0) * hw, h, w, is_max)
        for p in range(c0, c1):
            for oh in range(oh_n):
                d = eptr(o1, p * s + oh * ow_n)
                src = eptr(f1, (p - c0) * hw + (oh * sh - ph + 1) * w - pw + 1)
                if avg:
                    iv = eptr(inv, oh * ow_n)
                    if sw == 1:
                        for ow in range(ow_n):
                            d[ow] = src[ow] * iv[ow]
                    else:
                        for ow in range(ow_n):
                            d[ow] = src[2 * ow] * iv[ow]
                elif sw == 1:
                    for ow in range(ow_n):
                        d[ow] = src[ow]
                else:
                    for ow in range(ow_n):
                        d[ow] = src[2 * ow]


@njit(cache=True, error_model='numpy', fastmath=_SEP_FM)
def _sep3_ok(h, w, oh_n, ow_n, kh, kw, sh, sw, ph, pw, dh, dw):
    """Whether a pool takes the separable 3x3 path: 3x3, dilation 1, every window centre
    inside the plane, stride 1 or 2 (stride 2 in both axes: ``_s2_range``)."""
    return (kh == 3 and kw == 3 and dh == 1 and dw == 1 and (sh == 1 or sh == 2)
            and (sw == 1 or sw == 2)
            and h > 0 and w > 0 and oh_n > 0 and ow_n > 0
            and ph <= 1 and pw <= 1 and ph >= 0 and pw >= 0
            and (oh_n - 1) * sh - ph + 1 <= h - 1 and (ow_n - 1) * sw - pw + 1 <= w - 1)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_SEP_FM)
def _sep3_par(nw, x1, o3, inv, n_p, h, w, sh, sw, ph, pw, is_max, direct):
    for wk in prange(nw):
        _sep3_range(x1, o3, inv, wk * n_p // nw, (wk + 1) * n_p // nw, h, w, sh, sw, ph, pw,
                    is_max, direct)


@njit(cache=True, error_model='numpy', fastmath=_SEP_FM)
def _sep3_pool(x, out, inv, sh, sw, ph, pw, is_max):
    """The separable 3x3 pool of x (N, C, H, W) into out (see _sep3_ok for when it applies)."""
    n, c, h, w = x.shape
    n_p = n * c
    x1 = x.reshape(-1)
    o3 = out.reshape(n_p, out.shape[2], out.shape[3])
    direct = (sh == 1 and sw == 1 and ph == 1 and pw == 1 and out.shape[2] == h
              and out.shape[3] == w)
    nw = min(num_threads(), n_p)
    if nw > 1 and n_p * h * w * 9 >= _PAR_MIN_WORK:
        _sep3_par(nw, x1, o3, inv, n_p, h, w, sh, sw, ph, pw, is_max, direct)
    else:
        _sep3_range(x1, o3, inv, np.int64(0), n_p, h, w, sh, sw, ph, pw, is_max, direct)


# --- MaxPool ---------------------------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _maxpool_plane(xp, op, scratch, kh_n, kw_n, sh, sw, ph, pw, dh, dw):
    """op (OH, OW) = max over windows of xp (H, W); -inf where a window is empty."""
    oh_n, ow_n = op.shape
    if oh_n == 0 or ow_n == 0:
        return
    hp = (oh_n - 1) * sh + (kh_n - 1) * dh + 1
    wp = (ow_n - 1) * sw + (kw_n - 1) * dw + 1
    buf, ld = _plane_rows(xp, scratch, hp, wp, ph, pw, -np.inf)
    if sh == 1 and sw == 1 and ow_n < _FLAT_MAX_OW:
        t0 = hp * wp
        _flat_rows(buf, ld, scratch, t0, oh_n, ow_n, kh_n, kw_n, dh, dw, True)
        for oh in range(oh_n):
            d = eptr(op, oh * ow_n)
            t = eptr(scratch, t0 + oh * ld)
            for ow in range(ow_n):
                d[ow] = t[ow]
        return
    ninf = op.dtype.type(-np.inf)
    if kh_n == 2 and kw_n == 2 and dh == 1 and dw == 1 and sw == 2:
        # 2x2/2 (vgg, zfnet): the four taps in one pass (the per-tap loops below read and
        # write each output row four times)
        for oh in range(oh_n):
            r0 = eptr(buf, oh * sh * ld)
            r1 = eptr(buf, (oh * sh + 1) * ld)
            d = eptr(op, oh * ow_n)
            for ow in range(ow_n):
                j = 2 * ow
                m = ninf
                a = r0[j]
                m = a if a > m else m
                a = r0[j + 1]
                m = a if a > m else m
                a = r1[j]
                m = a if a > m else m
                a = r1[j + 1]
                d[ow] = a if a > m else m
        return
    if kh_n == 3 and kw_n == 3 and dh == 1 and dw == 1 and (sw == 1 or sw == 2):
        # 3x3: the max of the three rows first (contiguous, vectorized; NaN skipped as in the
        # generic loop), then of each window's three columns of that (in L1)
        vm = eptr(scratch, hp * wp)
        for oh in range(oh_n):
            r0 = eptr(buf, oh * sh * ld)
            r1 = eptr(buf, (oh * sh + 1) * ld)
            r2 = eptr(buf, (oh * sh + 2) * ld)
            for j in range(wp):
                vm[j] = _max3(r0[j], r1[j], r2[j], ninf)
            d = eptr(op, oh * ow_n)
            for ow in range(ow_n):
                a = vm[sw * ow]
                b = vm[sw * ow + 1]
                c = vm[sw * ow + 2]
                m = a if a > b else b
                d[ow] = c if c > m else m
        return
    for oh in range(oh_n):
        d = eptr(op, oh * ow_n)
        for ow in range(ow_n):
            d[ow] = ninf
        for kh in range(kh_n):
            for kw in range(kw_n):
                r = eptr(buf, (oh * sh + kh * dh) * ld + kw * dw)
                if sw == 1:
                    for ow in range(ow_n):
                        v = r[ow]
                        d[ow] = v if v > d[ow] else d[ow]
                elif sw == 2:
                    for ow in range(ow_n):
                        v = r[2 * ow]
                        d[ow] = v if v > d[ow] else d[ow]
                else:
                    for ow in range(ow_n):
                        v = r[ow * sw]
                        d[ow] = v if v > d[ow] else d[ow]


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _maxpool_ser(x3, o3, kh, kw, sh, sw, ph, pw, dh, dw):
    oh_n, ow_n = o3.shape[1], o3.shape[2]
    scratch = np.empty(_padded_elems(oh_n, ow_n, kh, kw, sh, sw, dh, dw), x3.dtype)
    for p in range(x3.shape[0]):
        _maxpool_plane(x3[p], o3[p], scratch, kh, kw, sh, sw, ph, pw, dh, dw)


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _maxpool_par(nw, x3, o3, kh, kw, sh, sw, ph, pw, dh, dw):
    """nw workers, each a contiguous range of planes and one scratch."""
    n_p = x3.shape[0]
    oh_n, ow_n = o3.shape[1], o3.shape[2]
    ne = _padded_elems(oh_n, ow_n, kh, kw, sh, sw, dh, dw)
    for wk in prange(nw):
        scratch = np.empty(ne, x3.dtype)
        for p in range(wk * n_p // nw, (wk + 1) * n_p // nw):
            _maxpool_plane(x3[p], o3[p], scratch, kh, kw, sh, sw, ph, pw, dh, dw)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def maxpool2d(x, out, kh, kw, sh, sw, ph, pw, dh, dw):
    """ONNX MaxPool: x (N, C, H, W) -> out (N, C, OH, OW); kernel kh x kw, strides
    sh/sw, begin pads ph/pw, dilations dh/dw. NaN inputs are skipped (not propagated)."""
    n, c, h, w = x.shape
    oh_n, ow_n = out.shape[2], out.shape[3]
    if _whole_plane(h, w, oh_n, ow_n, kh, kw, ph, pw, dh, dw) and h * w > 0:
        global_maxpool(x.reshape(n, c, h * w), out.reshape(n, c))
        return
    if _sep3_ok(h, w, oh_n, ow_n, kh, kw, sh, sw, ph, pw, dh, dw) and n * c > 0:
        _sep3_pool(x, out, np.empty(0, x.dtype), sh, sw, ph, pw, True)
        return
    x3 = x.reshape(n * c, h, w)
    o3 = out.reshape(n * c, oh_n, ow_n)
    nw = min(num_threads(), n * c)
    if n * c * oh_n * ow_n * kh * kw >= _PAR_MIN_WORK and nw > 1:
        _maxpool_par(nw, x3, o3, kh, kw, sh, sw, ph, pw, dh, dw)
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
def _avgpool_plane(xp, op, scratch, inv, kh_n, kw_n, sh, sw, ph, pw):
    """op (OH, OW) = window sums of xp (H, W) * inv (OH * OW: 1 / divisor, see avgpool2d)."""
    oh_n, ow_n = op.shape
    if oh_n == 0 or ow_n == 0:
        return
    hp = (oh_n - 1) * sh + kh_n
    wp = (ow_n - 1) * sw + kw_n
    buf, ld = _plane_rows(xp, scratch, hp, wp, ph, pw, 0.0)
    if sh == 1 and sw == 1 and ow_n < _FLAT_MAX_OW:
        t0 = hp * wp
        _flat_rows(buf, ld, scratch, t0, oh_n, ow_n, kh_n, kw_n, 1, 1, False)
        for oh in range(oh_n):
            d = eptr(op, oh * ow_n)
            t = eptr(scratch, t0 + oh * ld)
            iv = eptr(inv, oh * ow_n)
            for ow in range(ow_n):
                d[ow] = t[ow] * iv[ow]
        return
    if kh_n == 2 and kw_n == 2 and sw == 2:  # 2x2/2 (densenet): the four taps in one pass
        for oh in range(oh_n):
            r0 = eptr(buf, oh * sh * ld)
            r1 = eptr(buf, (oh * sh + 1) * ld)
            d = eptr(op, oh * ow_n)
            iv = eptr(inv, oh * ow_n)
            for ow in range(ow_n):
                j = 2 * ow
                d[ow] = (r0[j] + r0[j + 1] + r1[j] + r1[j + 1]) * iv[ow]
        return
    unrolled = kh_n == 3 and kw_n == 3 and (sw == 1 or sw == 2)
    for oh in range(oh_n):
        d = eptr(op, oh * ow_n)
        if unrolled:
            r0 = eptr(buf, oh * sh * ld)
            r1 = eptr(buf, (oh * sh + 1) * ld)
            r2 = eptr(buf, (oh * sh + 2) * ld)
            if sw == 1:
                for ow in range(ow_n):
                    d[ow] = (r0[ow] + r0[ow + 1] + r0[ow + 2] + r1[ow] + r1[ow + 1]
                             + r1[ow + 2] + r2[ow] + r2[ow + 1] + r2[ow + 2])
            else:
                for ow in range(ow_n):
                    j = 2 * ow
                    d[ow] = (r0[j] + r0[j + 1] + r0[j + 2] + r1[j] + r1[j + 1] + r1[j + 2]
                             + r2[j] + r2[j + 1] + r2[j + 2])
        else:
            for ow in range(ow_n):
                d[ow] = 0
        for kh in range(0 if unrolled else kh_n):
            for kw in range(kw_n):
                r = eptr(buf, (oh * sh + kh) * ld + kw)
                if sw == 1:
                    for ow in range(ow_n):
                        d[ow] += r[ow]
                elif sw == 2:
                    for ow in range(ow_n):
                        d[ow] += r[2 * ow]
                else:
                    for ow in range(ow_n):
                        d[ow] += r[ow * sw]
        iv = eptr(inv, oh * ow_n)
        for ow in range(ow_n):
            d[ow] *= iv[ow]


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _avgpool_ser(x3, o3, inv, kh, kw, sh, sw, ph, pw):
    oh_n, ow_n = o3.shape[1], o3.shape[2]
    scratch = np.empty(_padded_elems(oh_n, ow_n, kh, kw, sh, sw, 1, 1), x3.dtype)
    for p in range(x3.shape[0]):
        _avgpool_plane(x3[p], o3[p], scratch, inv, kh, kw, sh, sw, ph, pw)


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _avgpool_par(nw, x3, o3, inv, kh, kw, sh, sw, ph, pw):
    """nw workers, each a contiguous range of planes and one scratch."""
    n_p = x3.shape[0]
    oh_n, ow_n = o3.shape[1], o3.shape[2]
    ne = _padded_elems(oh_n, ow_n, kh, kw, sh, sw, 1, 1)
    for wk in prange(nw):
        scratch = np.empty(ne, x3.dtype)
        for p in range(wk * n_p // nw, (wk + 1) * n_p // nw):
            _avgpool_plane(x3[p], o3[p], scratch, inv, kh, kw, sh, sw, ph, pw)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def avgpool2d(x, out, kh, kw, sh, sw, ph, pw, count_include_pad, pad_h_end, pad_w_end):
    """ONNX AveragePool (no dilation): x (N, C, H, W) -> out (N, C, OH, OW).

    Sums cover the window clipped to the input. Divisor: number of window cells inside the
    input, or with ``count_include_pad`` inside the explicitly padded input
    [-ph, H + pad_h_end) x [-pw, W + pad_w_end) (cells added by ceil_mode beyond the end
    pads are never counted). The reciprocals of the divisors are computed once per call, for
    every output position, and the sums multiplied by them.
    """
    n, c, h, w = x.shape
    oh_n, ow_n = out.shape[2], out.shape[3]
    inv = np.empty(oh_n * ow_n, x.dtype)
    one = x.dtype.type(1)
    for oh in range(oh_n):
        ch = _window_count(oh, kh, sh, ph, pad_h_end, h, count_include_pad)
        for ow in range(ow_n):
            cnt = ch * _window_count(ow, kw, sw, pw, pad_w_end, w, count_include_pad)
            inv[oh * ow_n + ow] = one / x.dtype.type(cnt)
    if _whole_plane(h, w, oh_n, ow_n, kh, kw, ph, pw, 1, 1) and h * w > 0 and n * c > 0:
        o1 = out.reshape(n * c)
        global_avgpool(x.reshape(n, c, h * w), out.reshape(n, c))
        f = x.dtype.type(h * w) * inv[0]  # the divisor counts explicit pads too: rescale
        if f != one:
            for p in range(n * c):
                o1[p] *= f
        return
    s = oh_n * ow_n
    if _sep3_ok(h, w, oh_n, ow_n, kh, kw, sh, sw, ph, pw, 1, 1) and n * c > 0:
        _sep3_pool(x, out, inv, sh, sw, ph, pw, False)
        return
    if s <= _DW_SUM_MAX_S and n * c > 1 and kh * kw > 1 and not (kh == 2 and kw == 2
                                                                 and sw == 2):
        # the window sums are a depthwise convolution with weights 1: conv's channel-block
        # kernel vectorizes them across 16 channels (short rows do not vectorize); then each
        # plane is scaled by the reciprocal counts
        # (typed arguments, not literals: literal 1s and False would make Numba compile a
        # second whole conv core for this call site, ~45 s of a cold library build)
        conv2d(x, np.ones((c, 1, kh, kw), x.dtype), inv, out, inv, np.int64(sh), np.int64(sw),
               np.int64(ph), np.int64(pw), np.int64(1), np.int64(1), np.int64(c),
               np.bool_(False))
        o2 = out.reshape(n * c, s)
        for p in range(n * c):
            row = o2[p]
            for j in range(s):
                row[j] *= inv[j]
        return
    x3 = x.reshape(n * c, h, w)
    o3 = out.reshape(n * c, oh_n, ow_n)
    nw = min(num_threads(), n * c)
    if n * c * oh_n * ow_n * kh * kw >= _PAR_MIN_WORK and nw > 1:
        _avgpool_par(nw, x3, o3, inv, kh, kw, sh, sw, ph, pw)
    else:
        _avgpool_ser(x3, o3, inv, kh, kw, sh, sw, ph, pw)


# --- Global pools ----------------------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _row_sum(r):
    s = r.dtype.type(0)
    for i in range(r.shape[0]):
        s += r[i]
    return s


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _row_max(r):
    return row_max(r)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _global_rows(x2, o1, is_max, p0, p1):
    """o1[p] = the mean (max) of row p of x2 for p in [p0, p1)."""
    cnt = x2.dtype.type(x2.shape[1])
    for p in range(p0, p1):
        o1[p] = _row_max(x2[p]) if is_max else _row_sum(x2[p]) / cnt


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _global_par(x2, o1, is_max):
    for p in prange(x2.shape[0]):
        _global_rows(x2, o1, is_max, p, p + 1)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _global_pool(x, out, is_max):
    n, c, s = x.shape
    x2 = x.reshape(n * c, s)
    o1 = out.reshape(n * c)
    if num_threads() > 1 and n * c * s >= _PAR_MIN_WORK and n * c > 1:
        _global_par(x2, o1, is_max)
    else:
        _global_rows(x2, o1, is_max, 0, n * c)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def global_avgpool(x, out):
    """ONNX GlobalAveragePool: x (N, C, S) (S = H*W...) -> out (N, C); S == 0 gives NaN."""
    _global_pool(x, out, False)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def global_maxpool(x, out):
    """ONNX GlobalMaxPool: x (N, C, S) -> out (N, C); S == 0 gives -inf; NaN skipped."""
    _global_pool(x, out, True)


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


# --- N-D pools (1-D/2-D/3-D as 5-D views): 3-D Max/Average/LpPool, MaxPool's Indices, -----
# AveragePool's dilations, LpPool, GlobalLpPool. One window loop per output, taps clipped to
# the input per axis; ``mode`` 0 max, 1 average, 2 Lp (``p``).
@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _taps(o, s, pb, d, k, size):
    """[lo, hi) of taps t in [0, k) with 0 <= o*s - pb + t*d < size."""
    start = o * s - pb
    lo = 0 if start >= 0 else (-start + d - 1) // d
    hi = 0 if start >= size else min(k, (size - start + d - 1) // d)
    return lo, max(lo, hi)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _pool5_plane(q, x, out, idx, mode, want_idx, col_major, kd, kh, kw, sd, sh, sw, pd, ph,
                 pw, ed, eh, ew, dd, dh, dw, include_pad, p):
    c_n, d_n, h_n, w_n = x.shape[1], x.shape[2], x.shape[3], x.shape[4]
    od_n, oh_n, ow_n = out.shape[2], out.shape[3], out.shape[4]
    n = q // c_n
    c = q - n * c_n
    xp = x[n, c]
    op = out[n, c]
    base = q * d_n * h_n * w_n
    t = x.dtype.type
    for od in range(od_n):
        a0, a1 = _taps(od, sd, pd, dd, kd, d_n)
        ad = a1 - a0
        if include_pad:  # taps inside the padded extent [-pd, d_n + ed)
            ad = min(kd, (d_n + ed - (od * sd - pd) + dd - 1) // dd)
        for oh in range(oh_n):
            b0, b1 = _taps(oh, sh, ph, dh, kh, h_n)
            ah = b1 - b0
            if include_pad:
                ah = min(kh, (h_n + eh - (oh * sh - ph) + dh - 1) // dh)
            for ow in range(ow_n):
                c0, c1 = _taps(ow, sw, pw, dw, kw, w_n)
                if mode == 0:
                    best = -np.inf
                    bi = -1
                    for i in range(a0, a1):
                        zd = od * sd - pd + i * dd
                        for j in range(b0, b1):
                            zh = oh * sh - ph + j * dh
                            for l in range(c0, c1):
                                zw = ow * sw - pw + l * dw
                                v = xp[zd, zh, zw]
                                if v > best or bi < 0:
                                    best = v
                                    if col_major:
                                        bi = (zw * h_n + zh) * d_n + zd
                                    else:
                                        bi = (zd * h_n + zh) * w_n + zw
                    op[od, oh, ow] = best
                    if want_idx:
                        idx[n, c, od, oh, ow] = base + bi
                else:
                    acc = 0.0
                    for i in range(a0, a1):
                        zd = od * sd - pd + i * dd
                        for j in range(b0, b1):
                            zh = oh * sh - ph + j * dh
                            for l in range(c0, c1):
                                v = xp[zd, zh, ow * sw - pw + l * dw]
                                if mode == 1:
                                    acc += v
                                elif p == 2:
                                    acc += v * v
                                elif p == 1:
                                    acc += abs(v)
                                else:
                                    acc += abs(v) ** p
                    if mode == 1:
                        if include_pad:
                            aw = min(kw, (w_n + ew - (ow * sw - pw) + dw - 1) // dw)
                            cnt = ad * ah * aw
                        else:
                            cnt = (a1 - a0) * (b1 - b0) * (c1 - c0)
                        op[od, oh, ow] = t(acc / cnt) if cnt > 0 else t(np.nan)
                    elif p == 2:
                        op[od, oh, ow] = t(np.sqrt(acc))
                    elif p == 1:
                        op[od, oh, ow] = t(acc)
                    else:
                        op[od, oh, ow] = t(acc ** (1.0 / p))


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _axis_taps(n_out, s, pb, pe, d, k, size, include_pad):
    """Per output index along one axis: first / last valid tap and the divisor share
    (valid taps, or with ``include_pad`` the taps inside the padded extent)."""
    t = np.empty((n_out, 3), np.int64)
    for o in range(n_out):
        lo, hi = _taps(o, s, pb, d, k, size)
        t[o, 0] = lo
        t[o, 1] = hi
        if include_pad:
            t[o, 2] = min(k, (size + pe - (o * s - pb) + d - 1) // d)
        else:
            t[o, 2] = hi - lo
    return t


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'},
      inline='always')
def _fold_rows(o, src, n, mode, first, p):
    """o[:n] = combine(o, f(src)) for max (mode 0) or sums (f = |.|**p for Lp's first
    stage, ``first``)."""
    if mode == 0:
        for u in range(n):
            v = src[u]
            o[u] = v if v > o[u] else o[u]
    elif mode == 1 or not first:
        for u in range(n):
            o[u] += src[u]
    elif p == 1:
        for u in range(n):
            o[u] += abs(src[u])
    elif p == 2:
        for u in range(n):
            v = src[u]
            o[u] += v * v
    else:
        for u in range(n):
            o[u] += abs(src[u]) ** p


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'},
      inline='always')
def _fold_taps(o, src, off, step, j0, j1, n, mode, init):
    """o[:n] = the max (mode 0) or sum (else) of the runs src.flat[off + j*step :][:n] for
    j0 <= j < j1 (``init`` when there are none), three runs per pass: an output window's
    valid rows or planes of a 3-tap pool folded in one loop instead of a fill and three."""
    if j1 <= j0:
        for u in range(n):
            o[u] = init
        return
    a = eptr(src, off + j0 * step)
    j = j0 + 1
    if j1 - j0 >= 3:
        b = eptr(src, off + j * step)
        c = eptr(src, off + (j + 1) * step)
        j += 2
        if mode == 0:
            for u in range(n):
                m = a[u] if a[u] > b[u] else b[u]
                o[u] = m if m > c[u] else c[u]
        else:
            for u in range(n):
                o[u] = a[u] + b[u] + c[u]
    else:
        for u in range(n):
            o[u] = a[u]
    for j in range(j, j1):
        _fold_rows(o, eptr(src, off + j * step), n, mode, False, 1)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _pool5_scratch(x, out):
    """Element counts of _pool5_sep's scratch: the D pass's plane (H x W), and the H and W
    passes' (OH x W) planes (one row per output row)."""
    return (max(1, x.shape[3] * x.shape[4]), max(1, out.shape[3] * x.shape[4]))


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _pool5_sep(q, x, out, t1, g, f, tw, th, td, mode, kh, kw, sd, sh, sw, pd, ph, pw, dd,
               dh, dw, p):
    """Plane q of pool5d without indices, separably: max and sums over a box go axis by
    axis, every pass one flat loop over many contiguous rows. Per output depth od: D folds
    the input planes of od's window into t1 (H, W); H folds, tap by tap, t1's rows into g
    (OH, W), row oh holding the window that starts at row oh * sh - ph (only valid rows
    folded, so clipping is exact; at stride 1 a tap's rows are one run); W folds g flat,
    f[u] = g[u] (+) ... (+) g[u + (kw-1) dw], where rows' ends read the next row; outputs
    whose window lies inside the row read f at (oh, ow*sw - pw), the clipped
    ones at the row ends fold g directly. An average divides by the product of each axis'
    share of the divisor (``t*[:, 2]``), Lp takes |x|**p in the first pass and the root in
    the last. (A loop per 16-wide row for H and a max chain per output for W, its tap count
    read per output, were most of the time of the passes this replaced.)"""
    h_n, w_n = x.shape[3], x.shape[4]
    od_n, oh_n, ow_n = out.shape[2], out.shape[3], out.shape[4]
    pl = h_n * w_n
    base = q * x.shape[2] * pl
    obase = q * od_n * oh_n * ow_n
    ty = out.dtype.type
    init = -np.inf if mode == 0 else 0.0
    # g / f keep only the rows an output starts its window at (oh * sh): at stride 2 the H
    # and W passes over every row would do twice the work
    ew = oh_n * w_n
    span = (kw - 1) * dw
    # outputs [w0, w1) have every tap inside the row
    w0 = min(ow_n, (pw + sw - 1) // sw)
    w1 = max(w0, min(ow_n, (w_n - 1 + pw - span) // sw + 1))  # floor: <= 0 when no such
    for od in range(od_n):
        o = eptr(t1, 0)
        if mode != 2:   # max / sum: the window's planes combined in one pass where it has
            _fold_taps(o, x, base + (od * sd - pd) * pl, dd * pl, td[od, 0], td[od, 1], pl,
                       mode, init)   # three (a pass to fill, one per plane, cost 2x)
        else:
            for u in range(pl):
                o[u] = init
            for i in range(td[od, 0], td[od, 1]):
                _fold_rows(o, eptr(x, base + (od * sd - pd + i * dd) * pl), pl, mode, True, p)
        if sh != 1:   # output row oh folds its window's valid rows of t1 (th), in one pass
            for oh in range(oh_n):
                _fold_taps(eptr(g, oh * w_n), t1, (oh * sh - ph) * w_n, dh * w_n, th[oh, 0],
                           th[oh, 1], w_n, 1 if mode == 2 else mode, init)
        else:   # stride 1: rows oh with 0 <= oh - ph + j*dh < h_n are one run per tap
            go = eptr(g, 0)
            for u in range(ew):
                go[u] = init
            for j in range(kh):
                e0 = max(0, ph - j * dh)
                e1 = min(oh_n, h_n + ph - j * dh)
                if e1 > e0:
                    _fold_rows(eptr(g, e0 * w_n), eptr(t1, (e0 - ph + j * dh) * w_n),
                               (e1 - e0) * w_n, mode, False, p)
        fo = eptr(f, 0)
        nf = ew - span
        if w1 > w0 and nf > 0:
            _fold_taps(fo, g, 0, dw, 0, kw, nf, 1 if mode == 2 else mode, init)
        dv = td[od, 2]
        for oh in range(oh_n):
            ob = eptr(out, obase + (od * oh_n + oh) * ow_n)
            fr = oh * w_n - pw
            for ow in range(w0, w1):
                ob[ow] = fo[fr + ow * sw]
            src = eptr(g, oh * w_n)
            for k in range(ow_n - (w1 - w0)):  # the clipped windows: [0, w0), [w1, ow_n)
                ow = k if k < w0 else k + w1 - w0
                st = ow * sw - pw
                acc = ty(init)
                for l in range(tw[ow, 0], tw[ow, 1]):
                    v = src[st + l * dw]
                    if mode == 0:
                        acc = v if v > acc else acc
                    else:
                        acc += v
                ob[ow] = acc
            if mode == 1:
                dvh = dv * th[oh, 2]
                for ow in range(ow_n):
                    ob[ow] = ob[ow] / (dvh * tw[ow, 2])
            elif mode == 2 and p == 2:
                for ow in range(ow_n):
                    ob[ow] = np.sqrt(ob[ow])
            elif mode == 2 and p != 1:
                for ow in range(ow_n):
                    ob[ow] = ob[ow] ** (1.0 / p)


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _pool5_par(x, out, idx, mode, want_idx, col_major, kd, kh, kw, sd, sh, sw, pd, ph, pw, ed,
               eh, ew, dd, dh, dw, include_pad, p):
    tw = _axis_taps(out.shape[4], sw, pw, ew, dw, kw, x.shape[4], include_pad)
    th = _axis_taps(out.shape[3], sh, ph, eh, dh, kh, x.shape[3], include_pad)
    td = _axis_taps(out.shape[2], sd, pd, ed, dd, kd, x.shape[2], include_pad)
    sizes = _pool5_scratch(x, out)
    nq = x.shape[0] * x.shape[1]
    nw = min(nq, num_threads())
    # one scratch per worker, planes dealt round-robin: three allocations per plane were
    # ~1/5 of a 16^3 plane's time
    for wk in prange(nw):
        t1 = np.empty(sizes[0], out.dtype)
        g = np.empty(sizes[1], out.dtype)
        f = np.empty(sizes[1], out.dtype)
        for q in range(wk, nq, nw):
            if want_idx:
                _pool5_plane(q, x, out, idx, mode, want_idx, col_major, kd, kh, kw, sd, sh, sw,
                             pd, ph, pw, ed, eh, ew, dd, dh, dw, include_pad, p)
            else:
                _pool5_sep(q, x, out, t1, g, f, tw, th, td, mode, kh, kw, sd, sh, sw, pd, ph,
                           pw, dd, dh, dw, p)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def pool5d(x, out, idx, mode, want_idx, col_major, kd, kh, kw, sd, sh, sw, pd, ph, pw, ed, eh,
           ew, dd, dh, dw, include_pad, p):
    """Max (mode 0; ``idx`` gets the flat input index of each maximum, over the whole
    tensor, row-major or with ``col_major`` the spatial axes reversed), average (1; the
    divisor counts pads up to the end pads ``e*`` when ``include_pad``) or Lp (2, ``p``)
    pooling of x (N, C, D, H, W) into out (N, C, OD, OH, OW); begin pads ``p*``, dilations
    ``d*``. ``idx`` is int64 of out's shape when ``want_idx``, else any 5-D int64 array."""
    nplanes = x.shape[0] * x.shape[1]
    work = out.size * kd * kh * kw
    args = (np.int64(mode), bool(want_idx), bool(col_major), np.int64(kd), np.int64(kh),
            np.int64(kw), np.int64(sd), np.int64(sh), np.int64(sw), np.int64(pd), np.int64(ph),
            np.int64(pw), np.int64(ed), np.int64(eh), np.int64(ew), np.int64(dd), np.int64(dh),
            np.int64(dw), bool(include_pad), np.int64(p))
    if num_threads() > 1 and work >= _PAR_MIN_WORK and nplanes > 1:
        _pool5_par(x, out, idx, *args)
        return
    if want_idx:
        for q in range(nplanes):
            _pool5_plane(q, x, out, idx, *args)
        return
    tw = _axis_taps(out.shape[4], sw, pw, ew, dw, kw, x.shape[4], include_pad)
    th = _axis_taps(out.shape[3], sh, ph, eh, dh, kh, x.shape[3], include_pad)
    td = _axis_taps(out.shape[2], sd, pd, ed, dd, kd, x.shape[2], include_pad)
    sizes = _pool5_scratch(x, out)
    t1 = np.empty(sizes[0], out.dtype)
    g = np.empty(sizes[1], out.dtype)
    f = np.empty(sizes[1], out.dtype)
    for q in range(nplanes):
        _pool5_sep(q, x, out, t1, g, f, tw, th, td, np.int64(mode), np.int64(kh), np.int64(kw),
                   np.int64(sd), np.int64(sh), np.int64(sw), np.int64(pd), np.int64(ph),
                   np.int64(pw), np.int64(dd), np.int64(dh), np.int64(dw), np.int64(p))


# --- MaxUnpool ---------------------------------------------------------------------------
@njit(cache=True, error_model='numpy')
def max_unpool(x, ind, out):
    """ONNX MaxUnpool on flat views: out = 0, then out[ind[i]] = x[i] (ind: int64 flat
    indices into out, as MaxPool's Indices output gives them); an index outside
    [0, out.size) raises IndexError before anything is written past the zeroing."""
    n = out.shape[0]
    for i in range(ind.shape[0]):
        if ind[i] < 0 or ind[i] >= n:
            raise IndexError("MaxUnpool: index out of range")
    for i in range(n):
        out[i] = 0
    for i in range(x.shape[0]):
        out[ind[i]] = x[i]


@njit(cache=True, error_model='numpy')
def maxpool2d_q(x, out, kh, kw, sh, sw, ph, pw, dh, dw):
    """2-D MaxPool of 8-bit integers (the QOperator quantizer leaves MaxPool on quantized
    data): x (N, C, H, W) into out (N, C, OH, OW), begin pads ph/pw, padding never chosen."""
    h, w = x.shape[2], x.shape[3]
    for b in range(x.shape[0]):
        for c in range(x.shape[1]):
            for oh in range(out.shape[2]):
                for ow in range(out.shape[3]):
                    m = np.int32(-1 << 30)
                    for i in range(kh):
                        r = oh * sh - ph + i * dh
                        if r < 0 or r >= h:
                            continue
                        for j in range(kw):
                            q = ow * sw - pw + j * dw
                            if 0 <= q < w:
                                v = np.int32(x[b, c, r, q])
                                if v > m:
                                    m = v
                    out[b, c, oh, ow] = m


@njit(cache=True, error_model='numpy')
def roi_align(x, rois, batch, y, scale, sampling_ratio, is_max, half_pixel):
    """RoiAlign, as onnx.reference and onnxruntime: x (N, C, H, W), rois (R, 4) as (x1, y1,
    x2, y2) in input coordinates times ``scale``, batch (R,) int64, y (R, C, OH, OW). Each
    output bin averages (or takes the max of) a grid of bilinear samples; a sample's four
    corner terms are weighted before the max, as both references do. Coordinates in float64."""
    n_rois, channels, oh, ow = y.shape
    h, w = x.shape[2], x.shape[3]
    off = 0.5 if half_pixel else 0.0
    for r in range(n_rois):
        b = batch[r]
        if b < 0 or b >= x.shape[0]:
            raise ValueError("RoiAlign: a batch index is out of range")
        x0 = np.float64(rois[r, 0]) * scale - off
        y0 = np.float64(rois[r, 1]) * scale - off
        rw = np.float64(rois[r, 2]) * scale - off - x0
        rh = np.float64(rois[r, 3]) * scale - off - y0
        if not half_pixel:
            rw = max(rw, 1.0)
            rh = max(rh, 1.0)
        bh, bw = rh / oh, rw / ow
        gh = sampling_ratio if sampling_ratio > 0 else int(np.ceil(rh / oh))
        gw = sampling_ratio if sampling_ratio > 0 else int(np.ceil(rw / ow))
        count = max(gh * gw, 1)
        for c in range(channels):
            plane = x[b, c]
            for ph in range(oh):
                for pw in range(ow):
                    acc = 0.0
                    first = True
                    for iy in range(gh):
                        yy = y0 + ph * bh + (iy + 0.5) * bh / gh
                        for ix in range(gw):
                            xx = x0 + pw * bw + (ix + 0.5) * bw / gw
                            v = _roi_sample(plane, h, w, yy, xx, is_max)
                            if not is_max:
                                acc += v
                            elif first or v > acc:
                                acc = v
                            first = False
                    y[r, c, ph, pw] = acc / count if not is_max else acc


@njit(cache=True, error_model='numpy', inline='always')
def _roi_sample(plane, h, w, yy, xx, is_max):
    """One bilinear sample of ``plane`` at (yy, xx): the sum of the four weighted corners, or
    (``is_max``) their max; 0 outside [-1, h] x [-1, w]."""
    if yy < -1.0 or yy > h or xx < -1.0 or xx > w:
        return 0.0
    yy = max(yy, 0.0)
    xx = max(xx, 0.0)
    y_lo, x_lo = int(yy), int(xx)
    if y_lo >= h - 1:
        y_lo = y_hi = h - 1
        yy = np.float64(y_lo)
    else:
        y_hi = y_lo + 1
    if x_lo >= w - 1:
        x_lo = x_hi = w - 1
        xx = np.float64(x_lo)
    else:
        x_hi = x_lo + 1
    ly, lx = yy - y_lo, xx - x_lo
    hy, hx = 1.0 - ly, 1.0 - lx
    t1 = hy * hx * plane[y_lo, x_lo]
    t2 = hy * lx * plane[y_lo, x_hi]
    t3 = ly * hx * plane[y_hi, x_lo]
    t4 = ly * lx * plane[y_hi, x_hi]
    if is_max:
        return max(max(t1, t2), max(t3, t4))
    return t1 + t2 + t3 + t4
