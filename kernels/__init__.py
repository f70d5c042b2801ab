"""Hand-written Numba kernel library (CPU and CUDA).

Shipped as ``jitort.kernels``. It never imports ``jitort``: the compiler calls into it, not the
other way round, so kernels can be tested and benchmarked on their own.
"""
from . import _cache, _link

_cache.install()
_link.install()
