"""The spinning worker pool under Numba's prange regions (kernels.cpu.workers)."""
import os
import subprocess
import sys
import threading

import numba
import numpy as np
import pytest
from numba import njit, prange

from jitort.kernels.cpu import workers

pytestmark = pytest.mark.skipif(not workers.installed(),
                                reason="the pool is off here (JITORT_THREAD_POOL=0, not Linux, "
                                       "or one thread)")


@njit(parallel=True)
def _thread_ids(n):
    o = np.full(n, -1, np.int64)
    for i in prange(n):
        o[i] = numba.get_thread_id()
    return o


@njit(parallel=True)
def _slow_ids(a, n):
    """Thread ids of n iterations that each sum all of a (long enough for a woken worker)."""
    o = np.full(n, -1, np.int64)
    acc = np.zeros(n)
    for i in prange(n):
        o[i] = numba.get_thread_id()
        s = 0.0
        for j in range(a.shape[0]):
            s += a[j]
        acc[i] = s
    return o, acc


@njit(parallel=True)
def _sum(a):
    s = 0.0
    for i in prange(a.shape[0]):
        s += a[i]
    return s


@njit(parallel=True)
def _axpy(a, b, out):
    for i in prange(a.shape[0]):
        out[i] = 2.0 * a[i] + b[i]


@njit(parallel=True)
def _nested(a, out):
    for i in prange(a.shape[0]):
        out[i] = _sum(a[i])


def _spin_work(n):
    x = np.arange(n, dtype=np.float64)
    return x, np.ones(n), np.empty(n)


def test_regions_run_on_the_pool():
    st = workers.state()
    before = st[workers.EPOCH] >> 8
    seen = set()
    for _ in range(500):
        ids = _thread_ids(64)
        assert ids.min() >= 0
        assert ids.max() < numba.get_num_threads()
        seen.update(ids.tolist())
    assert (st[workers.EPOCH] >> 8) - before >= 500  # each region was a job of the pool
    a = np.ones(300_000)
    for _ in range(20):  # regions long enough for a busy machine's worker to join
        ids, acc = _slow_ids(a, 8)
        assert (acc == a.size).all()
        seen.update(ids.tolist())
    assert max(seen) >= 1
    assert st[workers.STARTED] == st[workers.NWORKERS] == numba.config.NUMBA_NUM_THREADS - 1


def test_reductions_are_exact_every_call():
    rng = np.random.default_rng(0)
    a = rng.integers(-1000, 1000, 100_003).astype(np.float64)  # exact in float64
    want = a.sum()
    got = [_sum(a) for _ in range(2000)]
    assert all(g == want for g in got)


def test_one_thread_runs_inline():
    n = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        st = workers.state()
        before = st[workers.EPOCH]
        assert (_thread_ids(16) == 0).all()
        assert st[workers.EPOCH] == before  # no job published
    finally:
        numba.set_num_threads(n)


def test_nested_regions_run_on_their_thread():
    a = np.arange(40 * 1000, dtype=np.float64).reshape(40, 1000)
    out = np.empty(40)
    for _ in range(50):
        _nested(a, out)
        np.testing.assert_array_equal(out, a.sum(axis=1))


def test_more_schedule_entries_than_chunk_flags():
    old = numba.get_parallel_chunksize()
    numba.set_parallel_chunksize(1)  # one schedule entry per iteration: 1000 > MAX_CHUNKS
    try:
        x, b, out = _spin_work(1000)
        for _ in range(50):
            _axpy(x, b, out)
            np.testing.assert_array_equal(out, 2 * x + b)
    finally:
        numba.set_parallel_chunksize(old)


