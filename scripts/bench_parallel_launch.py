#!/usr/bin/env python
"""What a Numba parallel region costs to launch, back to back and after a serial gap.

    python scripts/bench_parallel_launch.py [--calls 3000]
    NUMBA_THREADING_LAYER=omp python scripts/bench_parallel_launch.py

A region with one trivial iteration per thread is timed at 1 and 2 threads, first called back
to back, then each call after a serial busy loop of ~4, ~40 and ~400 us (the other kernels of
a model between two parallel ones). A worker that has gone to sleep in the gap must be woken:
on the 2-core Zen 5 VM of issue 21 (2026-11-27) TBB's region cost 1.4 us back to back and
8.7-9.0 us after gaps of 36 us and more, GNU OpenMP's (its workers spin) 1.2-1.3 us after any
gap. Kernels split over threads only where the work pays for that (``conv_nhwc``'s
``_PAR_MIN_DW_TILES`` and the others' thresholds).
"""
import argparse
import time

import numba
import numpy as np
from numba import njit, prange


@njit(parallel=True)
def _region(x, nw):
    for k in prange(nw):
        x[k] += 1.0


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
    print(f"threading layer: {numba.threading_layer()}")
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


if __name__ == "__main__":
    main()
