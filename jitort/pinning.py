"""Thread counts and BLAS pinning around a model call, in one place.

jitort parallelizes its kernels itself (Numba's threads, or jitort's worker pool), so any BLAS
they reach must run one thread while they do: two thread pools on the same cores spin against
each other. Three settings are involved:

* Numba's thread count, per calling thread: a model compiled with ``threads=n`` sets it for the
  call and gives the caller back the value it had (:class:`pinned`).
* The BLAS the kernels call (``kernels.cpu.blas``): pinned to one thread while a model runs
  when its program reaches it (:class:`pinned` with ``blas=True``); re-entrant and shared by
  concurrent callers, the last one out restores the setting.
* numpy's own OpenBLAS during interpreter-tier calls (:data:`interpreter_blas`): the compile
  processes hold the other cores, and OpenBLAS threads waiting for a busy core slow the
  interpreted call severalfold.

scipy's OpenBLAS, which Numba's ``np.dot`` binds to, is pinned once per process
(:func:`configure_blas`), and only where the kernels' gemm goes through it (``kernels.cpu.blas``
found neither MKL nor numpy's OpenBLAS). Numba's own check for that BLAS, when its CPU target
first loads code, need not import the ``scipy.linalg`` package either
(:func:`load_numba_registries`).
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import logging
import os
import sys
import threading

log = logging.getLogger("jitort")


def _numba_thread_fns():
    """(get, set) of the calling thread's Numba thread count: the threading layer's own C entry
    points once it is launched (a fraction of the cost of ``numba.set_num_threads``, which
    re-checks the launch under a lock); the public functions if this Numba lacks them."""
    import numba
    numba.get_num_threads()  # launches the threading layer
    try:
        from numba.np.ufunc import parallel as _p
        get, set_ = _p._get_num_threads, _p._set_num_threads
        get()
        return get, set_
    except Exception:  # pragma: no cover - a Numba without them
        return numba.get_num_threads, numba.set_num_threads


def _nt_get() -> int:  # replaces itself (and _nt_set) with the real entry points on first use
    global _nt_get, _nt_set
    _nt_get, _nt_set = _numba_thread_fns()
    return _nt_get()


def _nt_set(n: int) -> None:
    global _nt_get, _nt_set
    _nt_get, _nt_set = _numba_thread_fns()
    _nt_set(n)


def check_threads(n) -> int:
    """A model's ``threads`` option: a positive int, capped at Numba's thread count."""
    import numba
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"threads must be a positive int, got {n!r}")
    return min(n, numba.config.NUMBA_NUM_THREADS)


_kernel_blas = None


def _kernel_blas_module():
    """``jitort.kernels.cpu.blas``, imported on the first pinned call (it loads the BLAS)."""
    global _kernel_blas
    if _kernel_blas is None:
        from .kernels.cpu import blas
        _kernel_blas = blas
        configure_blas()
    return _kernel_blas


class pinned:
    """``with pinned(threads, blas):`` -- the calling thread runs ``threads`` Numba threads
    (None: unchanged) and, with ``blas``, the kernels' BLAS one thread, for the block; both are
    restored on the way out, also when the block raises."""

    __slots__ = ("threads", "blas", "prev")

    def __init__(self, threads: int | None, blas: bool):
        self.threads = threads
        self.blas = blas
        self.prev = None

    def __enter__(self):
        if self.threads is not None:
            prev = _nt_get()
            if prev != self.threads:
                _nt_set(self.threads)
                self.prev = prev
        if self.blas:
            _kernel_blas_module().pin()
        return self

    def __exit__(self, *exc) -> bool:
        if self.blas:
            _kernel_blas.unpin()
        if self.prev is not None:
            _nt_set(self.prev)
        return False


class _SharedPin:
    """One thread for a BLAS given by its (set, get) thread-count functions, held while any
    caller is inside; the last one out restores what the first one in found."""

    def __init__(self, find):
        self._find = find  # () -> (set, get) or None when that BLAS is not there
        self._fns = None
        self._lock = threading.Lock()
        self._depth = 0
        self._saved = None

    def _functions(self):
        if self._fns is None:
            try:
                self._fns = self._find() or ()
            except Exception:  # pragma: no cover - another BLAS: leave it alone
                self._fns = ()
        return self._fns

    def __enter__(self):
        fns = self._functions()
        if fns:
            with self._lock:
                if self._depth == 0:
                    self._saved = fns[1]()
                    if self._saved != 1:
                        fns[0](1)
                self._depth += 1
        return self

    def __exit__(self, *exc) -> bool:
        fns = self._functions()
        if fns:
            with self._lock:
                self._depth -= 1
                if self._depth == 0 and self._saved not in (None, 1):
                    fns[0](self._saved)
        return False


def _numpy_openblas_threads():
    from .kernels.cpu.blas import _numpy_openblas
    found = _numpy_openblas()
    return (found[1], found[2]) if found else None


#: ``with interpreter_blas:`` -- numpy's own OpenBLAS one thread (interpreter-tier calls)
interpreter_blas = _SharedPin(_numpy_openblas_threads)

_blas_configured = False


def configure_blas() -> None:
    """Pin the BLAS that Numba's ``np.dot`` calls (scipy's OpenBLAS) to one thread, once, where
    the kernels' ``xgemm`` calls it (``kernels.cpu.blas.BLAS == 'numba'``).

    MKL, which ``xgemm`` prefers when installed, runs sequential; numpy's own OpenBLAS, which it
    calls otherwise where numpy ships one, is pinned only while a model runs (:class:`pinned`);
    elsewhere it keeps the user's setting. With either, no kernel reaches scipy's BLAS, and
    scipy (~0.1 s to import) is left unloaded. Until the kernels' BLAS module is loaded (by a
    lowering, or the first call of a program that reaches the BLAS, which calls this again)
    nothing is decided.
    """
    global _blas_configured
    blas = sys.modules.get("jitort.kernels.cpu.blas")
    if _blas_configured or blas is None:
        return
    _blas_configured = True
    if blas.BLAS != "numba":
        return
    try:
        import scipy.linalg.cython_blas  # noqa: F401  (loads the library Numba binds to)
        from threadpoolctl import ThreadpoolController
        for lib in ThreadpoolController().lib_controllers:
            if lib.user_api == "blas" and "numpy" not in lib.filepath:
                lib.set_num_threads(1)
    except Exception as e:  # pragma: no cover - best effort, never fatal
        log.warning("could not pin BLAS threads: %s", e)


_CYTHON_BLAS = "scipy.linalg.cython_blas"


def load_numba_registries() -> None:
    """Load Numba's array registries (``numba.np.arraymath``, which its CPU target loads before
    its first compiled or cached function runs) without importing the ``scipy.linalg`` package.

    Numba checks there that a BLAS exists with ``import scipy.linalg.cython_blas``, which
    imports all of ``scipy.linalg`` (LAPACK wrappers and their Python modules, ~0.2 s on a
    2-vCPU Xeon) when only the extension module matters. For the check, that extension is
    loaded alone and stands in for the submodule; it leaves ``sys.modules`` afterwards, so a
    later ``import scipy.linalg.cython_blas`` (Numba compiling an ``np.dot``, or the user's
    code) imports the package as usual and reuses the loaded extension. Does nothing where the
    registries or ``scipy.linalg`` are loaded already; where the extension cannot be found or
    loaded, Numba's import runs as it would have.
    """
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return
    stand_in = _CYTHON_BLAS not in sys.modules and _load_cython_blas()
    try:
        import numba.np.arraymath  # noqa: F401  (runs Numba's check against the stand-in)
    finally:
        if stand_in:
            sys.modules.pop(_CYTHON_BLAS, None)


def _load_cython_blas() -> bool:
    """Put scipy's ``cython_blas`` extension, loaded alone, in ``sys.modules``; False where it
    cannot be found or loaded (an unusual scipy, or none)."""
    path = _cython_blas_file()
    if path is None:
        return False
    try:
        spec = importlib.util.spec_from_file_location(_CYTHON_BLAS, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception:  # Numba's own import then loads the package
        return False
    sys.modules[_CYTHON_BLAS] = module
    return True


def _cython_blas_file() -> str | None:
    """The file of scipy's ``cython_blas`` extension; None where scipy has none."""
    try:
        scipy_spec = importlib.util.find_spec("scipy")
    except (ImportError, ValueError):
        return None
    if scipy_spec is None or not scipy_spec.submodule_search_locations:
        return None
    for root in scipy_spec.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(root, "linalg", "cython_blas" + suffix)
            if os.path.exists(path):
                return path
    return None
