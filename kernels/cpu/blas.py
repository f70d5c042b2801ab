"""The BLAS behind ``gemm.xgemm``, and its thread count.

Compiled kernels call two C symbols with the CBLAS ``cblas_?gemm`` signature and 64-bit
integers (row-major only)::

    jitort_cblas_sgemm(order, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
    jitort_cblas_dgemm(...)

registered with LLVM by name when this module is imported, so cached kernels link against
whatever this process chose (``BLAS`` names it), in this order of preference:

* ``'mkl'``: Intel MKL's ILP64 ``cblas_?gemm_64`` when the ``mkl`` wheel is installed
  (``pip install jitort[mkl]``) and the CPU is an Intel one, on its sequential threading
  layer. On a Xeon (AVX-512, one thread) it took 0.63-0.95 of OpenBLAS's time on the model
  corpus's shapes (``scripts/compare_blas.py``: the 7x7 stem's row blocks 0.63, 1x1
  convolutions and Winograd's gemms 0.77-0.93, transformer projections and MLPs 0.66-0.95);
  on an AMD EPYC (Zen 3, AVX2) 1.02-2.0 of it (bert/gpt2's MLP up 2.0, 1x1 convolutions
  1.4-1.8), so other vendors get OpenBLAS unless ``JITORT_BLAS=mkl`` asks. Its results did
  not depend on the operands' alignment (16 offsets tried), so calls stay bit-reproducible.
* ``'openblas'``: a private instance of numpy's OpenBLAS when numpy ships one (the wheels'
  ILP64 ``scipy_openblas64_``, a newer build than the one scipy bundles, which Numba's
  ``np.dot`` binds to): a copy loaded on its own with one thread and the CPU's own kernels
  (``_private_openblas`` says why). ``'openblas-shared'``: numpy's instance itself, when the
  copy cannot be made.
* ``'numba'``: a small ``cfunc`` with that signature over Numba's own gemm helper (scipy's
  BLAS).

``JITORT_BLAS=mkl|openblas|openblas-shared|numba`` in the environment forces one (an error
if it is missing); ``CORE`` names the OpenBLAS kernels in use.

jitort's kernels bring their own threads (``prange`` tasks), so that BLAS must run one
thread per caller while they do. MKL is loaded sequential (it never starts threads; it is not
used when the process already runs MKL threaded); the private OpenBLAS never starts any.
numpy's own OpenBLAS ('openblas-shared') is shared with the user's matmuls, so
``single_threaded()`` pins it for the duration of a call (re-entrant, shared by concurrent
callers) and restores the user's setting afterwards; for the others it does nothing.
"""
import ctypes
import glob
import os
import platform
import site
import sys
import threading

import llvmlite.binding as llb
import numpy as np
from llvmlite import ir
from numba import cfunc, types
from numba.core import cgutils
from numba.extending import intrinsic

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
SYMBOLS = {'s': 'jitort_cblas_sgemm', 'd': 'jitort_cblas_dgemm'}


def _numpy_openblas_paths():
    libdir = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), 'numpy.libs')
    return sorted(glob.glob(os.path.join(libdir, 'libscipy_openblas64_*')))


def _openblas_entry_points(lib):
    gemm = {k: getattr(lib, f'scipy_cblas_{k}gemm64_') for k in 'sd'}
    setn = lib.scipy_openblas_set_num_threads64_
    getn = lib.scipy_openblas_get_num_threads64_
    core = lib.scipy_openblas_get_corename64_
    setn.argtypes, setn.restype = [ctypes.c_int], None
    getn.argtypes, getn.restype = [], ctypes.c_int
    core.argtypes, core.restype = [], ctypes.c_char_p
    addrs = {k: ctypes.cast(f, ctypes.c_void_p).value for k, f in gemm.items()}
    return addrs, setn, getn, core().decode(errors='replace')


def _numpy_openblas():
    """(gemm addresses by kind, set_num_threads, get_num_threads, core name) of numpy's
    bundled ILP64 OpenBLAS -- the instance numpy itself uses -- or None when numpy has none
    (another BLAS, or a build linked differently)."""
    for path in _numpy_openblas_paths():
        try:
            return _openblas_entry_points(ctypes.CDLL(path))
        except (OSError, AttributeError):
            continue
    return None


