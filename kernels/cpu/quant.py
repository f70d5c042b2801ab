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

from .conv import conv2d
from .gemm import claim, count_done, eptr, matmul3d, next_task, num_threads
from .mathfn import wide_vectors
from .phases import _col_range, _pad_row, _phases_used, phase_planes
from .qgemm import (MR, NR, _tile, _tile_off, copy_short, igemm, igemm_part, pack_p, pack_v,
                    packed_sizes)
from .sync import wait_count

_EXACT32 = float(1 << 24)


# --- QuantizeLinear / DequantizeLinear ---------------------------------------------------------

@njit(cache=True, error_model='numpy', inline='always')
def _q1(v, lo, hi, zp):
    if not (v >= lo):  # NaN too
        v = lo
    if v > hi:
        v = hi
    return np.int32(np.rint(v) + zp)  # (through int32: a direct float -> 8-bit store is scalar)


@njit(inline='always')
def _row_at(r, x3, s3, blk):
    """(o, a, oo, ab) of row r = o * A + a of x3 (O, A, I): its indices and those of its scale
    and zero point's row (oo, ab) in s3 / z3."""
    o, a = r // x3.shape[1], r % x3.shape[1]
    return o, a, (o if s3.shape[0] > 1 else 0), a // blk


@njit(cache=True, error_model='numpy')
def _quant_rows(x3, s3, z3, y3, blk, lo, hi, has_zp, r0, r1):
    """Rows r0..r1 of (O*A) of QuantizeLinear (see the module doc)."""
    I = x3.shape[2]
    for r in range(r0, r1):
        o, a, oo, ab = _row_at(r, x3, s3, blk)
        if s3.shape[2] > 1:
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
    xs, ys = x1[i0:i1], y1[i0:i1]  # (indices from 0: no wraparound checks, the loop vectorizes)
    for i in range(xs.size):
        ys[i] = _q1(np.float32(xs[i]) / sc, lz, hz, zp)


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
    """Rows r0..r1 of (O*A) of DequantizeLinear."""
    for r in range(r0, r1):
        o, a, oo, ab = _row_at(r, x3, s3, blk)
        if s3.shape[2] > 1:
            for i in range(x3.shape[2]):
                zp = np.int32(z3[oo, ab, i]) if has_zp else np.int32(0)
                y3[o, a, i] = np.float32(np.int32(x3[o, a, i]) - zp) * np.float32(s3[oo, ab, i])
        else:
            zp = np.int32(z3[oo, ab, 0]) if has_zp else np.int32(0)
            sc = np.float32(s3[oo, ab, 0])
            for i in range(x3.shape[2]):
                y3[o, a, i] = np.float32(np.int32(x3[o, a, i]) - zp) * sc


@njit(cache=True, error_model='numpy')
def _dequant_flat(x1, sc, zp, y1, i0, i1):
    xs, ys = x1[i0:i1], y1[i0:i1]
    for i in range(xs.size):
        ys[i] = np.float32(np.int32(xs[i]) - zp) * sc


@njit(cache=True, error_model='numpy')
def _dequant_task(x3, s3, z3, y3, blk, has_zp, t, nt):
    if s3.size == 1 and x3.shape[0] * x3.shape[1] == 1:
        n = x3.size
        zp = np.int32(z3[0, 0, 0]) if has_zp else np.int32(0)
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

@njit(cache=True, error_model='numpy', inline='always')
def _fkey(v):
    """float32 bits <-> an int32 of the same order (an involution): integer min/max
    reductions vectorize where float ones (NaN-aware selects) do not. In int32 throughout
    (Numba widens int32 arithmetic to int64: half the lanes)."""
    return np.int32(v ^ ((v >> np.int32(31)) & np.int32(0x7fffffff)))


@njit(cache=True, error_model='numpy')
def _minmax_keys(x1, i0, i1):
    """(min(0, x), max(0, x)) over float32 x1[i0:i1] as :func:`_fkey` keys (NaN orders above
    +inf)."""
    xi = x1[i0:i1].view(np.int32)
    lo = np.int32(0)
    hi = np.int32(0)
    for i in range(xi.size):
        k = _fkey(xi[i])
        lo = k if k < lo else lo
        hi = k if k > hi else hi
    return lo, hi


@njit(cache=True, error_model='numpy')
def _keys_float(lo, hi):
    out = np.empty(2, np.int32)
    out[0] = _fkey(lo)
    out[1] = _fkey(hi)
    f = out.view(np.float32)
    return f[0], f[1]


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
    lo, hi = _keys_float(*_minmax_keys(x1, 0, x1.size))
    scale, zp = _dyn_params(lo, hi)
    ys[0] = scale
    yz[0] = np.uint8(zp)
    _quant_flat(x1, scale, zp, y1, np.float32(0.0), np.float32(255.0), 0, x1.size)


