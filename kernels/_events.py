"""Numba compilations in this process (cache loads excluded), counted from the kernel library's
import on: the compiler's tests and benchmarks read them (``jitort.compile_count()``) to show
that a new input shape or a warm cache compiles nothing, whichever of the compiler or the
library a process imports first."""
from __future__ import annotations

import numba

_count = 0
_registered = False


class _Counter(numba.core.event.Listener):
    def on_start(self, event):
        global _count
        _count += 1

    def on_end(self, event):
        pass


def compiles() -> int:
    return _count


def install() -> None:
    global _registered
    if not _registered:
        numba.core.event.register("numba:compile", _Counter())
        _registered = True
