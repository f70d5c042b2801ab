"""Synchronisation between the workers of one ``prange`` region.

Kernels whose work has phases (every chunk of one phase must be done before the next reads
its results: the steps of a recurrent layer, Winograd's input transform before its products)
run the phases inside one parallel region instead of one region each: workers claim chunks of
a phase from a shared counter (``gemm.claim``), count the chunks they finished
(``gemm.count_done``), and :func:`wait_count` until the phase is complete. A region launch
costs a few microseconds; a wait on a counter, when the phase is balanced, well under one.
"""
from numba import njit

from .gemm import read_count, yield_cpu


@njit(cache=True, error_model='numpy')
def wait_count(done, i, n):
    """Spin until ``done[i]`` reaches n (acquire: what the counting threads wrote before they
    counted is visible). After ~2000 spins (a few microseconds) each spin yields the core: the
    thread waited for is not running (more runnable threads than cores), let it."""
    spins = 0
    while read_count(done, i) < n:
        spins += 1
        if spins > 2000:
            yield_cpu()
