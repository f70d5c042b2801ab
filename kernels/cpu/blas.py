"""The BLAS behind ``gemm.xgemm``, and its thread count.

Compiled kernels call two C symbols with the CBLAS ``cblas_?gemm`` signature and 64-bit
integers (row-major only)::

    jitort_cblas_sgemm(order, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
    jitort_cblas_dgemm(...)

registered with LLVM by name when this module is imported, so cached kernels link against
whatever this process chose:

* numpy's own OpenBLAS when numpy ships one (the wheels' ILP64 ``scipy_openblas64_``). It is a
  newer build than the one scipy bundles (the library Numba's ``np.dot`` binds to), and faster
  on the shapes of models here: at one thread, 65x192 @ 192x768 (vit's MLP) 178 us against
  374 us, an im2col gemm 64x576 @ 576x3136 1.5x, a 1000-class 1x1 convolution 1.6x.
* otherwise (or with ``JITORT_BLAS=numba`` in the environment) a small ``cfunc`` with that
  signature over Numba's own gemm helper (scipy's BLAS).

jitort's kernels bring their own threads (``prange`` tasks), so that BLAS must run one
thread per caller while they do: ``single_threaded()`` pins it for the duration of a call
(re-entrant, shared by concurrent callers) and restores the user's setting afterwards.
"""
import ctypes
import glob
import os
import threading

import llvmlite.binding as llb
import numpy as np
from llvmlite import ir
from numba import cfunc, types
from numba.core import cgutils
from numba.extending import intrinsic

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
SYMBOLS = {'s': 'jitort_cblas_sgemm', 'd': 'jitort_cblas_dgemm'}


def _numpy_openblas():
    """(gemm addresses by kind, set_num_threads, get_num_threads) of numpy's bundled ILP64
    OpenBLAS, or None when numpy has none (another BLAS, or a build linked differently)."""
    libdir = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), 'numpy.libs')
    for path in sorted(glob.glob(os.path.join(libdir, 'libscipy_openblas64_*'))):
        try:
            lib = ctypes.CDLL(path)
            gemm = {k: getattr(lib, f'scipy_cblas_{k}gemm64_') for k in 'sd'}
            setn = lib.scipy_openblas_set_num_threads64_
            getn = lib.scipy_openblas_get_num_threads64_
        except (OSError, AttributeError):
            continue
        setn.argtypes, setn.restype = [ctypes.c_int], None
        getn.argtypes, getn.restype = [], ctypes.c_int
        return {k: ctypes.cast(f, ctypes.c_void_p).value for k, f in gemm.items()}, setn, getn
    return None


@intrinsic
def _numba_gemm(typingctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    """Row-major gemm on raw pointers through Numba's ``numba_xxgemm`` (column-major BLAS)."""
    from numba.np.linalg import ensure_blas, get_blas_kind
    dtype = a.dtype
    sig = types.void(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)

    def codegen(context, builder, sig, args):
        ensure_blas()
        ch = ir.IntType(8)
        vp = ch.as_pointer()
        ip = cgutils.intp_t
        v_ta, v_tb, v_m, v_n, v_k, v_al, v_a, v_lda, v_b, v_ldb, v_be, v_c, v_ldc = args

        def trans(v):
            nz = builder.icmp_signed('==', v, ir.Constant(v.type, TRANS))
            return builder.select(nz, ir.Constant(ch, ord('t')), ir.Constant(ch, ord('n')))

        def slot(v):
            return builder.bitcast(cgutils.alloca_once_value(builder, v), vp)

        def i(v):
            return builder.sext(v, ip) if v.type.width < ip.width else v

        fnty = ir.FunctionType(ir.IntType(32), [ch, ch, ch, ip, ip, ip, vp, vp, ip, vp, ip,
                                                vp, vp, ip])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "numba_xxgemm")
        kind = ir.Constant(ch, ord(get_blas_kind(dtype)))
        # Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
        builder.call(fn, (kind, trans(v_tb), trans(v_ta), i(v_n), i(v_m), i(v_k), slot(v_al),
                          builder.bitcast(v_b, vp), i(v_ldb), builder.bitcast(v_a, vp),
                          i(v_lda), slot(v_be), builder.bitcast(v_c, vp), i(v_ldc)))
        return context.get_dummy_value()
    return sig, codegen


def _fallback(kind):
    """A ``cfunc`` with the ``jitort_cblas_?gemm`` signature over Numba's gemm helper."""
    t = types.float32 if kind == 's' else types.float64
    p = types.CPointer(t)
    i32, i64 = types.int32, types.int64
    sig = types.void(i32, i32, i32, i64, i64, i64, t, p, i64, p, i64, t, p, i64)

    def gemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        _numba_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
    return cfunc(sig, cache=True)(gemm)


# JITORT_BLAS=numba forces the fallback (to compare the two, or to test it)
_found = None if os.environ.get('JITORT_BLAS', '').lower() == 'numba' else _numpy_openblas()
#: True when the kernels' gemm is numpy's OpenBLAS (else scipy's, through Numba)
NUMPY_BLAS = _found is not None
_fallbacks = {}
if NUMPY_BLAS:
    for _k, _addr in _found[0].items():
        llb.add_symbol(SYMBOLS[_k], _addr)
else:
    for _k in 'sd':
        _fallbacks[_k] = _fallback(_k)
        llb.add_symbol(SYMBOLS[_k], _fallbacks[_k].address)


def get_threads():
    """Threads of the kernels' BLAS (None when it is scipy's: jitort pins that one to 1)."""
    return _found[2]() if NUMPY_BLAS else None


def set_threads(n: int) -> None:
    if NUMPY_BLAS:
        _found[1](int(n))


_lock = threading.Lock()
_depth = 0
_saved = None


class single_threaded:
    """``with single_threaded():`` -- the kernels' BLAS runs one thread inside the block.

    Re-entrant and shared: the first caller in pins it, the last one out restores the
    previous setting (what numpy's own matmul uses elsewhere in the program)."""

    def __enter__(self):
        global _depth, _saved
        with _lock:
            if _depth == 0:
                _saved = get_threads()
                if _saved not in (None, 1):
                    set_threads(1)
            _depth += 1
        return self

    def __exit__(self, *exc):
        global _depth
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved not in (None, 1):
                set_threads(_saved)
        return False
