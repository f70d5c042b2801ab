"""Where Numba caches the CPU kernels: one directory per kernel module and version of the
sources it depends on, outside the tree.

Numba's default puts a kernel's cache in ``__pycache__`` beside its source file and checks each
file on its own. Two things go wrong with that for this library:

* a cached kernel carries the code of every callee it inlined from *other* modules, and Numba
  only checks the kernel's own file, so editing ``epilogue.py`` left ``conv.py``'s cached
  kernels running the old epilogue;
* a fresh clone or a reinstall in another directory starts from nothing (compiling the library
  takes minutes on two cores), because the cache lives in the tree.

:class:`KernelCacheLocator` (installed ahead of Numba's own locators by ``kernels/__init__``)
puts the kernels of module ``m`` of ``kernels/cpu`` under ``<root>/kernels/<m>-<hash>``, where
the hash covers ``m``, every kernel module it imports (transitively: the code it may inline),
Numba's and Python's versions (:func:`modules_hash`). An edit of ``rnn.py`` starts a new folder
for ``rnn`` alone; an edit of ``gemm.py`` for every module that reaches it; any copy of the same
sources finds the same folders. ``<root>`` is :func:`cache_root`.
``JITORT_KERNEL_CACHE=tree`` restores Numba's placement. When the directory cannot be created
or written, Numba's own locators take over.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import sys
from pathlib import Path

from numba.core import caching

_CPU = Path(__file__).resolve().parent / "cpu"
_IMPORT = re.compile(r"^\s*from \.(\w*) import \(?([\w, ]+)", re.M)


def _cpu(root: Path | None) -> Path:
    return Path(root) / "cpu" if root is not None else _CPU


def _digest(cpu: Path, names) -> str:
    """Hash of Numba's and Python's versions and the sources of the modules ``names`` of ``cpu``."""
    import numba
    from ._link import mode  # how callees are linked: cached objects of both never mix
    h = hashlib.sha256(f"numba {numba.__version__} python {sys.version_info[:2]} {mode()}".encode())
    for n in names:
        h.update(n.encode())
        h.update((cpu / f"{n}.py").read_bytes())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def _installed(names: tuple) -> str:  # the installed library's hashes, once per process
    return _digest(_CPU, names)


def modules(root: Path | None = None) -> list[str]:
    """The CPU kernel modules (``kernels/cpu/*.py``), sorted."""
    return sorted(p.stem for p in _cpu(root).glob("*.py") if p.stem != "__init__")


def closure(names, root: Path | None = None) -> list[str]:
    """The CPU kernel modules ``names`` and every kernel module they import, transitively."""
    cpu = _cpu(root)
    todo, seen = list(names), set()
    while todo:
        n = todo.pop()
        if n in seen or not (cpu / f"{n}.py").exists():
            continue
        seen.add(n)
        for mod, imported in _IMPORT.findall((cpu / f"{n}.py").read_text()):
            todo += [mod] if mod else [x.strip() for x in imported.split(",") if x.strip()]
    return sorted(seen)


def modules_hash(names, root: Path | None = None) -> str:
    """Hash of Numba's and Python's versions and the sources of :func:`closure` of ``names``:
    what code compiled against those kernel modules (calling or inlining them) depends on."""
    if root is None:
        return _installed_closure(tuple(sorted(set(names))))
    return _digest(_cpu(root), closure(names, root))


@functools.lru_cache(maxsize=None)
def _installed_closure(names: tuple) -> str:  # every generated file's header asks: once each
    return _installed(tuple(closure(names)))


def cache_root() -> Path:
    """``$JITORT_KERNEL_CACHE_DIR``, else ``$NUMBA_CACHE_DIR``, else jitort's default cache directory.

    Not ``$JITORT_CACHE_DIR``: that one holds a set of generated programs (a test or a benchmark
    points it at an empty folder to compile a model again), while the kernel library's compiled
    code is the same for all of them; setting ``NUMBA_CACHE_DIR`` still moves every Numba cache.
    """
    for var in ("JITORT_KERNEL_CACHE_DIR", "NUMBA_CACHE_DIR"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache")
    return Path(base) / "jitort"


def folder(module: str, root: Path | None = None) -> str:
    """The name of the folder (under ``<root>/kernels``) of kernel module ``module``'s code."""
    return f"{module}-{modules_hash([module], root)}"


def cache_path(module: str) -> Path:
    """The directory kernel module ``module``'s compiled kernels live in (this environment)."""
    return cache_root() / "kernels" / folder(module)


class KernelCacheLocator(caching._CacheLocator):
    """Numba cache locator for the functions defined in ``kernels/cpu`` (see the module doc)."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._module = Path(py_file).stem
        self._cache_path = str(cache_path(self._module))

    def get_cache_path(self):
        return self._cache_path

    def get_source_stamp(self):
        # the directory is already keyed by the hash of the sources the code depends on
        return modules_hash([self._module])

    def get_disambiguator(self):
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        try:
            if Path(py_file).resolve().parent != _CPU:
                return None
        except OSError:
            return None
        self = cls(py_func, py_file)
        try:
            self.ensure_cache_path()
        except OSError:
            return None
        return self


def install() -> None:
    """Put :class:`KernelCacheLocator` first in Numba's locator list (before any kernel is
    defined; idempotent). Checked against Numba 0.60-0.68 (``_link.CHECKED``): the locator
    list is ``CacheImpl._locator_classes`` throughout (``_CacheImpl`` before Numba 0.56), and
    ``_CacheLocator``'s interface (``ensure_cache_path``, ``get_cache_path``,
    ``get_source_stamp``, ``get_disambiguator``, ``from_function``) is the same throughout."""
    if os.environ.get("JITORT_KERNEL_CACHE", "").lower() == "tree":
        return
    from ._link import check_numba
    check_numba("kernels._cache's locator")
    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # public from numba 0.56
    classes = impl._locator_classes
    if KernelCacheLocator not in classes:
        classes.insert(0, KernelCacheLocator)
