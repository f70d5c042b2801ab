"""CPU kernels (Numba njit).

Importing any kernel module launches Numba's threading layer. Numba only does that
itself when it compiles or loads a ``parallel=True`` dispatcher; a cached non-parallel
kernel that merely *calls* one (e.g. conv2d_bias_act -> _im2col_par) is loaded without it,
and its first prange then segfaults (reproduced with numba 0.68: compile conv2d in one
process, conv2d_bias_act in a second, call it big in a third).
"""
import numba as _numba

_numba.get_num_threads()

from . import workers as _workers  # noqa: E402

# Numba's parallel regions on jitort's spinning pool (``workers``; JITORT_THREAD_POOL=0: not)
_workers.install()
