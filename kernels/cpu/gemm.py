"""Matrix multiplication kernels (MatMul, Gemm, MatMul + bias + activation).

All arrays are C-contiguous float32 or float64 (one dtype per call). The heavy lifting is
BLAS gemm (MKL when installed, else numpy's OpenBLAS where numpy ships one; see ``blas``), called through ``xgemm``,
an intrinsic over a row-major CBLAS gemm that exposes leading dimensions, alpha and beta, so
that a row or column block of a matrix can be multiplied in place.

jitort runs that BLAS on one thread while a model runs (``blas.single_threaded``, used by
``jitort.runtime``): these kernels provide the parallelism themselves. A problem of at least ``_PAR_MIN_FLOPS`` is cut into
independent tasks (whole batches, or row / column blocks of each batch), a multiple of the
thread count, and one ``prange`` runs them (``_mm_par``); the fused epilogues (bias +
activation, Gemm's alpha / C) run inside each task while its block is in cache. Smaller
problems take the same task code serially.

Activation codes are those of ``epilogue`` (0 none, 1 relu, 2 gelu, 3 sigmoid, 4 tanh,
5 leaky_relu(alpha_act), 6 clip(alpha_act, beta_act)).
"""
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic, overload
from numba.np.arrayobj import make_array
from numba.np.linalg import get_blas_kind

from . import blas, tunables
from .sgemm import NR as _PNR, sgemm_packed, sgemm_ptr
from .ptr import eptr  # noqa: F401  (re-exported: the kernels import it from here)
from .nthreads import num_threads  # noqa: F401  (re-exported, as eptr)

from .epilogue import (ACT_CLIP, ACT_GELU, ACT_LEAKY_RELU, ACT_NONE, ACT_RELU,  # noqa: F401
                       ACT_SIGMOID, ACT_TANH, act_row)

# 2*M*N*K above which a matmul is split over threads (a prange launch costs ~3 us; 1 MFLOP
# is ~20 us of single-threaded sgemm).
_PAR_MIN_FLOPS = 1 << 20
# Output elements per block of the fused epilogue (1 MB of float32, stays in L2). Smaller
# blocks cost more than they save: every row block repacks all of B inside BLAS.
_EPI_BLOCK_ELEMS = 1 << 18
_EPI_MIN_ROWS = 64
_EPI_MIN_COLS = 256
# Minimum rows / columns of a block when a single matrix is split over threads.
_MIN_SPLIT_ROWS = 8
_MIN_SPLIT_COLS = 32
# A one-row block (an FC layer at batch 1) of at least this many multiply-adds is a
# matrix-vector product streaming B once (``_gemv_block``): BLAS gemm packs all of B first,
# and B (the weights) is the whole cost there.
_GEMV_MIN = 1 << 14
_GEMV_COLS = 8192  # output columns per pass when B is (K, N): 32 KB of float32

# A product whose B is not a constant (activations @ activations) runs on jitort's gemm
# packing B per call (``ogemm``) when B is untransposed and the block has 32-256 rows and
# K * N >= 48K: ``scripts/sweeps/sweep_sgemm.py`` at one thread (Zen 5) put it at 0.53-0.99 of
# OpenBLAS's time there (geomean ~0.9), at 1.2-2.0 with fewer rows or a smaller B (the packing
# is then most of the work), and at 1.0-1.09 from 512 rows
_OWN_MIN_ROWS = 32
_OWN_MAX_ROWS = 256
_OWN_MIN_KN = 48 * 1024


@njit(inline='always')
def _own_per_call(rows, k, n):
    """Whether a per-call float32 product (B untransposed) runs on jitort's gemm: the
    calibrated decision of its shape bucket (``tunables``, written by ``jitort.tuning``'s
    ``gemm.activations``), else the rule above."""
    f = tunables.read(tunables.GEMM_OWN + tunables.gemm_bucket(rows, k, n))
    if f < 0:
        return _OWN_MIN_ROWS <= rows <= _OWN_MAX_ROWS and k * n >= _OWN_MIN_KN
    return f == 1

