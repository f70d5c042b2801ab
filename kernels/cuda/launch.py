"""The one place this library launches a kernel, so a caller can list a program's launches.

Every host-side launcher of ``jitort.kernels.cuda`` (and every generated driver) launches
through :func:`launch`. Outside :func:`recording` that is ``kernel[grid, block](*args)``.
Inside, the launch is appended to the recording and nothing runs: a caller records a plan's
launches once, then replays the list on its own stream (as direct launches, or captured once
as a CUDA graph), so the per-call work of the launchers (grids, dtype lookups, argument lists)
and of the driver is paid once per plan instead of once per call.

A launcher may therefore decide nothing from device data: what it launches must follow from
its arguments' shapes and values alone (every launcher here does).
"""
import threading
from contextlib import contextmanager

_state = threading.local()


def launch(kernel, grid, block, *args):
    """``kernel[grid, block](*args)``, or its record while a :func:`recording` is open."""
    rec = getattr(_state, "rec", None)
    if rec is None:
        kernel[grid, block](*args)
    else:
        rec.append((kernel, grid, block, args))


@contextmanager
def recording():
    """Launches made by this thread inside the block are listed, in order, as
    ``(kernel, grid, block, args)``, instead of run."""
    outer = getattr(_state, "rec", None)
    _state.rec = launches = []
    try:
        yield launches
    finally:
        _state.rec = outer
