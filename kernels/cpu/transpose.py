"""Transpose of the last two axes, ``(B, R, C) -> (B, C, R)``, 4-byte elements: NCHW <-> NHWC at
the edges of a channels-last region (``jitort/passes/layout.py``), 2-D transposes.

Element by element, every read (or every write) of a row touches a different cache line: ~3-4x
a memcpy. Here square tiles of one vector's width go through registers: W rows loaded as
vectors, transposed by log2(W) rounds of two-source shuffles (round k swaps the off-diagonal
k x k blocks of every 2k x 2k block), stored as W vectors; the edges element by element.
"""
import llvmlite.binding as llb
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

from .gemm import num_threads
from .qgemm import masked_load, masked_store, splat

_TW = 16 if llb.get_host_cpu_features().get('avx512f') else 8  # float32 lanes per vector


def shuffle_rounds(builder, v, k):
    """The two-source shuffle rounds k, k/2, .., 1 on the 2k vectors v (n lanes each): round k
    swaps the off-diagonal k x k blocks of every 2k x 2k block, so that each group of 2k lanes
    ends transposed across the vectors (k = n/2: the whole square tile)."""
    v = list(v)
    n = v[0].type.count
    i32 = ir.VectorType(ir.IntType(32), n)
    while k >= 1:
        lo = ir.Constant(i32, [j if j & k == 0 else n + j - k for j in range(n)])
        hi = ir.Constant(i32, [j + k if j & k == 0 else n + j for j in range(n)])
        for i in range(len(v)):
            if i & k == 0:
                a, b = v[i], v[i + k]
                v[i] = builder.shuffle_vector(a, b, lo)
                v[i + k] = builder.shuffle_vector(a, b, hi)
        k //= 2
    return v


