"""Hand-written Numba kernel library (CPU and CUDA).

Shipped as ``jitort.kernels``. It never imports ``jitort``: the compiler calls into it, not the
other way round, so kernels can be tested and benchmarked on their own.

Importing the package runs :func:`install`, the library's one entry point for what it changes
in Numba process-wide (before any kernel module is defined or loaded). ``kernels.cpu`` adds its
thread pool when it is imported (``cpu/workers.py``: it needs Numba's threading layer first).
"""
from . import _cache, _events, _link

_installed = False


def install() -> None:
    """Install the kernel library's Numba patches, once per process (later calls do nothing):
    the kernel cache locator (``_cache.install``: kernels cached per module and source hash,
    outside the tree) and the linking, naming and code-generation patches
    (``_link.install``). Each names the Numba versions it was checked against and warns
    outside them (``_link.CHECKED``)."""
    global _installed
    if _installed:
        return
    _events.install()
    _cache.install()
    _link.install()
    _installed = True


install()
