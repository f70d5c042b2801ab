"""Synchronisation between the workers of one ``prange`` region.

Kernels whose work has phases (every chunk of one phase must be done before the next reads
its results: the steps of a recurrent layer, Winograd's input transform before its products)
run the phases inside one parallel region instead of one region each: workers claim chunks of
a phase from a shared counter (``gemm.claim``), count the chunks they finished
(``gemm.count_done``), and :func:`wait_count` until the phase is complete. A region launch
costs a few microseconds; a wait on a counter, when the phase is balanced, well under one.
"""
from numba import njit

from .gemm import claim, read_count, yield_cpu


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


@njit(inline='always')
def claim_below(counter, i, n):
    """The next of the n chunks of slot i claimed from ``counter`` (``claim``), or -1 once
    all are claimed: a worker's loop over a phase's chunks."""
    j = claim(counter, i)
    return j if j < n else -1


@njit(cache=True, error_model='numpy')
def _affine_order(wk, nw, ntask, i):
    """The i-th task that worker wk of nw tries: its own share of the tasks (the wk-th of nw
    contiguous ranges) in order, then the other workers' shares, each from its end."""
    lo = wk * ntask // nw
    own = (wk + 1) * ntask // nw - lo
    if i < own:
        return lo + i
    i -= own
    for d in range(1, nw):
        o = (wk + d) % nw
        lo2 = o * ntask // nw
        hi2 = (o + 1) * ntask // nw
        if i < hi2 - lo2:
            return hi2 - 1 - i
        i -= hi2 - lo2
    return -1


@njit(cache=True, error_model='numpy')
def next_affine(flags, wk, nw, i):
    """Worker wk's next task and cursor, ``(task, i)``, task -1 when none is left: tasks are
    claimed in ``flags`` (one zeroed int64 per task), each worker first in its own share.

    A shared counter hands the tasks out in the order the workers arrive, which differs from
    call to call: a tensor written by one core in one call is then written or read by the
    other in the next, and its cache lines move between the cores' L2 (enough to lose the
    second thread's gain on small layers). Here
    worker wk (the prange index, which TBB keeps on one thread from call to call) takes the
    same tasks each call unless the other is late, and then the other takes them from the far
    end of the share."""
    ntask = flags.shape[0]
    while True:
        t = _affine_order(wk, nw, ntask, i)
        if t < 0:
            return -1, i
        i += 1
        if claim(flags, t) == 0:
            return t, i