def _shuffle_t(builder, v):
    """The _TW vectors v (rows of a square tile) transposed in registers: log2(_TW) rounds of
    :func:`shuffle_rounds`."""
    return shuffle_rounds(builder, v, _TW // 2)


@intrinsic
def _tile_t(typingctx, x, xoff, ldx, y, yoff, ldy):
    """y[yoff + j*ldy + i] = x[xoff + i*ldx + j] for i, j < _TW (4-byte elements)."""
    if not (isinstance(x, types.Array) and isinstance(y, types.Array)
            and x.dtype == y.dtype and x.dtype.bitwidth == 32):
        return None
    sig = types.void(x, xoff, ldx, y, yoff, ldy)

    def codegen(context, builder, sig, args):
        tys = sig.args
        i64 = ir.IntType(64)
        vt = ir.VectorType(context.get_value_type(tys[0].dtype), _TW)

        def arg(k):
            return context.cast(builder, args[k], tys[k], types.int64)

        def ptr(k, off):
            data = make_array(tys[k])(context, builder, args[k]).data
            return builder.bitcast(builder.gep(data, [off]), vt.as_pointer())

        def row(base, ld, i):
            return builder.add(base, builder.mul(ld, ir.Constant(i64, i)))
        xoff_, ldx_, yoff_, ldy_ = arg(1), arg(2), arg(4), arg(5)
        v = _shuffle_t(builder, [builder.load(ptr(0, row(xoff_, ldx_, i)), align=4)
                                 for i in range(_TW)])
        for j in range(_TW):
            builder.store(v[j], ptr(3, row(yoff_, ldy_, j)), align=4)
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def _tile_tm(typingctx, x, xoff, ldx, y, yoff, ldy, nr, nc):
    """``_tile_t`` for a partial tile: y[yoff + j*ldy + i] = x[xoff + i*ldx + j] for i < nr,
    j < nc (1..._TW each): only those nr rows of nc elements are loaded (masked) and only
    those nc rows of nr elements stored (masked)."""
    if not (isinstance(x, types.Array) and isinstance(y, types.Array)
            and x.dtype == y.dtype and x.dtype.bitwidth == 32):
        return None
    sig = types.void(x, xoff, ldx, y, yoff, ldy, nr, nc)

    def codegen(context, builder, sig, args):
        tys = sig.args
        i32, i64 = ir.IntType(32), ir.IntType(64)
        vt = ir.VectorType(context.get_value_type(tys[0].dtype), _TW)
        mload, mstore = masked_load(builder, vt), masked_store(builder, vt)

        def arg(k):
            return context.cast(builder, args[k], tys[k], types.int64)

        def ptr(k, off):
            data = make_array(tys[k])(context, builder, args[k]).data
            return builder.bitcast(builder.gep(data, [off]), vt.as_pointer())

        xoff_, ldx_, yoff_, ldy_, nr_, nc_ = arg(1), arg(2), arg(4), arg(5), arg(6), arg(7)
        lane = ir.Constant(ir.VectorType(i64, _TW), list(range(_TW)))
        cmask = builder.icmp_signed('<', lane, splat(builder, nc_, _TW))
        rmask = builder.icmp_signed('<', lane, splat(builder, nr_, _TW))
        zero = ir.Constant(vt, None)

        def clamp(i, n):   # (inside the block, in row i, masked off past n: row 0)
            ok = builder.icmp_signed('<', ir.Constant(i64, i), n)
            return ok, builder.select(ok, ir.Constant(i64, i), ir.Constant(i64, 0))
        v = []
        for i in range(_TW):   # rows past nr: zero, nothing loaded
            ok, ri = clamp(i, nr_)
            m = builder.and_(cmask, splat(builder, ok, _TW))
            v.append(builder.call(mload, [ptr(0, builder.add(xoff_, builder.mul(ldx_, ri))),
                                          ir.Constant(i32, 4), m, zero]))
        v = _shuffle_t(builder, v)
        for j in range(_TW):
            ok, rj = clamp(j, nc_)
            m = builder.and_(rmask, splat(builder, ok, _TW))
            builder.call(mstore, [v[j], ptr(3, builder.add(yoff_, builder.mul(ldy_, rj))),
                                  ir.Constant(i32, 4), m])
        return context.get_dummy_value()
    return sig, codegen


@njit(cache=True, error_model='numpy')
def transpose_block(src, s_off, s_ld, dst, d_off, d_ld, rows, cols):
    """``dst[d_off + j * d_ld + i] = src[s_off + i * s_ld + j]`` for i < rows, j < cols (1-D
    arrays of 4-byte elements): a strided block, e.g. some rows of each plane of an NCHW
    stack to channels-last and back, through the register tiles; the partial tiles at the
    edges through masked ones (element by element, a long strip would cost more than the
    convolution around it)."""
    i0 = 0
    while i0 < rows:
        nr = min(_TW, rows - i0)
        j0 = 0
        if nr == _TW:
            while j0 + _TW <= cols:
                _tile_t(src, s_off + i0 * s_ld + j0, s_ld, dst, d_off + j0 * d_ld + i0, d_ld)
                j0 += _TW
        while j0 < cols:
            _tile_tm(src, s_off + i0 * s_ld + j0, s_ld, dst, d_off + j0 * d_ld + i0, d_ld, nr,
                     min(_TW, cols - j0))
            j0 += _TW
        i0 += _TW


@njit(cache=True, error_model='numpy')
def _transpose_cols(x3, y3, c0, c1):
    """Columns c0..c1 of x (rows c0..c1 of y: one contiguous block of each batch of the
    output) of :func:`transpose_last2`; c0 a multiple of _TW."""
    nb, rr, cc = x3.shape
    x = x3.reshape(x3.size)
    y = y3.reshape(y3.size)
    for b in range(nb):
        xb = b * rr * cc
        transpose_block(x, xb + c0, cc, y, xb + c0 * rr, rr, rr, c1 - c0)


@njit(cache=True, error_model='numpy')
def _check(x3, y3):
    if y3.shape[0] != x3.shape[0] or y3.shape[1] != x3.shape[2] or y3.shape[2] != x3.shape[1]:
        raise ValueError("transpose_last2: shapes do not match")


@njit(cache=True, error_model='numpy')
def transpose_last2(x3, y3):
    """y3 (B, C, R) = x3 (B, R, C) with its last two axes swapped; both C-contiguous, 4-byte
    elements."""
    _check(x3, y3)
    _transpose_cols(x3, y3, np.int64(0), x3.shape[2])


@njit(cache=True, error_model='numpy', parallel=True)
def transpose_last2_par(x3, y3):
    """:func:`transpose_last2` over the threads: column bands of x, so that each worker writes
    one contiguous block of every batch of y (split by tile rows, the two workers' writes
    interleaved in every output row and a 96 x 3136 transpose ran slower than on one thread)."""
    _check(x3, y3)
    cc = x3.shape[2]
    nct = (cc + _TW - 1) // _TW
    nw = min(num_threads(), nct)
    for w in prange(nw):
        _transpose_cols(x3, y3, min(cc, (w * nct // nw) * _TW), min(cc, ((w + 1) * nct // nw) * _TW))

