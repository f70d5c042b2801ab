"""CPU kernels: quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv. Imports nothing from jitort.

Layouts. The compiler views a (De)QuantizeLinear operand as ``x3`` (O, A, I) around its axis and
the scale / zero point as ``s3`` / ``z3`` of shape (So, Sa, Si): So is 1 or O, Si is 1 or I, and
element (o, a, i) of x takes the scale at (o or 0, a // blk, i or 0). That one form holds
per-tensor scales ((1, 1, N) over (1, 1, 1)), per-axis ones ((O, A, I) over (1, A, 1), or
(O, 1, A) over (1, 1, A) when the axis is the last one: the scale then varies along the
contiguous inner loop) and blocked ones ((O, A, I) over (O, ceil(A / blk), I)).

Rounding as onnxruntime (MLAS) does it: ``x / scale`` in float32, clamped to the range of the
output type shifted by the zero point (NaN -> the low end), rounded half to even, plus the zero
point.

Integer products (MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv) run as a BLAS gemm on
the zero-point-shifted operands converted to float: in float32 when ``K * max|a - za| *
max|b - zb| < 2**24`` (then every partial sum is an integer float32 holds exactly, whatever
the summation order), otherwise in float64 (exact up to 2**53): results are exact either way.
"""
import numpy as np
from numba import njit, prange

from .gemm import matmul3d, num_threads

_EXACT32 = float(1 << 24)


# --- QuantizeLinear / DequantizeLinear ---------------------------------------------------------

@njit(cache=True, error_model='numpy', inline='always')
def _q1(v, lo, hi, zp):
    if not (v >= lo):  # NaN too
        v = lo
    if v > hi:
        v = hi
    return np.rint(v) + zp


@njit(cache=True, error_model='numpy')
def _quant_rows(x3, s3, z3, y3, blk, lo, hi, has_zp, r0, r1):
    """Rows r0..r1 of (O*A) of QuantizeLinear (see the module doc)."""
    A, I = x3.shape[1], x3.shape[2]
    so, si = s3.shape[0] > 1, s3.shape[2] > 1
    for r in range(r0, r1):
        o, a = r // A, r % A
        oo = o if so else 0
        ab = a // blk
        if si:
            for i in range(I):
                zp = np.float32(z3[oo, ab, i]) if has_zp else np.float32(0.0)
                v = np.float32(x3[o, a, i]) / np.float32(s3[oo, ab, i])
                y3[o, a, i] = _q1(v, lo - zp, hi - zp, zp)
        else:
            zp = np.float32(z3[oo, ab, 0]) if has_zp else np.float32(0.0)
            sc = np.float32(s3[oo, ab, 0])
            lz, hz = lo - zp, hi - zp
            for i in range(I):
                y3[o, a, i] = _q1(np.float32(x3[o, a, i]) / sc, lz, hz, zp)


@njit(cache=True, error_model='numpy')
def _quant_flat(x1, sc, zp, y1, lo, hi, i0, i1):
    lz, hz = lo - zp, hi - zp
    for i in range(i0, i1):
        y1[i] = _q1(np.float32(x1[i]) / sc, lz, hz, zp)