def test_concurrent_callers():
    """Regions from several Python threads at once: one owns the pool, the others run alone."""
    errors = []
    rng = np.random.default_rng(1)
    arrays = [rng.integers(-50, 50, 20_000 + k).astype(np.float64) for k in range(6)]

    def caller(k):
        a = arrays[k]
        x, b, out = _spin_work(5000 + k)
        for _ in range(300):
            if _sum(a) != a.sum():
                errors.append(k)
            _axpy(x, b, out)
            if not np.array_equal(out, 2 * x + b):
                errors.append(-k)

    ts = [threading.Thread(target=caller, args=(k,)) for k in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert workers.state()[workers.BUSY] == 0


def test_workers_sleep_and_wake():
    import time
    x, b, out = _spin_work(100_000)
    st = workers.state()
    _axpy(x, b, out)
    deadline = time.time() + 5
    while st[workers.PARKED] < st[workers.NWORKERS] and time.time() < deadline:
        time.sleep(0.01)  # past the spin window (JITORT_SPIN_US)
    assert st[workers.PARKED] == st[workers.NWORKERS]
    seen = set()
    a = np.ones(1_000_000)
    for _ in range(5):
        time.sleep(0.002)  # asleep again
        ids, acc = _slow_ids(a, 8)
        assert (acc == a.size).all()
        seen.update(ids.tolist())
    assert max(seen) >= 1  # woken workers took chunks again


_CHILD = r"""
import os, sys
sys.path.append(sys.argv[1])
from jitort.kernels.cpu import workers
from tests.kernels.test_workers import _thread_ids as ids

ids(8)
pid = os.fork()
if pid == 0:
    st = workers.state()
    import time
    t = time.time()
    while st[workers.STARTED] < st[workers.NWORKERS] and time.time() - t < 5:
        time.sleep(0.01)
    seen = set()
    for _ in range(3000):
        seen.update(ids(64).tolist())
    os._exit(0 if st[workers.STARTED] >= 1 and max(seen) >= 1 and min(seen) == 0 else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


def test_forked_child_gets_a_fresh_pool():
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-c", _CHILD, repo], capture_output=True, text=True,
                       timeout=300, cwd="/")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "child 0" in r.stdout, r.stdout + r.stderr[-2000:]


def test_off_switch_keeps_numbas_layer():
    code = ("from jitort.kernels.cpu import workers; import numpy as np, numba\n"
            "from numba import njit, prange\n"
            "@njit(parallel=True)\n"
            "def f(a):\n"
            "    s = 0.0\n"
            "    for i in prange(a.shape[0]):\n"
            "        s += a[i]\n"
            "    return s\n"
            "a = np.arange(1000.0)\n"
            "print(workers.installed(), f(a) == a.sum())\n")
    env = dict(os.environ, JITORT_THREAD_POOL="0")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, env=env, cwd="/")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["False", "True"]


def test_worker_placement(monkeypatch):
    """Workers are bound to CPUs of their own only when the pool and the caller are exactly
    the process's CPUs (auto), always (1) or never (0); worker k takes the k-th allowed CPU."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {4, 6, 9})
    monkeypatch.setenv("JITORT_PIN_WORKERS", "auto")
    assert workers.placement(2) == {1: 6, 2: 9}
    assert workers.placement(1) == {}            # 2 threads on 3 CPUs: shared, unbound
    assert workers.placement(0) == {}
    monkeypatch.setenv("JITORT_PIN_WORKERS", "1")
    assert workers.placement(1) == {1: 6}
    assert workers.placement(4) == {1: 6, 2: 9, 3: 4, 4: 6}
    monkeypatch.setenv("JITORT_PIN_WORKERS", "0")
    assert workers.placement(2) == {}


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux affinity API")
def test_started_workers_are_bound_where_placed():
    if not workers.installed() or workers.state()[workers.NWORKERS] == 0:
        pytest.skip("jitort's pool is not running in this process (one thread or disabled)")
    where = workers.placement(int(workers.state()[workers.NWORKERS]))
    found = {t.name: os.sched_getaffinity(t.native_id) for t in threading.enumerate()
             if t.name.startswith("jitort-worker-")}
    assert found, "no worker threads"
    for name, cpus in found.items():
        k = int(name.rsplit("-", 1)[1])
        if k in where:
            assert cpus == {where[k]}, (name, cpus)
        else:
            assert cpus == os.sched_getaffinity(0), (name, cpus)