def _cache_dir():
    """jitort's cache directory (``JITORT_CACHE_DIR``, else ``$XDG_CACHE_HOME/jitort``), as
    ``jitort.codegen.module`` picks it (this package never imports jitort)."""
    d = os.environ.get('JITORT_CACHE_DIR')
    if d:
        return d
    return os.path.join(os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'),
                        'jitort')


def _set_environ(values):
    """Set each variable of ``values`` in os.environ; a value of None unsets it."""
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _private_openblas():
    """(gemm addresses by kind, core name) of a second, private instance of numpy's OpenBLAS:
    a copy of the library under the cache directory, loaded by its own path (so the dynamic
    linker maps it anew) with ``OPENBLAS_NUM_THREADS=1`` and the core type below. None when it
    cannot be made (no numpy OpenBLAS, a read-only cache, a loader that refuses it).

    Why a copy: numpy's instance is the user's -- its thread count (which jitort would have
    to pin around every call) and its ``OPENBLAS_CORETYPE`` (read once, when it loads). A
    machine may set ``OPENBLAS_CORETYPE=Haswell`` for numpy (this project's AMD EPYC Zen 5
    does), which runs AVX2 kernels on an AVX-512 CPU, well below what the library's own
    detection (SkylakeX kernels) gives.
    The private instance detects the CPU itself unless ``JITORT_OPENBLAS_CORETYPE`` names a
    core (``inherit``: the process's ``OPENBLAS_CORETYPE``); it never starts threads, so
    nothing needs pinning, and numpy's instance is left exactly as the user set it."""
    import shutil
    import tempfile
    want = os.environ.get('JITORT_OPENBLAS_CORETYPE', '').strip()
    for path in _numpy_openblas_paths():
        try:
            st = os.stat(path)
            d = os.path.join(_cache_dir(), 'blas')
            dst = os.path.join(d, f'{st.st_size}-{int(st.st_mtime)}-{os.path.basename(path)}')
            if not os.path.exists(dst):
                os.makedirs(d, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=d, prefix='.tmp-')
                try:
                    os.close(fd)
                    shutil.copyfile(path, tmp)
                    os.chmod(tmp, 0o755)
                    os.replace(tmp, dst)  # atomic: a concurrent process sees all or nothing
                finally:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
            env = {'OPENBLAS_NUM_THREADS': '1'}
            if want.lower() != 'inherit':
                env['OPENBLAS_CORETYPE'] = want or None  # None: the library detects the CPU
            saved = {k: os.environ.get(k) for k in env}
            try:
                _set_environ(env)
                lib = ctypes.CDLL(dst)  # its constructor reads the variables above
            finally:
                _set_environ(saved)
            addrs, setn, getn, core = _openblas_entry_points(lib)
            setn(1)
            return addrs, core
        except (OSError, AttributeError):
            continue
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


_MKL_SEQUENTIAL = 1  # MKL_THREADING_SEQUENTIAL


def _mkl():
    """gemm addresses by kind of Intel MKL's runtime library (the ``mkl`` wheel puts it in
    ``<prefix>/lib``), switched to its sequential layer; None when there is none, or when this
    process already runs MKL on a threaded layer (it cannot be changed once in use)."""
    paths = []
    for base in (sys.prefix, site.getuserbase()):
        paths += sorted(glob.glob(os.path.join(base, 'lib', 'libmkl_rt.so*')))
    for path in paths + ['libmkl_rt.so.3', 'libmkl_rt.so.2']:
        try:
            lib = ctypes.CDLL(path)
            gemm = {k: getattr(lib, f'cblas_{k}gemm_64') for k in 'sd'}
            layer = lib.MKL_Set_Threading_Layer
        except (OSError, AttributeError):
            continue
        layer.argtypes, layer.restype = [ctypes.c_int], ctypes.c_int
        if layer(_MKL_SEQUENTIAL) != _MKL_SEQUENTIAL:
            return None
        return {k: ctypes.cast(f, ctypes.c_void_p).value for k, f in gemm.items()}
    return None


def cpu_vendor():
    """'intel', 'amd', or '' when unknown: /proc/cpuinfo's vendor_id, else
    ``platform.processor()`` (Windows names the vendor there)."""
    names = {'GenuineIntel': 'intel', 'AuthenticAMD': 'amd'}
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('vendor_id'):
                    return names.get(line.split(':', 1)[1].strip(), '')
    except OSError:
        pass
    proc = platform.processor()
    return next((v for k, v in names.items() if k in proc), '')


