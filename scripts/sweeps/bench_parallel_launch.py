#!/usr/bin/env python
"""What a Numba parallel region costs to launch, back to back and after a serial gap.

    python scripts/sweeps/bench_parallel_launch.py [--calls 3000]          # jitort's worker pool
    JITORT_THREAD_POOL=0 python scripts/sweeps/bench_parallel_launch.py    # Numba's layer (TBB)
    JITORT_THREAD_POOL=0 NUMBA_THREADING_LAYER=omp python scripts/sweeps/bench_parallel_launch.py

A region with one trivial iteration per thread is timed at 1 and 2 threads, first called back
to back, then each call after a serial busy loop of ~4, ~40 and ~400 us (the other kernels of
a model between two parallel ones). A worker that has gone to sleep in the gap must be woken:
on the 2-core Zen 5 VM of issue 21 (2026-11-27) TBB's region cost 1.4 us back to back and
8.7-9.0 us after gaps of 36 us and more, GNU OpenMP's (its workers spin) 1.2-1.3 us after any
gap. Kernels split over threads only where the work pays for that (``conv_nhwc``'s
``_PAR_MIN_DW_TILES`` and the others' thresholds).

Then the cost that decides small kernels at 2 threads: a region of two equal tasks (claimed as
the kernels claim theirs, ``sync.next_affine``), called back to back from a compiled loop
(no Python between the calls), at 1 and 2 threads, with how often one thread ran both tasks
because the other joined late. On the Zen 5 VM (2026-11-28), TBB: tasks of ~4 us 9.2 us at 2
threads against 9.0 at 1 (a quarter of the calls on one thread), 15 us 23.4 against 30.7,
37 us 46.1 against 74.7, 145 us 155.5 against 289.7 (~8-10 us per region whatever the gap);
GNU OpenMP: 5.4, 16.6, 40.2, 154.6 (the second thread never late). On jitort's pool
(``kernels/cpu/workers.py``, tenth session, same VM): a region 0.6 us back to back or after
gaps up to ~40 us, 8.2 us after 360 us (the worker asleep: woken, not waited for); two tasks
4.5, 15.4, 37.8, 147.3 us at 2 threads (7.4, 28.7, 71.0, 283.6 at 1).
"""
import argparse
import time

import numba
import numpy as np
from numba import njit, prange

from jitort.kernels.cpu import workers
from jitort.kernels.cpu.sync import next_affine


@njit(parallel=True)
def _region(x, nw):
    for k in prange(nw):
        x[k] += 1.0


@njit(parallel=True)
def _two_tasks(who, sink, work):
    flags = np.zeros(2, np.int64)
    for wk in prange(2):
        i = 0
        while True:
            t, i = next_affine(flags, wk, 2, i)
            if t < 0:
                break
            who[t] = numba.get_thread_id()
            sink[t] = _busy(work)


@njit
def _two_task_calls(who, sink, work, n):
    """n back-to-back calls of _two_tasks; how many ran both tasks on one thread."""
    same = 0
    for _ in range(n):
        _two_tasks(who, sink, work)
        if who[0] == who[1]:
            same += 1
    return same


@njit
def _busy(n):
    s = 0.0
    for i in range(n):
        s += np.sqrt(i)
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=3000)
    a = ap.parse_args()
    x = np.zeros(8)
    _region(x, 1)
    _busy(10)
    print(f"threading layer: {numba.threading_layer()}"
          + (" under jitort's worker pool" if workers.installed() else ""))
    for spin in (0, 2000, 20000, 200000):
        t0 = time.perf_counter()
        _busy(spin)
        gap = (time.perf_counter() - t0) * 1e6
        row = []
        for nt in (1, 2):
            numba.set_num_threads(min(nt, numba.config.NUMBA_NUM_THREADS))
            ts = []
            for _ in range(a.calls):
                _busy(spin)
                t = time.perf_counter()
                _region(x, nt)
                ts.append(time.perf_counter() - t)
            row.append(f"{nt} thread(s) {np.median(ts) * 1e6:5.1f} us "
                       f"(p90 {np.percentile(ts, 90) * 1e6:5.1f})")
        print(f"gap {gap:6.1f} us: " + ";  ".join(row), flush=True)
    who, sink = np.zeros(2, np.int64), np.zeros(2)
    calls = max(1, a.calls // 2)
    for work in (2000, 8000, 20000, 80000):
        row = []
        for nt in (1, 2):
            numba.set_num_threads(min(nt, numba.config.NUMBA_NUM_THREADS))
            _two_task_calls(who, sink, work, 10)
            best, same = np.inf, 0
            for _ in range(5):
                t = time.perf_counter()
                s = _two_task_calls(who, sink, work, calls)
                dt = (time.perf_counter() - t) / calls
                if dt < best:
                    best, same = dt, s
            row.append(f"{nt} thread(s) {best * 1e6:6.1f} us"
                       + (f" (both tasks on one thread in {same * 100 // calls}% of calls)"
                          if nt == 2 else ""))
        print(f"two tasks of {work:6d} sqrt each: " + ";  ".join(row), flush=True)


if __name__ == "__main__":
    main()