@njit(cache=True, error_model='numpy')
def _quant_task(x3, s3, z3, y3, blk, lo, hi, has_zp, t, nt):
    if s3.size == 1 and x3.shape[0] * x3.shape[1] == 1:  # per-tensor: chunks of the flat array
        n = x3.size
        zp = np.float32(z3[0, 0, 0]) if has_zp else np.float32(0.0)
        _quant_flat(x3.reshape(n), np.float32(s3[0, 0, 0]), zp, y3.reshape(n), lo, hi,
                    n * t // nt, n * (t + 1) // nt)
    else:
        rows = x3.shape[0] * x3.shape[1]
        _quant_rows(x3, s3, z3, y3, blk, lo, hi, has_zp, rows * t // nt, rows * (t + 1) // nt)


@njit(cache=True, error_model='numpy')
def quantize(x3, s3, z3, y3, blk, lo, hi, has_zp):
    """QuantizeLinear: y3 = clamp(rint(x3 / s) + z, lo, hi) (lo/hi: float32 bounds of y3's type)."""
    if x3.size:
        _quant_task(x3, s3, z3, y3, blk, np.float32(lo), np.float32(hi), has_zp, 0, 1)


@njit(cache=True, error_model='numpy', parallel=True)
def quantize_par(x3, s3, z3, y3, blk, lo, hi, has_zp):
    """:func:`quantize` split over the threads (big tensors)."""
    nt = num_threads()
    if x3.size == 0:
        return
    for t in prange(nt):
        _quant_task(x3, s3, z3, y3, blk, np.float32(lo), np.float32(hi), has_zp, t, nt)


@njit(cache=True, error_model='numpy')
def _dequant_rows(x3, s3, z3, y3, blk, has_zp, r0, r1):
    A, I = x3.shape[1], x3.shape[2]
    so, si = s3.shape[0] > 1, s3.shape[2] > 1
    for r in range(r0, r1):
        o, a = r // A, r % A
        oo = o if so else 0
        ab = a // blk
        if si:
            for i in range(I):
                zp = np.int64(z3[oo, ab, i]) if has_zp else np.int64(0)
                y3[o, a, i] = np.float32(np.int64(x3[o, a, i]) - zp) * np.float32(s3[oo, ab, i])
        else:
            zp = np.int64(z3[oo, ab, 0]) if has_zp else np.int64(0)
            sc = np.float32(s3[oo, ab, 0])
            for i in range(I):
                y3[o, a, i] = np.float32(np.int64(x3[o, a, i]) - zp) * sc


@njit(cache=True, error_model='numpy')
def _dequant_flat(x1, sc, zp, y1, i0, i1):
    for i in range(i0, i1):
        y1[i] = np.float32(np.int64(x1[i]) - zp) * sc


@njit(cache=True, error_model='numpy')
def _dequant_task(x3, s3, z3, y3, blk, has_zp, t, nt):
    if s3.size == 1 and x3.shape[0] * x3.shape[1] == 1:
        n = x3.size
        zp = np.int64(z3[0, 0, 0]) if has_zp else np.int64(0)
        _dequant_flat(x3.reshape(n), np.float32(s3[0, 0, 0]), zp, y3.reshape(n),
                      n * t // nt, n * (t + 1) // nt)
    else:
        rows = x3.shape[0] * x3.shape[1]
        _dequant_rows(x3, s3, z3, y3, blk, has_zp, rows * t // nt, rows * (t + 1) // nt)


@njit(cache=True, error_model='numpy')
def dequantize(x3, s3, z3, y3, blk, has_zp):
    """DequantizeLinear: y3 = float32(x3 - z) * s (the difference in integers, as onnxruntime)."""
    if x3.size:
        _dequant_task(x3, s3, z3, y3, blk, has_zp, 0, 1)


@njit(cache=True, error_model='numpy', parallel=True)
def dequantize_par(x3, s3, z3, y3, blk, has_zp):
    nt = num_threads()
    if x3.size == 0:
        return
    for t in prange(nt):
        _dequant_task(x3, s3, z3, y3, blk, has_zp, t, nt)


# --- DynamicQuantizeLinear ---------------------------------------------------------------------

@njit(cache=True, error_model='numpy')
def _minmax(x1, i0, i1):
    lo = np.float32(0.0)
    hi = np.float32(0.0)
    for i in range(i0, i1):
        v = x1[i]
        lo = min(lo, v)
        hi = max(hi, v)
    return lo, hi


@njit(cache=True, error_model='numpy')
def _dyn_params(lo, hi):
    """onnxruntime's scale and zero point for the range [lo, hi] (lo <= 0 <= hi), uint8."""
    scale = np.float32(1.0) if hi == lo else np.float32(hi - lo) / np.float32(255.0)
    zp0 = np.float32(0.0) - lo / scale
    zp0 = min(max(zp0, np.float32(0.0)), np.float32(255.0))
    return scale, np.float32(np.rint(zp0))


@njit(cache=True, error_model='numpy')
def dynamic_quantize(x1, y1, ys, yz):
    """DynamicQuantizeLinear (uint8): scale and zero point from min(0, x) .. max(0, x)."""
    lo, hi = _minmax(x1, 0, x1.size)
    scale, zp = _dyn_params(lo, hi)
    ys[0] = scale
    yz[0] = np.uint8(zp)
    _quant_flat(x1, scale, zp, y1, np.float32(0.0), np.float32(255.0), 0, x1.size)


@njit(cache=True, error_model='numpy', parallel=True)
def dynamic_quantize_par(x1, y1, ys, yz):
    nt = num_threads()
    n = x1.size
    mm = np.zeros((nt, 2), np.float32)
    for t in prange(nt):
        lo, hi = _minmax(x1, n * t // nt, n * (t + 1) // nt)
        mm[t, 0] = lo
        mm[t, 1] = hi
    lo = np.float32(0.0)
    hi = np.float32(0.0)
    for t in range(nt):
        lo = min(lo, mm[t, 0])
        hi = max(hi, mm[t, 1])
    scale, zp = _dyn_params(lo, hi)
    ys[0] = scale
    yz[0] = np.uint8(zp)
    for t in prange(nt):
        _quant_flat(x1, scale, zp, y1, np.float32(0.0), np.float32(255.0),
                    n * t // nt, n * (t + 1) // nt)


# --- integer matrix products -------------------------------------------------------------------

@njit(cache=True, error_model='numpy')
def _maxabs_rows(a3, za):
    """max |a3[b, m, k] - za[m or 0]| (za: 1-D, 1 or M entries)."""
    per_row = za.shape[0] > 1
    best = 0
    for bi in range(a3.shape[0]):
        for m in range(a3.shape[1]):
            z = np.int32(za[m if per_row else 0])
            lo = np.int32(0)
            hi = np.int32(0)
            for k in range(a3.shape[2]):
                v = np.int32(a3[bi, m, k]) - z
                lo = min(lo, v)
                hi = max(hi, v)
            best = max(best, max(-lo, hi))
    return best


@njit(cache=True, error_model='numpy')
def _maxabs_cols(b3, zb):
    """max |b3[b, k, n] - zb[n or 0]| (zb: 1-D, 1 or N entries)."""
    per_col = zb.shape[0] > 1
    n_ = b3.shape[2]
    lo = np.zeros(n_, np.int32)
    hi = np.zeros(n_, np.int32)
    for bi in range(b3.shape[0]):
        for k in range(b3.shape[1]):
            for n in range(n_):
                v = np.int32(b3[bi, k, n]) - np.int32(zb[n if per_col else 0])
                lo[n] = min(lo[n], v)
                hi[n] = max(hi[n], v)
    best = 0
    for n in range(n_):
        best = max(best, max(-lo[n], hi[n]))
    return best


@njit(cache=True, error_model='numpy')
def _shift_rows(a3, za, out3):
    per_row = za.shape[0] > 1
    for bi in range(a3.shape[0]):
        for m in range(a3.shape[1]):
            z = np.int32(za[m if per_row else 0])
            for k in range(a3.shape[2]):
                out3[bi, m, k] = np.int32(a3[bi, m, k]) - z


@njit(cache=True, error_model='numpy')
def _shift_cols(b3, zb, out3):
    per_col = zb.shape[0] > 1
    for bi in range(b3.shape[0]):
        for k in range(b3.shape[1]):
            for n in range(b3.shape[2]):
                out3[bi, k, n] = np.int32(b3[bi, k, n]) - np.int32(zb[n if per_col else 0])


def shift_weights(b3, zb):
    """(float32 (Bb, K, N) array of b3 - zb, max |b3 - zb|): constant B prepared at compile
    time (called by the compiler, not from njit code)."""
    b = b3.astype(np.int32) - np.asarray(zb).astype(np.int32).reshape(1, 1, -1)
    return b.astype(np.float32), int(np.abs(b).max()) if b.size else 0


@njit(cache=True, error_model='numpy')
def _requant_rows(c3, y3, mult, zy, lo, hi):
    """y3 = clamp(rint(float32(c3) * mult[n or 0]) + zy): onnxruntime's requantization."""
    per_col = mult.shape[0] > 1
    zp = np.float32(zy)
    lz, hz = lo - zp, hi - zp
    for bi in range(c3.shape[0]):
        for m in range(c3.shape[1]):
            for n in range(c3.shape[2]):
                y3[bi, m, n] = _q1(np.float32(c3[bi, m, n]) * mult[n if per_col else 0],
                                   lz, hz, zp)


@njit(cache=True, error_model='numpy')
def _to_int32(c3, y3):
    for bi in range(c3.shape[0]):
        for m in range(c3.shape[1]):
            for n in range(c3.shape[2]):
                y3[bi, m, n] = np.int32(c3[bi, m, n])


@njit(cache=True, error_model='numpy')
def _qmm_run(a3, za, af, bf, cf, y3, mode, mult, zy, lo, hi):
    _shift_rows(a3, za, af)
    if a3.shape[2] == 0:
        cf[:] = 0
    else:
        matmul3d(af, bf, cf)
    if mode == 0:
        _to_int32(cf, y3)
    else:
        _requant_rows(cf, y3, mult, zy, lo, hi)


@njit(cache=True, error_model='numpy')
def qmatmul(a3, za, b3, zb, bc, bmax, has_bc, y3, ws, mode, sa, sb, sy, zy, lo, hi):
    """MatMulInteger (mode 0: y3 int32) or QLinearMatMul (mode 1: requantized into y3's type).

    a3 (Ba, M, K), b3 (Bb, K, N), y3 (Bo, M, N), Ba and Bb in {1, Bo}; za 1-D (1 or M
    entries), zb 1-D (1 or N); bc: (Bb, K, N) float32 of b3 - zb prepared at compile time when
    has_bc (B constant; bmax its max |.|), else a dummy. ws: float64 scratch of
    Ba*M*K + Bb*K*N + Bo*M*N elements. QLinearMatMul: sa (1,), sb (1 or N), sy (1,) float32
    scales, zy (1,) output zero point, lo/hi the output type's bounds. The gemm runs in float32
    when exact (module doc), else in float64.
    """
    if y3.size == 0:
        return
    ba, m, k = a3.shape
    bb, n = b3.shape[0], b3.shape[2]
    bo = y3.shape[0]
    na, nb, nc = ba * m * k, bb * k * n, bo * m * n
    ma = _maxabs_rows(a3, za)
    mb = bmax if has_bc else _maxabs_cols(b3, zb)
    nm = sb.shape[0]
    mult = np.empty(nm, np.float32)
    for i in range(nm):
        mult[i] = np.float32(sa[0] * sb[i]) / sy[0]
    zz = np.float32(zy[0]) if mode == 1 else np.float32(0.0)
    flo, fhi = np.float32(lo), np.float32(hi)
    if float(k) * float(ma) * float(mb) < _EXACT32:
        w = ws.view(np.float32)
        bf = w[na:na + nb].reshape(bb, k, n)
        if has_bc:
            bf = bc
        else:
            _shift_cols(b3, zb, bf)
        _qmm_run(a3, za, w[:na].reshape(ba, m, k), bf, w[na + nb:na + nb + nc].reshape(bo, m, n),
                 y3, mode, mult, zz, flo, fhi)
    else:
        bf = ws[na:na + nb].reshape(bb, k, n)
        if has_bc:
            bf[:] = bc
        else:
            _shift_cols(b3, zb, bf)
        _qmm_run(a3, za, ws[:na].reshape(ba, m, k), bf, ws[na + nb:na + nb + nc].reshape(bo, m, n),
                 y3, mode, mult, zz, flo, fhi)
