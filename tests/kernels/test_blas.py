"""The BLAS behind gemm.xgemm (kernels.cpu.blas): numpy's OpenBLAS where numpy ships one, else
a cfunc over Numba's helper (forced here with JITORT_BLAS=numba), and its thread pinning."""
import os
import subprocess
import sys
import threading

import numba
import numpy as np

from jitort.kernels.cpu import blas


def test_single_threaded_pins_and_restores():
    if not blas.NUMPY_BLAS:
        assert blas.get_threads() is None
        return
    before = blas.get_threads()
    blas.set_threads(2)
    try:
        with blas.single_threaded():
            assert blas.get_threads() == 1
            with blas.single_threaded():  # re-entrant
                assert blas.get_threads() == 1
            assert blas.get_threads() == 1
        assert blas.get_threads() == 2
    finally:
        blas.set_threads(before)


def test_single_threaded_is_shared_by_concurrent_callers():
    """The setting comes back only when the last concurrent caller leaves."""
    if not blas.NUMPY_BLAS:
        return
    before = blas.get_threads()
    blas.set_threads(2)
    inside, release, seen = threading.Event(), threading.Event(), []

    def worker():
        with blas.single_threaded():
            inside.set()
            release.wait(10)

    th = threading.Thread(target=worker)
    try:
        th.start()
        inside.wait(10)
        with blas.single_threaded():
            pass
        seen.append(blas.get_threads())   # the worker is still inside: still pinned
        release.set()
        th.join(10)
        seen.append(blas.get_threads())
    finally:
        release.set()
        blas.set_threads(before)
    assert seen == [1, 2]


_FALLBACK = """
import numpy as np
from numba import njit
from jitort.kernels.cpu import blas, gemm as G
assert not blas.NUMPY_BLAS


@njit
def run(a, b, out, ta, tb):  # C[1] (7, 9) = 2 op(A) op(B) + 0.5 C[1], inside a bigger array
    return G.xgemm(ta, tb, 7, 9, 5, 2.0, a, 0, a.shape[1], b, 0, b.shape[1], 0.5, out, 63, 9)


rng = np.random.default_rng(0)
for dt in (np.float32, np.float64):
    for ta, tb in ((0, 0), (1, 0), (0, 1), (1, 1)):
        a = rng.standard_normal((5, 7) if ta else (7, 5)).astype(dt)
        b = rng.standard_normal((9, 5) if tb else (5, 9)).astype(dt)
        c = rng.standard_normal((3, 7, 9)).astype(dt)
        out = c.copy()
        assert run(a, b, out, ta, tb) == 0
        want = 2.0 * (a.T if ta else a) @ (b.T if tb else b) + 0.5 * c[1]
        np.testing.assert_allclose(out[1], want, rtol=1e-5)
        np.testing.assert_array_equal(out[0], c[0])
        np.testing.assert_array_equal(out[2], c[2])
print("ok")
"""


def test_numba_fallback_computes_the_same_gemm():
    env = dict(os.environ, JITORT_BLAS="numba")
    r = subprocess.run([sys.executable, "-c", _FALLBACK], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_model_call_leaves_the_callers_thread_settings_alone():
    import jitort
    from onnx import helper

    from tests.helpers import F32, make_model
    w = np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32)
    m = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F32, [4, 16])],
                   [("y", F32, None)], {"w": w})
    cm = jitort.compile(m, threads=1)
    before = blas.get_threads()
    x = np.random.default_rng(2).standard_normal((4, 16)).astype(np.float32)
    numba_before = numba.get_num_threads()
    np.testing.assert_allclose(cm(x)[0], x @ w, rtol=1e-5, atol=1e-5)
    assert blas.get_threads() == before
    assert numba.get_num_threads() == numba_before   # the caller's Numba threads too