_FM = {'reassoc', 'contract', 'arcp'}

_ll_void_p = ir.IntType(8).as_pointer()



def scratch_workers(threads=None) -> int:
    """The workers a kernel's scratch is sized for (plain Python, used by the ``*_scratch_elems``
    functions): ``threads`` capped at Numba's pool size (NUMBA_NUM_THREADS), all of the pool
    when None, at least one."""
    from numba import config
    n = config.NUMBA_NUM_THREADS
    return max(1, n if threads is None else min(threads, n))

@intrinsic
def xgemm(typingctx, ta, tb, m, n, k, alpha, a, aoff, lda, b, boff, ldb, beta, c, coff, ldc):
    """Row-major BLAS gemm on raw blocks; returns 0 (CBLAS reports no status: the callers
    pass valid sizes).

    C (m, n) = alpha * op(A) @ op(B) + beta * C, where A starts at element ``aoff`` of the
    array ``a`` (any layout; only its data pointer is used) with leading dimension ``lda``
    (elements between rows as stored), likewise B and C. op(A) is A (m, k) when ``ta`` is 0,
    else A stored as (k, m) and transposed; same for ``tb``. m, n, k must be >= 1 and the
    leading dimensions >= the stored row lengths. ``alpha``/``beta`` are cast to the dtype.
    """
    for arr in (a, b, c):
        if not isinstance(arr, types.Array):
            return None
    dtype = c.dtype
    if a.dtype != dtype or b.dtype != dtype:
        return None
    sig = types.int32(ta, tb, m, n, k, alpha, a, aoff, lda, b, boff, ldb, beta, c, coff, ldc)

    def codegen(context, builder, sig, args):
        tys = sig.args
        (v_ta, v_tb, v_m, v_n, v_k, v_al, v_a, v_aoff, v_lda, v_b, v_boff, v_ldb, v_be, v_c,
         v_coff, v_ldc) = args
        i32 = ir.IntType(32)
        i64 = ir.IntType(64)
        ll_t = context.get_value_type(dtype)

        def i(k, v):
            return context.cast(builder, v, tys[k], types.int64)

        def ptr(k, arr, off):
            data = make_array(tys[k])(context, builder, arr).data
            return builder.bitcast(builder.gep(data, [context.cast(builder, off, tys[k + 1],
                                                                   types.intp)]), _ll_void_p)

        def trans(k, v):
            return builder.select(context.is_true(builder, tys[k], v),
                                  ir.Constant(i32, blas.TRANS), ir.Constant(i32, blas.NO_TRANS))

        def scalar(k, v):
            return context.cast(builder, v, tys[k], dtype)

        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64, i64, i64, ll_t, _ll_void_p,
                                               i64, _ll_void_p, i64, ll_t, _ll_void_p, i64])
        fn = cgutils.get_or_insert_function(builder.module, fnty,
                                            blas.SYMBOLS[get_blas_kind(dtype)])
        builder.call(fn, (ir.Constant(i32, blas.ROW_MAJOR), trans(0, v_ta), trans(1, v_tb),
                          i(2, v_m), i(3, v_n), i(4, v_k), scalar(5, v_al),
                          ptr(6, v_a, v_aoff), i(8, v_lda), ptr(9, v_b, v_boff), i(11, v_ldb),
                          scalar(12, v_be), ptr(13, v_c, v_coff), i(15, v_ldc)))
        return ir.Constant(i32, 0)

    return sig, codegen