def _choose(want, vendor=None):
    """(name, gemm addresses or None, OpenBLAS thread controls or None, core) for
    ``JITORT_BLAS``; with none asked for, MKL only on an Intel CPU (``vendor``, default
    ``cpu_vendor()``), else jitort's private OpenBLAS instance, else numpy's own."""
    if want not in ('', 'mkl', 'openblas', 'openblas-shared', 'numba'):
        raise ValueError(f"JITORT_BLAS={want!r}: expected mkl, openblas, openblas-shared or "
                         "numba")
    if want == 'mkl' or (want == '' and (vendor if vendor is not None
                                         else cpu_vendor()) == 'intel'):
        found = _mkl()
        if found is not None:
            return 'mkl', found, None, ''
        if want:
            raise RuntimeError("JITORT_BLAS=mkl, but no usable MKL (pip install mkl; it must "
                               "not already run threaded in this process)")
    if want in ('', 'openblas'):
        found = _private_openblas()
        if found is not None:
            return 'openblas', found[0], None, found[1]
    if want in ('', 'openblas', 'openblas-shared'):
        found = _numpy_openblas()
        if found is not None:
            return 'openblas-shared', found[0], found[1:3], found[3]
        if want:
            raise RuntimeError(f"JITORT_BLAS={want}, but numpy ships no ILP64 OpenBLAS here")
    return 'numba', None, None, ''


#: which BLAS the kernels' gemm calls: 'mkl', 'openblas' (jitort's private instance of numpy's
#: OpenBLAS), 'openblas-shared' (numpy's own instance, its threads pinned while a model runs)
#: or 'numba' (scipy's, through Numba's helper)
BLAS, _addrs, _threads, CORE = _choose(os.environ.get('JITORT_BLAS', '').strip().lower())
_fallbacks = {}
if _addrs is not None:
    for _k, _addr in _addrs.items():
        llb.add_symbol(SYMBOLS[_k], _addr)
else:
    for _k in 'sd':
        _fallbacks[_k] = _fallback(_k)
        llb.add_symbol(SYMBOLS[_k], _fallbacks[_k].address)


def get_threads():
    """Threads of the kernels' BLAS when it is numpy's OpenBLAS; None otherwise (MKL runs
    sequential, and jitort pins scipy's OpenBLAS to one thread)."""
    return _threads[1]() if _threads is not None else None


def set_threads(n: int) -> None:
    if _threads is not None:
        _threads[0](int(n))


_lock = threading.Lock()
_depth = 0
_saved = None


def pin() -> None:
    """Run the kernels' BLAS one thread until the matching :func:`unpin` (re-entrant, shared
    by concurrent callers: the first one in pins, the last one out restores the setting it
    found, which is what numpy's own matmul uses elsewhere in the program)."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = get_threads()
            if _saved not in (None, 1):
                set_threads(1)
        _depth += 1


def unpin() -> None:
    global _depth
    with _lock:
        _depth -= 1
        if _depth == 0 and _saved not in (None, 1):
            set_threads(_saved)


class single_threaded:
    """``with single_threaded():`` -- :func:`pin` for the block."""

    def __enter__(self):
        pin()
        return self

    def __exit__(self, *exc):
        unpin()
        return False


_calls_blas_memo: dict = {}


def calls_blas(module) -> bool:
    """Whether kernel module ``module`` (a name under ``kernels.cpu``, or the module) can reach
    ``xgemm``: it is ``gemm``/``blas`` itself or uses a function of a module that can.

    Callers skip ``single_threaded()`` (two ctypes calls and a lock per model call) for
    programs that never call the BLAS."""
    import importlib
    import types as _pytypes
    pkg = __name__.rsplit('.', 1)[0]
    if isinstance(module, str):
        module = importlib.import_module(f'{pkg}.{module}')
    name = module.__name__
    if name in _calls_blas_memo:
        return _calls_blas_memo[name]
    _calls_blas_memo[name] = False  # a cycle of imports answers from what the rest finds
    found = name.rsplit('.', 1)[-1] in ('gemm', 'blas')
    if not found:
        deps = set()
        for v in vars(module).values():
            m = v if isinstance(v, _pytypes.ModuleType) else getattr(v, '__module__', None)
            m = m.__name__ if isinstance(m, _pytypes.ModuleType) else m
            if isinstance(m, str) and m.startswith(pkg + '.') and m != name:
                deps.add(m)
        found = any(calls_blas(sys.modules.get(d) or importlib.import_module(d))
                    for d in sorted(deps))
    _calls_blas_memo[name] = found
    return found