@njit(cache=True, error_model='numpy')
def _dyn_worker(x1, y1, ys, yz, keys, ctr, nchunk):
    """One worker of :func:`dynamic_quantize_par`: claims chunks of the min/max pass
    (``ctr[0]``, done counted in ``ctr[1]``), waits until every chunk is done, then claims
    chunks of the quantization (``ctr[2]``). It only waits for chunks a running worker has
    claimed, so a worker that runs alone does everything: nothing can deadlock."""
    n = x1.size
    while True:
        q = claim(ctr, 0)
        if q >= nchunk:
            break
        keys[q, 0], keys[q, 1] = _minmax_keys(x1, n * q // nchunk, n * (q + 1) // nchunk)
        count_done(ctr, 1)
    wait_count(ctr, 1, nchunk)
    lo = np.int32(0)
    hi = np.int32(0)
    for q in range(nchunk):
        lo = min(lo, keys[q, 0])
        hi = max(hi, keys[q, 1])
    scale, zp = _dyn_params(*_keys_float(lo, hi))
    while True:
        q = claim(ctr, 2)
        if q >= nchunk:
            break
        if q == 0:
            ys[0] = scale
            yz[0] = np.uint8(zp)
        _quant_flat(x1, scale, zp, y1, np.float32(0.0), np.float32(255.0), n * q // nchunk,
                    n * (q + 1) // nchunk)


@njit(cache=True, error_model='numpy', parallel=True)
def _dyn_workers(x1, y1, ys, yz, keys, ctr, nchunk, nw):
    for w in prange(nw):
        _dyn_worker(x1, y1, ys, yz, keys, ctr, nchunk)


_DYN_CHUNK = 8192  # floats per claimed chunk (~1 us of min/max, 3 us of quantization)


@njit(cache=True, error_model='numpy')
def dynamic_quantize_par(x1, y1, ys, yz):
    """:func:`dynamic_quantize` over the threads in one parallel region: both passes by chunks
    claimed from counters, one wait between them (a launch per pass cost ~10 us of waking
    the other thread, as much as a 100K-element pass gains)."""
    nt = num_threads()
    nchunk = max(1, min(8 * nt, x1.size // _DYN_CHUNK))
    keys = np.zeros((nchunk, 2), np.int32)  # (made here: see _cell_workers in rnn.py)
    ctr = np.zeros(3, np.int64)
    if nt > 1 and nchunk > 1:
        _dyn_workers(x1, y1, ys, yz, keys, ctr, nchunk, nt)
    else:
        _dyn_worker(x1, y1, ys, yz, keys, ctr, nchunk)


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


def shift_weights(b3, zb, axis=-1):
    """(float32 array of b3 - zb, max |b3 - zb|): constant weights prepared at compile time
    (called by the compiler, not from njit code). zb: 1 entry, or one per index of ``axis``
    (B's columns; a conv weight's output channels with axis 0)."""
    shape = [1] * b3.ndim
    shape[axis] = -1
    b = b3.astype(np.int32) - np.asarray(zb).astype(np.int32).reshape(shape)
    return b.astype(np.float32), int(np.abs(b).max()) if b.size else 0


@njit(cache=True, error_model='numpy')
def _requant(sa, sb, sy, zy, mode, lo, hi):
    """QLinear* output parameters: (mult, zz, lo, hi) with mult[i] = sa * sb[i] / sy (float32;
    sb per tensor or per output channel), zz the output zero point (mode 1; else 0) and the
    output type's bounds in float32."""
    nm = sb.shape[0]
    mult = np.empty(nm, np.float32)
    for i in range(nm):
        mult[i] = np.float32(sa[0] * sb[i]) / sy[0]
    zz = np.float32(zy[0]) if mode == 1 else np.float32(0.0)
    return mult, zz, np.float32(lo), np.float32(hi)


@njit(cache=True, error_model='numpy')
def _requant_rows(c3, y3, mult, zy, lo, hi):
    """y3 = clamp(rint(float32(c3) * mult[n or 0]) + zy): onnxruntime's requantization
    (``_requant_block`` per batch)."""
    for bi in range(c3.shape[0]):
        _requant_block(c3[bi], y3[bi], mult, np.float32(zy), lo, hi, 0, c3.shape[1], 0,
                       c3.shape[2])


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
    mult, zz, flo, fhi = _requant(sa, sb, sy, zy, mode, lo, hi)
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


def prepack_b(b3, zb):
    """Constant B (1, K, N) of 8-bit integers with zero points zb (1 or N entries) as the
    vector operand of ``qgemm.igemm`` in the int8 domain (called by the compiler): packed
    bytes, column sums, zero points as int32."""
    b2 = np.ascontiguousarray(b3[0])
    flip = b2.dtype == np.uint8
    k, n = b2.shape
    pv = np.empty(packed_sizes(1, k, n)[1], np.uint8)
    cs = np.empty(n, np.int32)
    pack_v(b2, flip, True, pv, cs)
    zv = np.asarray(zb).reshape(-1).astype(np.int32) - (128 if flip else 0)
    return pv, cs, zv


@njit(cache=True, error_model='numpy')
def qmatmul_i8(a3, za, a_signed, pv, colsum, zv, y3, ws, mode, sa, sb, sy, zy, lo, hi):
    """``qmatmul`` with constant B prepacked (``prepack_b``) on the integer gemm
    (``qgemm.igemm``, where the host has VNNI): A (Ba, M, K) packed per batch into the uint8
    domain (``a_signed``: A is int8, flipped, its zero point moved by +128), y3 (Ba, M, N)
    int32 (mode 0) written by the gemm, or requantized (mode 1) from int32 products. ws:
    float64 scratch as ``qmatmul``'s, used for the packed A and the products when it holds
    them. Exact: the same int32 products as onnxruntime's."""
    if y3.size == 0:
        return
    ba, m, k = a3.shape
    n = y3.shape[2]
    npk = packed_sizes(m, k, n)[0]
    need = npk + 4 * m * n * (mode != 0) + 64
    wb = ws.view(np.uint8) if ws.size * 8 >= need else np.empty(need, np.uint8)
    pp = wb[:npk]
    c2 = wb[(npk + 63) // 64 * 64:(npk + 63) // 64 * 64 + 4 * m * n].view(np.int32).reshape(m, n)
    rowsum = np.empty(m, np.int32)
    zp = np.empty(za.shape[0], np.int32)
    for i in range(za.shape[0]):
        zp[i] = np.int32(za[i]) + (128 if a_signed else 0)
    mult, zz, _, _ = _requant(sa, sb, sy, zy, mode, lo, hi)
    nt = (m + MR - 1) // MR
    npan = (n + NR - 1) // NR
    nw = max(1, min(num_threads(), nt * npan))
    if float(m) * float(n) * float(k) < _QMM_PAR_MNK:
        nw = 1
    # row chunks per panel: enough tasks for the workers to even out (dynamic scheduling)
    mch = min(nt, max(1, (4 * nw + npan - 1) // npan)) if nw > 1 else 1
    for bi in range(ba):
        pack_p(a3[bi], a_signed, False, pp, rowsum)
        if nw == 1:
            if mode == 0:
                igemm(pp, rowsum, zp, pv, colsum, zv, y3[bi], k, True)
            else:
                igemm(pp, rowsum, zp, pv, colsum, zv, c2, k, True)
                _requant_block(c2, y3[bi], mult, zz, np.float32(lo), np.float32(hi), 0, m, 0, n)
        elif mode == 0:  # int32 products straight into y
            _qmm_i8_par(nw, pp, rowsum, zp, pv, colsum, zv, y3[bi], y3[bi], k, mode, mult, zz,
                        np.float32(lo), np.float32(hi), nt, npan, mch)
        else:
            _qmm_i8_par(nw, pp, rowsum, zp, pv, colsum, zv, c2, y3[bi], k, mode, mult, zz,
                        np.float32(lo), np.float32(hi), nt, npan, mch)


#: m * n * k below which qmatmul_i8 stays on the calling thread (about 20 us of VNNI work)
_QMM_PAR_MNK = float(1 << 21)


@njit(cache=True, error_model='numpy')
def _requant_block(c2, y2, mult, zy, lo, hi, r0, r1, j0, j1):
    """y2[r0:r1, j0:j1] = clamp(rint(float32(c2) * mult[n or 0]) + zy) over the same block of
    c2, onnxruntime's requantization for 8-bit outputs (``_q1_small``'s rounding, a vector add
    where ``np.rint`` stayed a call: 3.7 ns per element, as long as the 128x768x768 integer
    gemm itself). Rows as slices indexed from 0: with j0 from an argument LLVM keeps Numba's
    negative-index wraparound per element and the loop stays scalar, 10x slower."""
    per_col = mult.shape[0] > 1
    lz, hz = lo - zy, hi - zy
    w = j1 - j0
    mr = mult[j0:j1] if per_col else mult
    for r in range(r0, r1):
        cr = c2[r, j0:j1]
        yr = y2[r, j0:j1]
        if per_col:
            for j in range(w):
                yr[j] = _q1_small(np.float32(cr[j]) * mr[j], lz, hz, zy)
        else:
            mu = mr[0]
            for j in range(w):
                yr[j] = _q1_small(np.float32(cr[j]) * mu, lz, hz, zy)


@njit(cache=True, error_model='numpy')
def _qmm_i8_worker(counter, pp, rowsum, zp, pv, colsum, zv, c2, y2, k, mode, mult, zy, lo, hi, nt,
                   npan, mch):
    """One worker of ``_qmm_i8_par``: tasks (panel, chunk of row tiles) from the shared counter
    until none is left. (A plain function: the same loop inside the prange body compiles
    slower code.)"""
    m, n = c2.shape
    while True:
        t = next_task(counter)
        if t >= npan * mch:
            break
        pn = t // mch
        ch = t - pn * mch
        t0, t1 = ch * nt // mch, (ch + 1) * nt // mch
        igemm_part(pp, rowsum, zp, pv, colsum, zv, c2, k, True, t0, t1, pn, pn + 1)
        if mode != 0:
            _requant_block(c2, y2, mult, zy, lo, hi, t0 * MR, min(m, t1 * MR), pn * NR,
                           min(n, pn * NR + NR))


@njit(cache=True, error_model='numpy', parallel=True)
def _qmm_i8_par(nw, pp, rowsum, zp, pv, colsum, zv, c2, y2, k, mode, mult, zy, lo, hi, nt, npan,
                mch):
    """``igemm`` (and the requantization of mode 1) as tasks pulled by ``nw`` prange workers
    from a shared counter."""
    counter = np.zeros(1, np.int64)
    for wk in prange(nw):
        _qmm_i8_worker(counter, pp, rowsum, zp, pv, colsum, zv, c2, y2, k, mode, mult, zy, lo, hi,
                       nt, npan, mch)


# --- ConvInteger / QLinearConv -------------------------------------------------------------------

@njit(cache=True, error_model='numpy')
def _maxabs_x(x4, zx):
    z = np.int32(zx[0])
    lo = np.int32(0)
    hi = np.int32(0)
    xf = x4.reshape(x4.size)
    for i in range(xf.size):
        v = np.int32(xf[i]) - z
        lo = v if v < lo else lo
        hi = v if v > hi else hi
    return max(-lo, hi)


@njit(cache=True, error_model='numpy')
def _shift_x(x4, zx, out):
    z = np.int32(zx[0])
    xf = x4.reshape(x4.size)
    of = out.reshape(out.size)
    for i in range(xf.size):
        of[i] = np.int32(xf[i]) - z


@njit(cache=True, error_model='numpy')
def _shift_w(w4, zw, out):
    """out[m] = w4[m] - zw[m or 0] (per output channel zero points)."""
    per = zw.shape[0] > 1
    for m in range(w4.shape[0]):
        z = np.int32(zw[m if per else 0])
        for c in range(w4.shape[1]):
            for i in range(w4.shape[2]):
                for j in range(w4.shape[3]):
                    out[m, c, i, j] = np.int32(w4[m, c, i, j]) - z


@njit(cache=True, error_model='numpy')
def _maxabs_w(w4, zw):
    per = zw.shape[0] > 1
    best = 0
    for m in range(w4.shape[0]):
        z = np.int32(zw[m if per else 0])
        for c in range(w4.shape[1]):
            for i in range(w4.shape[2]):
                for j in range(w4.shape[3]):
                    best = max(best, abs(np.int32(w4[m, c, i, j]) - z))
    return best


@njit(cache=True, error_model='numpy')
def _conv_epilogue(cf, y4, mode, bias, has_bias, mult, zy, lo, hi):
    """ConvInteger (mode 0): int32(acc). QLinearConv: requantize int32(acc) + bias[m] with the
    channel's multiplier (onnxruntime: bias added in int32)."""
    per = mult.shape[0] > 1
    zp = np.float32(zy)
    lz, hz = lo - zp, hi - zp
    for b in range(cf.shape[0]):
        for m in range(cf.shape[1]):
            c2 = cf[b, m].reshape(cf.shape[2] * cf.shape[3])
            y2 = y4[b, m].reshape(cf.shape[2] * cf.shape[3])
            if mode == 0:
                for i in range(c2.size):
                    y2[i] = np.int32(c2[i])
            else:
                bm = np.int32(bias[m]) if has_bias else np.int32(0)
                sc = mult[m if per else 0]
                for i in range(c2.size):
                    y2[i] = _q1(np.float32(np.int32(c2[i]) + bm) * sc, lz, hz, zp)


@njit(cache=True, error_model='numpy')
def _qconv_run(x4, zx, wf, cf, col, xf, y4, sh, sw, ph, pw, dh, dw, group, mode, bias,
               has_bias, mult, zy, lo, hi):
    _shift_x(x4, zx, xf)
    conv2d(xf, wf, np.zeros(1, xf.dtype), cf, col, sh, sw, ph, pw, dh, dw, group, False)
    _conv_epilogue(cf, y4, mode, bias, has_bias, mult, zy, lo, hi)


@njit(cache=True, error_model='numpy')
def qconv2d(x4, zx, w4, zw, wc, wmax, has_wc, y4, ws, ncol, sh, sw, ph, pw, dh, dw, group,
            mode, sx, swc, sy, zy, bias, has_bias, lo, hi):
    """ConvInteger (mode 0: int32 y4) or QLinearConv (mode 1: requantized into y4's type).

    x4 (N, C, H, W), w4 (M, C/group, KH, KW), y4 (N, M, OH, OW) integer; zx (1,), zw 1-D of 1
    or M entries; wc: float32 w4 - zw prepared at compile time when has_wc (wmax its max
    |.|), else a dummy. ws: float64 scratch of x4.size + w4.size + y4.size + ncol elements
    (ncol: ``conv.conv2d_scratch_elems``). QLinearConv: sx (1,), swc (1 or M), sy (1,) float32
    scales, zy (1,), bias int32 (M,) when has_bias, lo/hi the output type's bounds. The
    convolution (``conv.conv2d``, zero padding = the input's zero point) runs on the shifted
    operands in float32 when exact (module doc), else float64.
    """
    if y4.size == 0:
        return
    n, c, h, w = x4.shape
    m, cg, kh, kw = w4.shape
    oh, ow = y4.shape[2], y4.shape[3]
    nx, nw, ny = x4.size, w4.size, y4.size
    mx = _maxabs_x(x4, zx)
    mw = wmax if has_wc else _maxabs_w(w4, zw)
    mult, zz, flo, fhi = _requant(sx, swc, sy, zy, mode, lo, hi)
    if float(cg * kh * kw) * float(mx) * float(mw) < _EXACT32:
        v = ws.view(np.float32)
        wf = v[nx:nx + nw].reshape(m, cg, kh, kw)
        if has_wc:
            wf = wc
        else:
            _shift_w(w4, zw, wf)
        _qconv_run(x4, zx, wf, v[nx + nw:nx + nw + ny].reshape(n, m, oh, ow),
                   v[nx + nw + ny:nx + nw + ny + ncol], v[:nx].reshape(n, c, h, w), y4,
                   sh, sw, ph, pw, dh, dw, group, mode, bias, has_bias, mult, zz, flo, fhi)
    else:
        wf = ws[nx:nx + nw].reshape(m, cg, kh, kw)
        if has_wc:
            wf[:] = wc
        else:
            _shift_w(w4, zw, wf)
        _qconv_run(x4, zx, wf, ws[nx + nw:nx + nw + ny].reshape(n, m, oh, ow),
                   ws[nx + nw + ny:nx + nw + ny + ncol], ws[:nx].reshape(n, c, h, w), y4,
                   sh, sw, ph, pw, dh, dw, group, mode, bias, has_bias, mult, zz, flo, fhi)


# --- QLinearConv / ConvInteger on the integer gemm ----------------------------------------------
# Y[m, p] = sum_k W[m, k] * col[k, p] per group on the micro-kernel of ``qgemm`` (W the broadcast
# operand, packed once at compile time by ``prepack_conv_w``; the im2col columns the vector
# operand) over a *virtual* output grid: rows of wq columns, wq the width of the (phase) planes
# the input is copied into, so that every im2col row is one shifted contiguous run of a plane
# (columns u >= OW of each virtual row are computed and dropped). For strides (sh, sw), phase
# plane (a, e) holds the zero-point-padded input at rows y*sh + a, columns x*sw + e; tap (i, j)
# reads its plane at offset (i*dh // sh, j*dw // sw).
#
# Kernels with several taps (``_tile_off``, no im2col copy): K is ordered (4 channels, tap) with
# the 4 channels innermost (each group's channels padded to a multiple of 4 with zero weights)
# and the input is copied once per call into that channel-interleaved layout, a plane of 4-byte
# words per 4 channels and phase (int8 input flipped to uint8 on the way): a step's 64 columns
# are then 256 consecutive bytes, which the micro-kernel loads at a per-step offset from a
# table. What a panel reads stays in L1 (a packed im2col panel of a 3x3 conv over 64 channels,
# 36 KB, did not, and building it took ~15 % of the time).
# 1x1 kernels (``_tile`` on a packed panel): every column is read once, so each 64-column panel
# is packed from byte planes (stride 1 without padding: from x itself) as four shifted byte
# streams per 4 channels, straight into the [k/4][64][4] layout, and stays in L1 for all the
# tiles (packing beats reading in place after a copy into interleaved planes: a 1x1 panel's
# steps lie a whole plane apart and are read just once).


def _conv_geom(h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw):
    """(packed, direct, hq, wq): a 1x1 kernel packs panels (``direct``: from x itself, stride 1
    without padding), others read interleaved planes; the (phase) planes are hq x wq."""
    hp = (oh - 1) * sh + (kh - 1) * dh + 1
    wp = (ow - 1) * sw + (kw - 1) * dw + 1
    packed = kh * kw == 1
    if packed and sh == 1 and sw == 1 and ph == 0 and pw == 0 and wp == w and hp <= h:
        return True, True, h, w
    return packed, False, (hp + sh - 1) // sh, (wp + sw - 1) // sw


_conv_geom_nb = njit(cache=True, error_model='numpy')(_conv_geom)


def qconv_i8_scratch(n, c, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, group, threads):
    """Bytes of ``qconv2d_i8``'s scratch (plain Python; sizes may be symbolic): the planes
    (interleaved ones with NR words of slack: the last panel reads past the last plane), then
    per worker a packed panel (1x1 kernels), an int32 tile, the column sums and a row of
    results."""
    packed, direct, hq, wq = _conv_geom(h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)
    cg4 = (c // group + 3) // 4
    if packed:
        planes = 0 if direct else n * c * sh * sw * hq * wq
    else:
        planes = n * group * cg4 * sh * sw * hq * wq * 4 + NR * 4
    return (planes + 63) // 64 * 64 + threads * _worker_bytes(cg4, packed) + 64


def _worker_bytes(kq, packed):
    return ((kq * NR * 4 if packed else 0) + (2 * MR + 1) * NR * 4 + 63) // 64 * 64


_worker_bytes_nb = njit(cache=True, error_model='numpy')(_worker_bytes)


def prepack_conv_w(w4, zw, group):
    """Constant weights (M, C/group, KH, KW) with zero points zw (1 or M entries) as the
    broadcast operand of ``qgemm._tile`` / ``_tile_off`` per group, in the int8 domain, K
    ordered (4 channels, KH, KW, channel of the 4) with the channels padded to a multiple of 4
    by zeros (for 1x1 kernels the plain channel order) (called by the compiler): (packed
    bytes, row sums (group, rows), zero points (M,) int32, has_zw). With a nonzero weight zero
    point each group gets one more row, of ones at the real channels: its products are the
    column sums of the im2col panel that the zero-point correction needs."""
    m, cg, kh, kw = w4.shape
    mg, cg4 = m // group, (cg + 3) // 4
    k = cg4 * 4 * kh * kw
    wi = np.zeros((m, cg4 * 4, kh, kw), np.int16)
    wi[:, :cg] = w4
    z = np.broadcast_to(np.asarray(zw).reshape(-1).astype(np.int16), (m,)).copy()
    if w4.dtype == np.uint8:
        wi[:, :cg] -= 128
        z -= 128
    has_zw = bool((z != 0).any())
    ones = np.zeros((1, cg4 * 4, kh, kw), np.int16)
    ones[:, :cg] = 1

    def order(a):  # (rows, cg4*4, kh, kw) -> (rows, K) in the (c4, kh, kw, 4) order
        return a.reshape(a.shape[0], cg4, 4, kh, kw).transpose(0, 1, 3, 4, 2).reshape(-1, k)
    wi, ones = order(wi), order(ones)
    rows = mg + has_zw
    gbytes = packed_sizes(rows, k, 1)[0]
    pk = np.empty(group * gbytes, np.uint8)
    rs = np.zeros((group, rows), np.int32)
    for g in range(group):
        p = np.zeros((rows, k), np.int8)
        p[:mg] = wi[g * mg:(g + 1) * mg]
        if has_zw:
            p[mg] = ones[0]
        pack_p(p, False, True, pk[g * gbytes:(g + 1) * gbytes], rs[g])
    return pk, rs, z.astype(np.int32), has_zw


@njit(cache=True, error_model='numpy', inline='always')
def _q1_small(v, lo, hi, zp):
    """``_q1`` for bounds within +-2**22 (8-bit outputs): after the clamp, adding and
    subtracting 1.5 * 2**23 rounds half to even exactly as ``np.rint`` (a vector add where
    rint may stay a call)."""
    if not (v >= lo):  # NaN too
        v = lo
    if v > hi:
        v = hi
    r = (v + np.float32(12582912.0)) - np.float32(12582912.0)
    return np.int32(r + zp)


@njit(cache=True, error_model='numpy')
def _phase_planes(x4, zx, xb, sh, sw, ph, pw, dh, dw, kh, kw, hq, wq):
    """xb[((b*C + c)*sh*sw + a*sw + e)*hq*wq + y*wq + x] = x4[b, c, y*sh + a - ph,
    x*sw + e - pw] (the zero point's byte outside x), for the phases the taps use."""
    n, c, h, w = x4.shape
    phase_planes(x4.reshape(x4.size).view(np.uint8), xb, np.uint8(np.int32(zx[0]) & 255), n * c,
                 h, w, sh, sw, ph, pw, dh, dw, kh, kw, hq, wq)


@njit(cache=True, error_model='numpy')
def _pack_panel(xb, base, off, kq, p0, nv, fx, o32):
    """o32[q*NR + j] = the 4 bytes xb[base + off[4q + e] + p0 + j] (e = 0..3) ^ fx, j < nv:
    one panel of the packed vector operand, read straight from the (phase) planes (512-bit
    vectors where the CPU has them: half the time of LLVM's 256-bit choice)."""
    wide_vectors()
    s8, s16, s24 = np.uint32(8), np.uint32(16), np.uint32(24)
    for q in range(kq):
        a0 = eptr(xb, base + off[4 * q] + p0)
        a1 = eptr(xb, base + off[4 * q + 1] + p0)
        a2 = eptr(xb, base + off[4 * q + 2] + p0)
        a3 = eptr(xb, base + off[4 * q + 3] + p0)
        d = eptr(o32, q * NR)
        for j in range(nv):
            d[j] = (np.uint32(a0[j]) | (np.uint32(a1[j]) << s8) | (np.uint32(a2[j]) << s16)
                    | (np.uint32(a3[j]) << s24)) ^ fx


@njit(cache=True, error_model='numpy')
def _interleave_row(s0, s1, s2, s3, d, x0, x1, step, fx):
    """d[x] = the bytes s0..s3[x * step] as one little-endian word ^ fx, x0 <= x < x1."""
    wide_vectors()
    s8, s16, s24 = np.uint32(8), np.uint32(16), np.uint32(24)
    if step == 1:
        for x in range(x0, x1):
            d[x] = (np.uint32(s0[x]) | (np.uint32(s1[x]) << s8) | (np.uint32(s2[x]) << s16)
                    | (np.uint32(s3[x]) << s24)) ^ fx
    else:
        for x in range(x0, x1):
            t = x * step
            d[x] = (np.uint32(s0[t]) | (np.uint32(s1[t]) << s8) | (np.uint32(s2[t]) << s16)
                    | (np.uint32(s3[t]) << s24)) ^ fx


@njit(cache=True, error_model='numpy')
def _interleave(x4, zx, fx, xb32, group, sh, sw, ph, pw, dh, dw, kh, kw, hq, wq):
    """xb32[(((b*group + g)*cg4 + c4)*sh*sw + a*sw + e)*hq*wq + y*wq + x] = the bytes of
    channels g*cg + 4*c4 + (0..3) of x4[b, :, y*sh + a - ph, x*sw + e - pw] as one word ^ fx
    (the zero point's byte outside x; a channel past the group's repeats its last one: its
    weights are zero), for the phases the taps use."""
    n, c, h, w = x4.shape
    cg = c // group
    cg4 = (cg + 3) // 4
    xu = x4.reshape(x4.size).view(np.uint8)
    zb = np.uint32(np.int32(zx[0]) & 255)
    zword = (zb | (zb << np.uint32(8)) | (zb << np.uint32(16)) | (zb << np.uint32(24))) ^ fx
    phases = _phases_used(sh, sw, dh, dw, kh, kw)
    pq = hq * wq
    for bg in range(n * group):
        for c4 in range(cg4):
            ch = np.empty(4, np.int64)
            for l in range(4):
                ch[l] = (bg * cg + min(4 * c4 + l, cg - 1)) * h  # (b*C + channel) * h
            for ae in phases:
                a, e = ae // sw, ae % sw
                base = ((bg * cg4 + c4) * sh * sw + ae) * pq
                d = eptr(xb32, base)
                x0, x1 = _col_range(w, wq, sw, pw, e)
                for y in range(hq):
                    r = y * sh + a - ph
                    if _pad_row(d, y * wq, r, h, wq, x0, x1, zword):
                        q = r * w + e - pw
                        _interleave_row(eptr(xu, ch[0] * w + q), eptr(xu, ch[1] * w + q),
                                        eptr(xu, ch[2] * w + q), eptr(xu, ch[3] * w + q),
                                        eptr(xb32, base + y * wq), x0, x1, sw, fx)


@njit(cache=True, error_model='numpy')
def _qconv_task(t, xb, gstride, off, packed, fx, pk, rs, zw, has_zw, zv, y4, wbuf, kk, kq, mg,
                gbytes, ntile, wq, nv_all, npan, mode, bias, has_bias, mult, zy, lo, hi):
    """Task t = (batch, group, panel): every tile of the group's rows (the ones row's tile
    first: its products are the column sums), from a packed panel (``packed``) or the
    interleaved planes in place, then the corrections, the bias and the requantization of a
    tile row (64 values; to bytes in one vector pass for QLinearConv) and its valid columns'
    runs copied into y4."""
    wide_vectors()
    pn = t % npan
    g = (t // npan) % (y4.shape[1] // mg)
    b = t // npan // (y4.shape[1] // mg)
    p0 = pn * NR
    nv = min(NR, nv_all - p0)
    pbytes = kq * NR * 4 if packed else 0
    tile = wbuf[pbytes:pbytes + MR * NR * 4].view(np.int32)
    csum = wbuf[pbytes + MR * NR * 4:pbytes + (MR + 1) * NR * 4].view(np.int32)
    rb = wbuf[pbytes + (MR + 1) * NR * 4:pbytes + (2 * MR + 1) * NR * 4]
    rb32 = rb.view(np.int32)
    base = (b * (y4.shape[1] // mg) + g) * gstride
    if packed:
        o32 = wbuf[:pbytes].view(np.uint32)
        _pack_panel(xb, base, off, kq, p0, nv, fx, o32)
    if mode == 1:  # 8-bit y: its bytes
        y8, y32 = y4.reshape(y4.size).view(np.uint8), rb32
    else:
        y8, y32 = rb, y4.reshape(y4.size).view(np.int32)
    per_m = mult.shape[0] > 1
    ow = y4.shape[3]
    zp = np.float32(zy)
    lz, hz = lo - zp, hi - zp
    r_lo = p0 // wq
    r_hi = (p0 + nv - 1) // wq
    for ti in range(ntile):
        tt = ntile - 1 - ti
        if packed:
            _tile(tile, 0, pk, g * gbytes + tt * kq * MR * 4, o32, 0, kq, False)
        else:
            _tile_off(tile, 0, pk, g * gbytes + tt * kq * MR * 4, xb, base + p0 * 4, off, kq)
        if has_zw and ti == 0:
            r1 = mg - tt * MR
            for j in range(NR):
                csum[j] = tile[r1 * NR + j]
        nr = min(MR, mg - tt * MR)
        for r in range(nr):  # the tile's rows' results, then their runs in y (copying a
            ml = tt * MR + r  # row just stored from unaligned offsets stalled on each)
            m = g * mg + ml
            a = zw[m]
            cst = np.int32(kk * a * zv - zv * rs[g, ml] + (bias[m] if has_bias else 0))
            sc = mult[m if per_m else 0]
            trow = eptr(tile, r * NR)
            q8 = eptr(rb, r * NR)
            q32 = eptr(rb32, r * NR)
            if has_zw and mode == 1:
                for j in range(NR):
                    q8[j] = np.uint8(_q1_small(np.float32(np.int32(trow[j] + cst - a * csum[j]))
                                               * sc, lz, hz, zp) & 255)
            elif mode == 1:
                for j in range(NR):
                    q8[j] = np.uint8(_q1_small(np.float32(np.int32(trow[j] + cst)) * sc, lz, hz,
                                               zp) & 255)
            elif has_zw:
                for j in range(NR):
                    q32[j] = np.int32(trow[j] + cst - a * csum[j])
            else:
                for j in range(NR):
                    q32[j] = np.int32(trow[j] + cst)
        for r in range(nr):
            m = g * mg + tt * MR + r
            for oy in range(r_lo, r_hi + 1):  # the panel's columns in output rows
                u0 = max(p0 - oy * wq, 0)
                u1 = min(p0 + nv - oy * wq, ow)
                yo = ((b * y4.shape[1] + m) * y4.shape[2] + oy) * ow + u0
                if mode == 1:
                    copy_short(y8, yo, rb, r * NR + oy * wq + u0 - p0, u1 - u0)
                else:
                    copy_short(y32, yo, rb32, r * NR + oy * wq + u0 - p0, u1 - u0)


@njit(cache=True, error_model='numpy', parallel=True)
def _qconv_par(nw, ntask, xb, gstride, off, packed, fx, pk, rs, zw, has_zw, zv, y4, wsb, wbytes,
               kk, kq, mg, gbytes, ntile, wq, nv_all, npan, mode, bias, has_bias, mult, zy, lo,
               hi):
    counter = np.zeros(1, np.int64)
    for wk in prange(nw):
        wbuf = wsb[wk * wbytes:(wk + 1) * wbytes]
        t = next_task(counter)
        while t < ntask:
            _qconv_task(t, xb, gstride, off, packed, fx, pk, rs, zw, has_zw, zv, y4, wbuf, kk,
                        kq, mg, gbytes, ntile, wq, nv_all, npan, mode, bias, has_bias, mult, zy,
                        lo, hi)
            t = next_task(counter)


@njit(cache=True, error_model='numpy')
def qconv2d_i8(x4, zx, x_signed, pk, rs, zw, has_zw, kh, kw, y4, ws, sh, sw, ph, pw, dh, dw,
               group, mode, sx, swc, sy, zy, bias, has_bias, lo, hi):
    """ConvInteger (mode 0) / QLinearConv (mode 1) with constant weights prepacked by
    ``prepack_conv_w`` (pk, rs, zw, has_zw) on the integer gemm (the section's note above):
    exact int32 products as onnxruntime's, then its requantization (``qconv2d``'s arguments
    otherwise). x_signed: x is int8 (flipped into uint8, its zero point moved by +128). ws:
    uint8 scratch of ``qconv_i8_scratch`` bytes."""
    if y4.size == 0:
        return
    n, c, h, w = x4.shape
    m_n, oh, ow = y4.shape[1], y4.shape[2], y4.shape[3]
    cg, mg = c // group, m_n // group
    cg4 = (cg + 3) // 4
    kk = cg * kh * kw
    kq = cg4 * kh * kw
    rows = mg + (1 if has_zw else 0)
    ntile = (rows + MR - 1) // MR
    gbytes = ntile * kq * MR * 4
    packed, direct, hq, wq = _conv_geom_nb(h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)
    pq = hq * wq
    fx = np.uint32(0x80808080) if x_signed else np.uint32(0)
    if packed:  # byte planes (or x), offsets per k of a channel's plane
        plane = h * w if direct else sh * sw * pq
        pbytes = 0 if direct else (n * c * plane + 63) // 64 * 64
        if direct:
            xb = x4.reshape(x4.size).view(np.uint8)
        else:
            xb = ws[:n * c * plane]
            _phase_planes(x4, zx, xb, sh, sw, ph, pw, dh, dw, kh, kw, hq, wq)
        gstride = cg * plane
        off = np.zeros(kq * 4, np.int64)
        for k in range(kk):
            off[k] = k * plane
    else:  # interleaved word planes, byte offsets per (4 channels, tap) step
        gstride = cg4 * sh * sw * pq * 4
        pbytes = (n * group * gstride + NR * 4 + 63) // 64 * 64
        xb = ws[:pbytes]
        _interleave(x4, zx, fx, xb.view(np.uint32), group, sh, sw, ph, pw, dh, dw, kh, kw, hq,
                    wq)
        off = np.empty(kq, np.int64)
        for c4 in range(cg4):
            for i in range(kh):
                for j in range(kw):
                    off[(c4 * kh + i) * kw + j] = ((c4 * sh * sw + i * dh % sh * sw + j * dw % sw)
                                                   * pq + i * dh // sh * wq + j * dw // sw) * 4
    zv = np.int32(zx[0]) + (128 if x_signed else 0)
    mult, zz, _, _ = _requant(sx, swc, sy, zy, mode, lo, hi)
    nv_all = (oh - 1) * wq + ow
    npan = (nv_all + NR - 1) // NR
    ntask = n * group * npan
    wbytes = _worker_bytes_nb(cg4, packed)
    wsb = ws[pbytes:]
    nw = min(num_threads(), ntask, wsb.size // wbytes)
    if nw <= 1:
        wbuf = wsb[:wbytes]
        for t in range(ntask):
            _qconv_task(t, xb, gstride, off, packed, fx, pk, rs, zw, has_zw, zv, y4, wbuf, kk,
                        kq, mg, gbytes, ntile, wq, nv_all, npan, mode, bias, has_bias, mult, zz,
                        np.float32(lo), np.float32(hi))
    else:
        _qconv_par(nw, ntask, xb, gstride, off, packed, fx, pk, rs, zw, has_zw, zv, y4, wsb,
                   wbytes, kk, kq, mg, gbytes, ntile, wq, nv_all, npan, mode, bias, has_bias,
                   mult, zz, np.float32(lo), np.float32(hi))