@intrinsic
def next_task(typingctx, counter):
    """Atomically ``counter[0] += 1``; returns the old value (int64 1-D array).

    Dynamic scheduling for prange workers: Numba's OpenMP layer splits a prange statically
    (``set_parallel_chunksize`` does not change that), so when one thread is descheduled on
    a busy machine the other idles at the barrier. Workers that pull task numbers from a
    shared counter finish together instead."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64):
        return None
    sig = types.int64(counter)

    def codegen(context, builder, sig, args):
        data = make_array(sig.args[0])(context, builder, args[0]).data
        return builder.atomic_rmw('add', data, ir.Constant(ir.IntType(64), 1), 'monotonic')
    return sig, codegen


@njit(inline='always')
def pull_tasks(counter, ntask, task, args):
    """A ``prange`` worker's loop: ``task(t, *args)`` for every t < ntask it claims from the
    shared ``counter`` (:func:`next_task`). Inlined: ``task`` is a plain call in the worker's
    code (a jitted function passed to a compiled function as a value makes it uncachable)."""
    t = next_task(counter)
    while t < ntask:
        task(t, *args)
        t = next_task(counter)


@intrinsic
def yield_cpu(typingctx):
    """``sched_yield()``: a worker waiting on another gives up its core, so a machine with more
    runnable threads than cores runs the one it waits for (libc's symbol, resolved in the
    process like ``get_num_threads``, keeps the caller cacheable)."""
    sig = types.int32()

    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []),
                                            "sched_yield")
        return builder.call(fn, [])
    return sig, codegen


def _counter_op(name, doc, op):
    """An intrinsic ``name(counter, i)`` on the int64 ``counter[i]``: ``op(builder, ptr)``."""
    def fn(typingctx, counter, i):
        if not (isinstance(counter, types.Array) and counter.dtype == types.int64
                and isinstance(i, types.Integer)):
            return None
        sig = types.int64(counter, i)

        def codegen(context, builder, sig, args):
            data = make_array(sig.args[0])(context, builder, args[0]).data
            return op(builder, builder.gep(data, [context.cast(builder, args[1], sig.args[1],
                                                                types.intp)]))
        return sig, codegen
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return intrinsic(fn)


_ONE = ir.Constant(ir.IntType(64), 1)
claim = _counter_op(
    "claim", "Atomically ``counter[i] += 1``; returns the old value (a task number of step i).",
    lambda b, p: b.atomic_rmw('add', p, _ONE, 'monotonic'))
count_done = _counter_op(
    "count_done", "Atomically ``counter[i] += 1`` with release order: what this thread wrote "
    "before is visible to a thread that then reads the new count with :func:`read_count`.",
    lambda b, p: b.atomic_rmw('add', p, _ONE, 'release'))
read_count = _counter_op(
    "read_count", "``counter[i]`` read atomically with acquire order (a spin loop on it is not "
    "hoisted).", lambda b, p: b.load_atomic(p, 'acquire', 8))


# --- task decomposition ----------------------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath=_FM)
def _ceil_div(a, b):
    return (a + b - 1) // b


@njit(inline='always')
def task_split(t, n, group):
    """Task t = (image * group + g) * n + blk: (image, g, blk)."""
    ng = t // n
    img = ng // group
    return img, ng - img * group, t - ng * n


@njit(cache=True, error_model='numpy', fastmath=_FM)
def valid_range(off, stride, size, n):
    """[lo, hi) of the indices i in [0, n) with 0 <= i * stride + off < size (lo <= hi): the
    output positions a kernel tap reaches (convolution), the input positions that land inside
    the output (transposed convolution)."""
    lo = 0 if off >= 0 else (-off + stride - 1) // stride
    last = size - 1 - off
    hi = 0 if last < 0 else last // stride + 1
    hi = min(hi, n)
    lo = min(lo, n)
    return lo, max(lo, hi)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _gcd(a, b):
    while b:
        a, b = b, a % b
    return a


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _plan(bo, m, n, k, nth, epi, align):
    """(nrb, rbs, ncb, cbs): row / column blocks per batch and their sizes.

    Serial (nth <= 1 or below the FLOP threshold): whole batches, except that a fused
    epilogue (``epi``) works on row blocks of ~_EPI_BLOCK_ELEMS. Parallel: each batch is cut
    into ``parts`` blocks so that bo * parts is a multiple of nth (rows when there are enough,
    else columns). Column blocks are multiples of ``align`` columns (prepacked B's panels).
    """
    flops = 2 * bo * m * n * k
    nrb = 1
    ncb = 1
    if nth > 1 and flops >= _PAR_MIN_FLOPS:
        parts = nth // _gcd(bo, nth)
        if bo >= 4 * nth:
            parts = 1
        if parts > 1:
            # Row blocks each pack all of B (K x N), column blocks all of A (M x K): split
            # the dimension whose duplicated packing is smaller, if blocks stay big enough.
            rows_ok = m >= parts * _MIN_SPLIT_ROWS
            cols_ok = n >= parts * _MIN_SPLIT_COLS
            if rows_ok and (m >= n or not cols_ok):
                nrb = parts
            elif cols_ok:
                ncb = parts
            else:
                nrb = min(parts, m)
    rbs = _ceil_div(m, nrb)
    cbs = _ceil_div(n, ncb)
    if epi and rbs * cbs > _EPI_BLOCK_ELEMS:
        if cbs > rbs:
            # wide: column blocks, each repacking only A's rows (row blocks would each
            # repack all of B, K x N: vit's 197 x 3072 MLP ran at half speed that way)
            cmax = max(_EPI_MIN_COLS, _EPI_BLOCK_ELEMS // max(1, rbs))
            if cbs > cmax:
                ncb *= _ceil_div(cbs, cmax)
                cbs = _ceil_div(n, ncb)
        else:
            rmax = max(_EPI_MIN_ROWS, _EPI_BLOCK_ELEMS // max(1, cbs))
            if rbs > rmax:
                nrb *= _ceil_div(rbs, rmax)
                rbs = _ceil_div(m, nrb)
    cbs = _ceil_div(cbs, align) * align
    nrb = _ceil_div(m, rbs)
    ncb = _ceil_div(n, cbs)
    return nrb, rbs, ncb, cbs


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _gemv_block(a, b, out, i, ia, ib, r, c0, c1, ta, tb, alpha, accumulate):
    """out[i, r, c0:c1] = alpha * op(a[ia])[r, :] @ op(b[ib])[:, c0:c1] (+ its old value
    when ``accumulate``): one output row, reading each element of B once, in order."""
    k = a.shape[1] if ta else a.shape[2]
    t_ = out.dtype.type
    al = t_(alpha)
    row = out[i, r]
    ai = a[ia]
    x = np.empty(k, out.dtype)  # a's row (a column of a[ia] when ta)
    for kk in range(k):
        x[kk] = ai[kk, r] if ta else ai[r, kk]
    bi = b[ib]
    if tb:  # B is (N, K): a dot product with each of its rows, four rows at a time
        j = c0
        while j + 4 <= c1:
            b0 = bi[j]
            b1 = bi[j + 1]
            b2 = bi[j + 2]
            b3 = bi[j + 3]
            s0 = s1 = s2 = s3 = t_(0)
            for kk in range(k):
                xk = x[kk]
                s0 += xk * b0[kk]
                s1 += xk * b1[kk]
                s2 += xk * b2[kk]
                s3 += xk * b3[kk]
            if accumulate:
                row[j] += al * s0
                row[j + 1] += al * s1
                row[j + 2] += al * s2
                row[j + 3] += al * s3
            else:
                row[j] = al * s0
                row[j + 1] = al * s1
                row[j + 2] = al * s2
                row[j + 3] = al * s3
            j += 4
        for j in range(j, c1):
            bj = bi[j]
            s = t_(0)
            for kk in range(k):
                s += x[kk] * bj[kk]
            row[j] = al * s + row[j] if accumulate else al * s
    else:  # B is (K, N): its rows scaled and summed into the output row, by column blocks
        # that stay in L1, four rows of B per pass over the block
        if not accumulate:
            seg = row[c0:c1]  # from 0: row[c0 + j] kept the wraparound (scatters)
            for j in range(c1 - c0):
                seg[j] = 0
        for j0 in range(c0, c1, _GEMV_COLS):
            j1 = min(c1, j0 + _GEMV_COLS)
            acc = row[j0:j1]
            kk = 0
            while kk + 4 <= k:
                x0 = al * x[kk]
                x1 = al * x[kk + 1]
                x2 = al * x[kk + 2]
                x3 = al * x[kk + 3]
                b0 = bi[kk, j0:j1]
                b1 = bi[kk + 1, j0:j1]
                b2 = bi[kk + 2, j0:j1]
                b3 = bi[kk + 3, j0:j1]
                for j in range(j1 - j0):
                    acc[j] += x0 * b0[j] + x1 * b1[j] + x2 * b2[j] + x3 * b3[j]
                kk += 4
            for kk in range(kk, k):
                xk = al * x[kk]
                bk = bi[kk, j0:j1]
                for j in range(j1 - j0):
                    acc[j] += xk * bk[j]


def ogemm(ta, tb, m, n, k, alpha, a, aoff, lda, b, boff, ldb, beta, c, coff, ldc):
    """``xgemm``'s contract on jitort's own gemm (``sgemm.sgemm_ptr``: B packed per call)
    for float32, the BLAS for other dtypes. For callers whose products it measured faster
    than the vendor's (``scripts/sweeps/sweep_sgemm.py``, ``scripts/op_scaling.py``): attention's
    per-head blocks, conv2d's im2col row blocks, ``_mm_task``'s 32-256-row products; with
    few rows or a small B the per-call packing is most of the work and the BLAS wins."""
    raise NotImplementedError


@overload(ogemm)
def _ogemm_impl(ta, tb, m, n, k, alpha, a, aoff, lda, b, boff, ldb, beta, c, coff, ldc):
    if all(isinstance(x, types.Array) and x.dtype == types.float32 for x in (a, b, c)):
        def impl(ta, tb, m, n, k, alpha, a, aoff, lda, b, boff, ldb, beta, c, coff, ldc):
            sgemm_ptr(ta != 0, tb != 0, m, n, k, alpha, eptr(a, aoff), lda, eptr(b, boff), ldb,
                      beta, eptr(c, coff), ldc)
            return np.int32(0)
    else:
        def impl(ta, tb, m, n, k, alpha, a, aoff, lda, b, boff, ldb, beta, c, coff, ldc):
            return xgemm(ta, tb, m, n, k, alpha, a, aoff, lda, b, boff, ldb, beta, c, coff, ldc)
    return impl


@njit(inline='always')
def pgemm(ta, tb, m, n, k, alpha, a, aoff, lda, b, boff, ldb, beta, c, coff, ldc):
    """``xgemm``'s contract for a product computed per call: on jitort's gemm (``ogemm``)
    where ``_own_per_call`` says so for its shape (B untransposed; calibrated per machine),
    else on the BLAS. Returns 0."""
    if tb == 0 and _own_per_call(m, k, n):
        return ogemm(ta, tb, m, n, k, alpha, a, aoff, lda, b, boff, ldb, beta, c, coff, ldc)
    return xgemm(ta, tb, m, n, k, alpha, a, aoff, lda, b, boff, ldb, beta, c, coff, ldc)


def _packed_block(m, n, k, alpha, a, aoff, ars, aks, bp, p0, beta, c, coff, ldc):
    """``sgemm.sgemm_packed`` for float32 operands; a no-op for others (prepacked weights
    exist only for float32: see ``_mm_run``)."""
    raise NotImplementedError


@overload(_packed_block)
def _packed_block_impl(m, n, k, alpha, a, aoff, ars, aks, bp, p0, beta, c, coff, ldc):
    if a.dtype == types.float32 and c.dtype == types.float32:
        def impl(m, n, k, alpha, a, aoff, ars, aks, bp, p0, beta, c, coff, ldc):
            sgemm_packed(m, n, k, alpha, a, aoff, ars, aks, bp, p0, beta, c, coff, ldc)
    else:
        def impl(m, n, k, alpha, a, aoff, ars, aks, bp, p0, beta, c, coff, ldc):
            pass
    return impl


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _mm_task(t, a, b, bp, out, bias, c2, ta, tb, alpha, beta, mode, act, aa, ab,
             nrb, rbs, ncb, cbs):
    """One block of out[i, r0:r1, c0:c1] (see ``_mm_run``)."""
    bo, m, n = out.shape
    k = a.shape[1] if ta else a.shape[2]
    per = nrb * ncb
    i = t // per
    rem = t - i * per
    rb = rem // ncb
    cb = rem - rb * ncb
    r0 = rb * rbs
    r1 = min(m, r0 + rbs)
    c0 = cb * cbs
    c1 = min(n, c0 + cbs)
    if r1 <= r0 or c1 <= c0:
        return
    ia = 0 if a.shape[0] == 1 else i
    ib = 0 if b.shape[0] == 1 else i
    t_ = out.dtype.type
    blas_beta = 0.0
    if mode == 2:
        # Gemm: prefill with beta * C (broadcast), then accumulate alpha * A @ B into it.
        # Rows are sliced at c0 and indexed from 0: an index c0 + j (c0 from the task number)
        # keeps Numba's negative-index wraparound, and the loop became gathers / scatters.
        mc, nc = c2.shape
        if beta != 0.0:
            be = t_(beta)
            blas_beta = 1.0
            for r in range(r0, r1):
                row = out[i, r, c0:c1]
                rc = 0 if mc == 1 else r
                if nc == 1:
                    cv = be * c2[rc, 0]
                    for j in range(c1 - c0):
                        row[j] = cv
                else:
                    crow = c2[rc, c0:c1]
                    for j in range(c1 - c0):
                        row[j] = be * crow[j]
    if k == 0:
        if blas_beta == 0.0:
            for r in range(r0, r1):
                row = out[i, r, c0:c1]
                for j in range(c1 - c0):
                    row[j] = 0
    elif bp.shape[0] > 0:
        lda = a.shape[2]
        aoff = ia * a.shape[1] * lda + (r0 if ta else r0 * lda)
        _packed_block(r1 - r0, c1 - c0, k, alpha, a, aoff, 1 if ta else lda, lda if ta else 1,
                      bp, c0 // _PNR, blas_beta, out, (i * m + r0) * n + c0, n)
    elif r1 - r0 == 1 and (c1 - c0) * k >= _GEMV_MIN:
        _gemv_block(a, b, out, i, ia, ib, r0, c0, c1, ta, tb, alpha, blas_beta != 0.0)
    else:
        lda = a.shape[2]
        ldb = b.shape[2]
        aoff = ia * a.shape[1] * lda + (r0 if ta else r0 * lda)
        boff = ib * b.shape[1] * ldb + (c0 * ldb if tb else c0)
        coff = (i * m + r0) * n + c0
        if tb == 0 and _own_per_call(r1 - r0, k, c1 - c0):
            st = ogemm(ta, tb, r1 - r0, c1 - c0, k, alpha, a, aoff, lda, b, boff, ldb,
                       blas_beta, out, coff, n)
        else:
            st = xgemm(ta, tb, r1 - r0, c1 - c0, k, alpha, a, aoff, lda, b, boff, ldb,
                       blas_beta, out, coff, n)
        if st != 0:
            raise RuntimeError("BLAS gemm failed")
    if mode == 1:
        has_bias = bias.shape[0] > 0
        for r in range(r0, r1):
            row = out[i, r][c0:c1]
            if has_bias:
                bs = bias[c0:c1]
                for j in range(c1 - c0):
                    row[j] += bs[j]
            if act != ACT_NONE:
                act_row(row, act, aa, ab)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _mm_par(nw, a, b, bp, out, bias, c2, ta, tb, alpha, beta, mode, act, aa, ab, nrb, rbs,
            ncb, cbs):
    """nw workers pull the tasks of ``_mm_task`` from a shared counter (``next_task``)."""
    ntask = out.shape[0] * nrb * ncb
    counter = np.zeros(1, np.int64)
    for wk in prange(nw):
        t = next_task(counter)
        while t < ntask:
            _mm_task(t, a, b, bp, out, bias, c2, ta, tb, alpha, beta, mode, act, aa, ab,
                     nrb, rbs, ncb, cbs)
            t = next_task(counter)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _mm_run(a, b, out, bias, c2, ta, tb, alpha, beta, mode, act, aa, ab, bp):
    """out[i] (M, N) = epilogue(alpha * op(a[i or 0]) @ op(b[i or 0])).

    a (Ba, M, K) or (Ba, K, M) if ta; b (Bb, K, N) or (Bb, N, K) if tb; out (Bo, M, N);
    Ba, Bb in {1, Bo}. mode 0: plain; 1: + bias (length N or 0), activation ``act``(aa, ab);
    2: Gemm, + beta * c2 (broadcast (1|M, 1|N)) when beta != 0. All ints are int64, all
    scalars float64 (one compiled specialization per dtype). ``bp``: float32 B (K, N)
    prepacked by ``sgemm.pack_b`` (then b is only a (1, K, N)-shaped placeholder, Bb == 1,
    tb ignored, and the dtype float32), or an empty float32 array.
    """
    bo, m, n = out.shape
    if bo == 0 or m == 0 or n == 0:
        return
    k = a.shape[1] if ta else a.shape[2]
    nth = num_threads()
    epi = mode == 1 and (bias.shape[0] > 0 or act != ACT_NONE)
    nrb, rbs, ncb, cbs = _plan(bo, m, n, k, nth, epi, _PNR if bp.shape[0] > 0 else 1)
    ntask = bo * nrb * ncb
    if nth > 1 and ntask > 1 and 2 * bo * m * n * k >= _PAR_MIN_FLOPS:
        _mm_par(min(nth, ntask), a, b, bp, out, bias, c2, ta, tb, alpha, beta, mode, act, aa,
                ab, nrb, rbs, ncb, cbs)
    else:
        for t in range(ntask):
            _mm_task(t, a, b, bp, out, bias, c2, ta, tb, alpha, beta, mode, act, aa, ab,
                     nrb, rbs, ncb, cbs)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _as3(a, b, out):
    """Collapse a (Bo, M, K) @ b (1, K, N) into one (1, Bo*M, K) @ (1, K, N) problem."""
    bo, m, n = out.shape
    if bo > 1 and b.shape[0] == 1 and a.shape[0] == bo:
        k = a.shape[2]
        return a.reshape(1, bo * m, k), out.reshape(1, bo * m, n)
    return a, out


@njit(cache=True, error_model='numpy', fastmath=_FM)
def matmul3d(a, b, out):
    """Batched matmul: out[i] = a[i or 0] @ b[i or 0].

    a (Ba, M, K), b (Bb, K, N), out (Bo, M, N) with Ba in {1, Bo} and Bb in {1, Bo}.
    When Ba == Bo and Bb == 1 a single (Bo*M, K) @ (K, N) GEMM is issued.
    """
    a3, o3 = _as3(a, b, out)
    z1 = np.zeros(0, out.dtype)
    z2 = np.zeros((1, 1), out.dtype)
    i0 = np.int64(0)
    _mm_run(a3, b, o3, z1, z2, i0, i0, np.float64(1.0), np.float64(0.0), i0, i0,
            np.float64(0.0), np.float64(0.0), np.zeros(0, np.float32))


@njit(cache=True, error_model='numpy', fastmath=_FM)
def matmul3d_bias_act(a, b, bias, out, act, alpha_act, beta_act):
    """out[i] = act(a[i or 0] @ b[i or 0] + bias).

    Shapes as ``matmul3d``; ``bias`` is 1-D (N,) or length 0 for no bias. ``act`` is an
    activation code (module docstring); ``alpha_act``/``beta_act`` are its float params
    (leaky slope; clip min/max), ignored by other codes.
    """
    a3, o3 = _as3(a, b, out)
    z2 = np.zeros((1, 1), out.dtype)
    i0 = np.int64(0)
    _mm_run(a3, b, o3, bias, z2, i0, i0, np.float64(1.0), np.float64(0.0), np.int64(1),
            np.int64(act), np.float64(alpha_act), np.float64(beta_act), np.zeros(0, np.float32))


@njit(cache=True, error_model='numpy', fastmath=_FM)
def gemm(a, b, c, out, alpha, beta, trans_a, trans_b, has_c):
    """ONNX Gemm: out (M, N) = alpha * op(a) @ op(b) + beta * c.

    a is (M, K), or (K, M) when trans_a; b is (K, N), or (N, K) when trans_b.
    c is 2-D (Mc, Nc) with Mc in {1, M}, Nc in {1, N} (broadcast); ignored unless has_c
    (pass a (1, 1) dummy then). alpha, beta are floats; trans_a, trans_b, has_c bools/ints.
    """
    m, n = out.shape
    t = out.dtype.type
    # round through the dtype as the old np.dot + scale path did
    al = np.float64(t(alpha))
    be = np.float64(t(beta)) if has_c else np.float64(0.0)
    z1 = np.zeros(0, out.dtype)
    _mm_run(a.reshape(1, a.shape[0], a.shape[1]), b.reshape(1, b.shape[0], b.shape[1]),
            out.reshape(1, m, n), z1, c, np.int64(1 if trans_a else 0),
            np.int64(1 if trans_b else 0), al, be, np.int64(2), np.int64(0),
            np.float64(0.0), np.float64(0.0), np.zeros(0, np.float32))


@njit(cache=True, error_model='numpy', fastmath=_FM)
def matmul_packed(a, bp, bias, out, act, alpha_act, beta_act):
    """out (1, M, N) = act(a (1, M, K) @ B + bias) for float32 with a constant B (K, N)
    prepacked by ``sgemm.pack_b`` into ``bp`` at compile time; bias (N,) or length 0; act codes
    as ``matmul3d_bias_act`` (mode 0 when there is neither bias nor activation)."""
    code = np.int64(act)  # (converted once: a literal act compiles no copy per value)
    z2 = np.zeros((1, 1), out.dtype)
    i0 = np.int64(0)
    epi = bias.shape[0] > 0 or code != ACT_NONE
    _mm_run(a, np.zeros((1, 1, 1), out.dtype), out, bias, z2, i0, i0, np.float64(1.0),
            np.float64(0.0), np.int64(1 if epi else 0), code, np.float64(alpha_act),
            np.float64(beta_act), bp)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def gemm_packed(a, bp, c, out, alpha, beta, trans_a, has_c):
    """ONNX Gemm (``gemm``) for float32 with op(B) (K, N) constant, prepacked by
    ``sgemm.pack_b`` into ``bp`` at compile time (whatever its transB)."""
    ta = bool(trans_a)  # (converted once: literal flags compile no copy per value)
    hc = bool(has_c)
    m, n = out.shape
    t = out.dtype.type
    al = np.float64(t(alpha))
    be = np.float64(t(beta)) if hc else np.float64(0.0)
    z1 = np.zeros(0, out.dtype)
    a3 = a.reshape(1, a.shape[0], a.shape[1])
    _mm_run(a3, np.zeros((1, 1, 1), out.dtype), out.reshape(1, m, n), z1, c,
            np.int64(1 if ta else 0), np.int64(0), al, be, np.int64(2), np.int64(0),
            np.float64(0.0), np.float64(0.0), bp)
