"""Softmax / LogSoftmax over axis 1 of a 3-D view.

x, out: C-contiguous (O, N, I), float32 or float64 (same dtype). The reduction runs over
N; O and I are independent. Numerically stable (the row max is subtracted). A row that is
all -inf (or contains NaN or +inf) produces NaN, like numpy. float32 uses the polynomial
``expneg32`` (vectorized; terms below 2**-126, e.g. a causal mask's, are exactly 0 and never
denormal), float64 uses libm ``exp``. out may alias x.
"""
import math

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

from .gemm import num_threads
from .mathfn import fexpneg, wide_vectors

#: work from which these kernels split over the threads (4x below its value under Numba's
#: TBB layer, as a region's cost fell: kernels/cpu/workers.py)
_PAR_MIN_WORK = 1 << 13


_VEC_BYTES = 64  # a 512-bit vector: 16 float32, 8 float64


@intrinsic
def _row_max_vec(typingctx, x2, r):
    """max of row r (of n >= one vector's elements) of the C-contiguous 2-D float array x2 by
    ``llvm.maxnum`` (NaNs skipped): 512-bit vectors (16 float32 / 8 float64) into four
    accumulators, the last vector ending at the row's end (overlapping the previous: max does
    not mind), then a tree of vector maxnums across the lanes. No scalar loop: LLVM 22's loop
    vectorizer asserted on a scalar maxnum tail loop (a crash, not an error); and not
    ``llvm.vector.reduce.fmax``, which lowers to a serial chain of 15 NaN-checked scalar
    maxes."""
    if not (isinstance(x2, types.Array) and x2.ndim == 2 and x2.layout == 'C'
            and x2.dtype in (types.float32, types.float64) and isinstance(r, types.Integer)):
        return None
    sig = x2.dtype(x2, r)

    def codegen(context, builder, sig, args):
        aty = sig.args[0]
        ary = make_array(aty)(context, builder, args[0])
        n = cgutils.unpack_tuple(builder, ary.shape, 2)[1]
        row = context.cast(builder, args[1], sig.args[1], types.intp)
        base = builder.gep(ary.data, [builder.mul(row, n)])
        lt = context.get_value_type(aty.dtype)
        width = _VEC_BYTES * 8 // aty.dtype.bitwidth
        sfx = 'f32' if aty.dtype == types.float32 else 'f64'

        def vmax(a, b):
            vt = a.type
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vt, [vt, vt]), f'llvm.maxnum.v{vt.count}{sfx}')
            return builder.call(fn, [a, b])

        vt = ir.VectorType(lt, width)

        def vload(off):
            return builder.load(builder.bitcast(builder.gep(base, [off]), vt.as_pointer()),
                                align=4)

        def const(v):
            return ir.Constant(n.type, v)
        nv = builder.udiv(n, const(width))
        last = vload(builder.sub(n, const(width)))
        accs = [cgutils.alloca_once_value(builder, last) for _ in range(4)]
        with cgutils.for_range(builder, builder.udiv(nv, const(4))) as loop:
            b0 = builder.mul(loop.index, const(4 * width))
            for a, acc in enumerate(accs):
                v = vload(builder.add(b0, const(a * width)))
                builder.store(vmax(builder.load(acc), v), acc)
        done = builder.mul(builder.udiv(nv, const(4)), const(4))
        with cgutils.for_range(builder, builder.sub(nv, done)) as loop:
            v = vload(builder.mul(builder.add(done, loop.index), const(width)))
            builder.store(vmax(builder.load(accs[0]), v), accs[0])
        acc = vmax(vmax(builder.load(accs[0]), builder.load(accs[1])),
                   vmax(builder.load(accs[2]), builder.load(accs[3])))
        k = width
        while k > 1:
            k //= 2
            i32 = ir.VectorType(ir.IntType(32), k)
            acc = vmax(builder.shuffle_vector(acc, acc, ir.Constant(i32, list(range(k)))),
                       builder.shuffle_vector(acc, acc, ir.Constant(i32, list(range(k, 2 * k)))))
        return builder.extract_element(acc, ir.Constant(ir.IntType(32), 0))
    return sig, codegen


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def row_max2(x2, r):
    """max of row r of the C-contiguous 2-D x2, NaNs skipped (a row of only NaNs gives NaN
    or -inf: either makes a softmax row NaN), -inf if the row is empty.

    Rows of at least one 512-bit vector: ``_row_max_vec``. Shorter rows: a select per
    element (``m = v if v > m else m``: a NaN never wins). Rows are indexed in the 2-D array,
    not sliced out: a row view costs ~100 ns."""
    n = x2.shape[1]
    if n >= _VEC_BYTES // x2.itemsize:  # one 512-bit vector
        return _row_max_vec(x2, r)
    m = x2.dtype.type(-np.inf)
    for j in range(n):
        v = x2[r, j]
        m = v if v > m else m
    return m


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def row_max(xr):
    """max of the 1-D contiguous xr, NaNs skipped, -inf if empty (see ``row_max2``)."""
    return row_max2(xr.reshape(1, xr.shape[0]), 0)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _softmax_rows(x2, o2, r0, r1, log):
    """Rows [r0, r1) of x2 (R, N) (the I == 1 case): o2 = softmax or log_softmax of each,
    indexed in place (attention rows of 65-128 ran ~1.2-2x faster than one view per row)."""
    wide_vectors()
    n = x2.shape[1]
    t = x2.dtype.type
    for r in range(r0, r1):
        m = row_max2(x2, r)
        s = t(0.0)
        if log:
            for j in range(n):
                d = x2[r, j] - m
                o2[r, j] = d
                s += fexpneg(d)
            ls = math.log(s)
            for j in range(n):
                o2[r, j] -= ls
        else:
            for j in range(n):
                e = fexpneg(x2[r, j] - m)
                o2[r, j] = e
                s += e
            inv = t(1.0) / s
            for j in range(n):
                o2[r, j] *= inv


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _softmax_block(xb, ob, m, s, log):
    """xb, ob (N, I): softmax over N for every i; m, s (I,) scratch of the dtype."""
    n, ni = xb.shape
    for i in range(ni):
        m[i] = -np.inf
        s[i] = 0
    for j in range(n):
        xr = xb[j]
        for i in range(ni):
            v = xr[i]
            m[i] = v if v > m[i] else m[i]
    for j in range(n):
        xr = xb[j]
        orow = ob[j]
        if log:
            for i in range(ni):
                d = xr[i] - m[i]
                orow[i] = d
                s[i] += fexpneg(d)
        else:
            for i in range(ni):
                e = fexpneg(xr[i] - m[i])
                orow[i] = e
                s[i] += e
    if log:
        for i in range(ni):
            s[i] = math.log(s[i])
        for j in range(n):
            orow = ob[j]
            for i in range(ni):
                orow[i] -= s[i]
    else:
        one = xb.dtype.type(1.0)
        for i in range(ni):
            s[i] = one / s[i]
        for j in range(n):
            orow = ob[j]
            for i in range(ni):
                orow[i] *= s[i]


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _softmax_planes(x, out, log, o0, o1):
    """Planes [o0, o1) of x, out (O, N, I): the rows (I == 1) or each (N, I) block."""
    o_n, n, ni = x.shape
    if ni == 1:
        _softmax_rows(x.reshape(o_n, n), out.reshape(o_n, n), o0, o1, log)
        return
    m = np.empty(ni, x.dtype)
    s = np.empty(ni, x.dtype)
    for o in range(o0, o1):
        _softmax_block(x[o], out[o], m, s, log)


@njit(cache=True, parallel=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _softmax_par(x, out, log):
    o_n = x.shape[0]
    nw = min(num_threads(), o_n)
    for w in prange(nw):
        _softmax_planes(x, out, log, w * o_n // nw, (w + 1) * o_n // nw)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _softmax_any(x, out, log):
    o_n, n, ni = x.shape
    if num_threads() > 1 and o_n * n * ni >= _PAR_MIN_WORK and o_n > 1:
        _softmax_par(x, out, log)
    else:
        _softmax_planes(x, out, log, np.int64(0), o_n)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def softmax3d(x, out):
    """out = exp(x - max) / sum(exp(x - max)) over axis 1 of x (O, N, I)."""
    _softmax_any(x, out, False)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def logsoftmax3d(x, out):
    """out = x - max - log(sum(exp(x - max))) over axis 1 of x (O, N, I)."""
    _softmax_any(x, out, True)
