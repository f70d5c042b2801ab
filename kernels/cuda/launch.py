"""The one place this library starts work on the GPU, so a caller can list a program's work.

Every host-side launcher of ``jitort.kernels.cuda`` (and every generated driver) launches a
kernel through :func:`launch`, and calls a GPU library (cuBLAS through CuPy) through
:func:`call`. Outside :func:`recording` they run at once, on the default stream. Inside, each
is appended to the recording, as a :class:`Launch` or a :class:`LibraryCall`, and nothing
runs: a caller records a plan's work once, then replays the list on its own stream (record by
record, or captured once as a CUDA graph), so the per-call work of the launchers (grids, dtype
lookups, argument lists, array views) and of the driver is paid once per plan, not per call.

A launcher may therefore decide nothing from device data: what it starts must follow from its
arguments' shapes and values alone (every launcher here does).
"""
import threading
from contextlib import contextmanager
from typing import Any, Callable, NamedTuple

_state = threading.local()


class Launch(NamedTuple):
    """``kernel[grid, block](*args)``, recorded."""

    kernel: Any
    grid: Any
    block: Any
    args: tuple

    def run(self, stream) -> None:
        self.kernel[self.grid, self.block, stream](*self.args)


class LibraryCall(NamedTuple):
    """``fn(*args, stream=stream)``, recorded: a library routine enqueued on ``stream``."""

    fn: Callable
    args: tuple

    def run(self, stream) -> None:
        self.fn(*self.args, stream=stream)


def _record(item) -> bool:
    rec = getattr(_state, "rec", None)
    if rec is None:
        return False
    rec.append(item)
    return True


def launch(kernel, grid, block, *args):
    """``kernel[grid, block](*args)``, or its record while a :func:`recording` is open."""
    if not _record(Launch(kernel, grid, block, args)):
        kernel[grid, block](*args)


def call(fn, *args):
    """``fn(*args, stream=0)`` (the default stream), or its record while a :func:`recording`
    is open; ``fn`` enqueues its work on the stream it is given and returns nothing."""
    if not _record(LibraryCall(fn, args)):
        fn(*args, stream=0)


@contextmanager
def recording():
    """Work started by this thread inside the block is listed, in order, as :class:`Launch`
    and :class:`LibraryCall` records, instead of run."""
    outer = getattr(_state, "rec", None)
    _state.rec = work = []
    try:
        yield work
    finally:
        _state.rec = outer
