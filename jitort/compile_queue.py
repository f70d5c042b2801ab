"""One process-wide queue for background compiles, bounded in compile processes.

Every tiered model's background compile (:mod:`jitort.tiering`) is a job of :data:`QUEUE`. At
most :func:`compile_jobs` compile processes are alive per process, whatever the number of
models: a test suite, a notebook loop or a server loading a model zoo compiles them one share
at a time while the models answer on the interpreter tier. Jobs start in the order they were
submitted. A job may use several processes (a share of its driver functions each); it is given
``min(wanted, free)`` slots when nobody waits behind it, one when others do, so that many small
models progress side by side.

A job's owner is held weakly while it waits: a model garbage-collected before its turn is
skipped (nothing compiles for a model nobody holds). At interpreter exit the queue closes:
waiting jobs are dropped and no new process starts (processes already started finish filling
the cache). In a forked child the queue starts empty; jobs inherited from the parent are
dropped, their models staying on the interpreter tier.

The owner protocol (see :class:`jitort.tiering.Tiering`): ``compile_now(lease)`` runs in a
worker thread and starts at most ``lease.slots`` processes, every one of which has exited when
it returns or raises; ``compiled(error)`` follows once the slots are free again (``error`` is
what ``compile_now`` raised, or None); ``dropped(reason)`` is called instead of both when the
job will not run (``forked=True`` in a forked child: locks the owner holds may be held by
threads that do not exist there).
"""
from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections import deque

from . import options
from .errors import InvalidOption

#: environment variable: compile processes alive at most per process
ENV_JOBS = "JITORT_COMPILE_JOBS"

#: an environment variable jitort reads has a value it cannot use (the name it had here first)
InvalidSetting = InvalidOption


def compile_jobs() -> int:
    """The bound: ``JITORT_COMPILE_JOBS``, else the CPUs this process may use (at most 4:
    each process also loads the model and Numba)."""
    return options.read("compile_jobs")


class Lease:
    """What a running job may do: start ``slots`` processes while :meth:`open` holds."""

    __slots__ = ("slots", "_queue")

    def __init__(self, slots: int, queue: "CompileQueue"):
        self.slots = slots
        self._queue = queue

    def open(self) -> bool:
        """False once the queue closed (interpreter exit): start no further process."""
        return not self._queue.closed


class CompileQueue:
    """See the module docstring. Counters for reports and tests: ``peak`` (most slots held
    at once), ``started`` (jobs run), ``collected`` (jobs skipped, their owner gone)."""

    def __init__(self):
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._waiting: deque = deque()  # (weakref to owner, slots wanted)
        self._running = 0               # slots held by running jobs
        self._active: weakref.WeakSet = weakref.WeakSet()  # owners of running jobs
        self._limit = 1                 # compile_jobs() as read at the latest submit
        self.closed = False
        self.peak = self.started = self.collected = 0

    def submit(self, owner, want: int = 1) -> None:
        """Queue ``owner``'s compile, wanting ``want`` processes (the bound is read from the
        environment now: a bad ``JITORT_COMPILE_JOBS`` raises here, before anything queued)."""
        limit = compile_jobs()
        with self._lock:
            self._limit = limit
            closed = self.closed
            if not closed:
                self._waiting.append((weakref.ref(owner), max(1, int(want))))
                self._pump()
        if closed:
            owner.dropped("the process is exiting")

    def waiting(self) -> int:
        """Jobs waiting for their turn whose owner is alive."""
        return sum(1 for ref, _ in list(self._waiting) if ref() is not None)

    def running(self) -> int:
        """Slots held by running jobs (an upper bound of their live processes)."""
        return self._running

    def _pump(self) -> None:
        """Start waiting jobs while slots are free (caller holds the lock)."""
        limit = self._limit
        while self._waiting and self._running < limit and not self.closed:
            ref, want = self._waiting.popleft()
            owner = ref()
            if owner is None:
                self.collected += 1
                continue
            free = limit - self._running
            slots = 1 if self._waiting else min(want, free)
            self._running += slots
            self.peak = max(self.peak, self._running)
            self.started += 1
            self._active.add(owner)
            threading.Thread(target=self._run, args=(owner, Lease(slots, self)),
                             name="jitort-compile", daemon=True).start()

    def _run(self, owner, lease: Lease) -> None:
        error = None
        try:
            owner.compile_now(lease)
        except BaseException as e:  # noqa: BLE001 - handed to the owner
            error = e
        finally:
            with self._lock:
                self._running -= lease.slots
                self._active.discard(owner)
                self._pump()
        owner.compiled(error)

    def close(self) -> None:
        """Drop the waiting jobs and start nothing more (interpreter exit)."""
        with self._lock:
            self.closed = True
            self._waiting.clear()

    def _after_fork_in_child(self) -> None:
        inherited = [r() for r, _ in self._waiting] + list(self._active)
        self._reset()
        for owner in inherited:
            if owner is not None:
                owner.dropped("the process was forked while the model waited for or ran its "
                              "background compile", forked=True)


#: the process-wide queue
QUEUE = CompileQueue()

atexit.register(QUEUE.close)
os.register_at_fork(after_in_child=QUEUE._after_fork_in_child)
