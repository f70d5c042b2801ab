"""The BLAS behind gemm.xgemm (kernels.cpu.blas): MKL when installed on an Intel CPU, a private
instance of numpy's OpenBLAS where numpy ships one (or numpy's own instance), else a cfunc over
Numba's helper (JITORT_BLAS forces one in a subprocess), and the pinning of numpy's OpenBLAS
threads when the kernels share it."""
import os
import subprocess
import sys

import numba
import numpy as np
import pytest

from jitort.kernels.cpu import blas


_PINNING = """
import threading
from jitort.kernels.cpu import blas
assert blas.BLAS == "openblas-shared"
before = blas.get_threads()
blas.set_threads(2)
with blas.single_threaded():
    assert blas.get_threads() == 1
    with blas.single_threaded():  # re-entrant
        assert blas.get_threads() == 1
    assert blas.get_threads() == 1
assert blas.get_threads() == 2

# shared by concurrent callers: the setting comes back only when the last one leaves
inside, release, seen = threading.Event(), threading.Event(), []


def worker():
    with blas.single_threaded():
        inside.set()
        release.wait(10)


th = threading.Thread(target=worker)
th.start()
inside.wait(10)
with blas.single_threaded():
    pass
seen.append(blas.get_threads())   # the worker is still inside: still pinned
release.set()
th.join(10)
seen.append(blas.get_threads())
assert seen == [1, 2], seen
print("ok")
"""

_GEMM = """
import sys
import numpy as np
from numba import njit
from jitort.kernels.cpu import blas, gemm as G
assert blas.BLAS == sys.argv[1], blas.BLAS


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
        # atol: entries near 0 are sums that cancel (values O(1), k = 5); MKL on AMD
        # rounded one such entry 1e-5 relative away from numpy's float32 matmul
        np.testing.assert_allclose(out[1], want, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(out[0], c[0])
        np.testing.assert_array_equal(out[2], c[2])
# a big one, through the library's blocked path, against numpy in float64
a = rng.standard_normal((300, 200)).astype(np.float32)
b = rng.standard_normal((200, 500)).astype(np.float32)
out = np.zeros((1, 300, 500), np.float32)


@njit
def big(a, b, out):
    return G.xgemm(0, 0, 300, 500, 200, 1.0, a, 0, 200, b, 0, 500, 0.0, out, 0, 500)


assert big(a, b, out) == 0
np.testing.assert_allclose(out[0], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
print("ok")
"""


def _run(script, which, *args, **env_extra):
    env = dict(os.environ, JITORT_BLAS=which, **env_extra)
    return subprocess.run([sys.executable, "-c", script, *args], env=env,
                          capture_output=True, text=True, timeout=600)


def _available(which):
    if which == "mkl":
        return blas._mkl() is not None or blas.BLAS == "mkl"
    if which in ("openblas", "openblas-shared"):
        return blas._numpy_openblas() is not None
    return True


@pytest.mark.parametrize("which", ["mkl", "openblas", "openblas-shared", "numba"])
def test_each_blas_computes_the_same_gemm(which):
    """Every library the kernels can link (JITORT_BLAS forces one): all transposes, both
    dtypes, a sub-block with leading dimensions and its neighbours untouched, a big product."""
    if not _available(which):
        pytest.skip(f"{which} is not installed here (pip install -e '.[test]' brings MKL)")
    r = _run(_GEMM, which, which)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_default_blas_is_the_fastest_installed():
    """MKL on Intel CPUs; elsewhere (AMD EPYC: 1.02-2x MKL's time) numpy's OpenBLAS."""
    intel = blas.cpu_vendor() == "intel"
    want = ("mkl" if intel and _available("mkl") else
            "openblas" if _available("openblas") else "numba")
    assert blas.BLAS == want


def test_default_choice_by_vendor():
    if not (_available("mkl") and _available("openblas")):
        pytest.skip("needs both MKL and numpy's OpenBLAS")
    assert blas._choose("", vendor="intel")[0] == "mkl"
    assert blas._choose("", vendor="amd")[0] == "openblas"
    assert blas._choose("", vendor="")[0] == "openblas"
    assert blas._choose("mkl", vendor="amd")[0] == "mkl"      # asked for: taken anywhere
    assert blas.cpu_vendor() in ("intel", "amd", "")


def test_numpy_openblas_is_pinned_during_calls_and_restored():
    if not _available("openblas"):
        pytest.skip("numpy ships no ILP64 OpenBLAS here")
    r = _run(_PINNING, "openblas-shared")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_mkl_and_scipy_blas_have_no_thread_count_to_pin():
    if blas.BLAS == "openblas-shared":
        pytest.skip("the kernels use numpy's OpenBLAS here (pinning tested above)")
    assert blas.get_threads() is None
    with blas.single_threaded():
        assert blas.get_threads() is None


def test_unknown_or_missing_blas_is_a_clear_error():
    r = _run("import jitort.kernels.cpu.blas", "atlas")
    assert r.returncode != 0 and "JITORT_BLAS='atlas'" in r.stderr, r.stderr[-2000:]
    with pytest.raises(ValueError, match="expected mkl, openblas, openblas-shared or numba"):
        blas._choose("goto")


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


_PRIVATE = """
import sys
import numpy as np
from threadpoolctl import threadpool_info
from jitort.kernels.cpu import blas
numpy_arch = [i.get("architecture") for i in threadpool_info() if i["internal_api"] == "openblas"]
print(blas.BLAS, blas.CORE, blas.get_threads(), numpy_arch[0] if numpy_arch else None)
"""


def test_private_openblas_instance_leaves_numpys_alone():
    """jitort's OpenBLAS is its own instance: its core type comes from the CPU (or
    JITORT_OPENBLAS_CORETYPE), numpy's keeps OPENBLAS_CORETYPE, and it has no thread count to
    pin (it never starts threads)."""
    if not _available("openblas"):
        pytest.skip("numpy ships no ILP64 OpenBLAS here")
    r = _run(_PRIVATE, "openblas", OPENBLAS_CORETYPE="Sandybridge")
    assert r.returncode == 0, r.stderr[-2000:]
    name, core, threads, numpy_core = r.stdout.split()
    assert (name, threads) == ("openblas", "None")
    assert numpy_core.lower() == "sandybridge"  # numpy's instance: as the environment says
    assert core.lower() != "sandybridge"  # jitort's: detected from the CPU
    r = _run(_PRIVATE, "openblas", OPENBLAS_CORETYPE="Sandybridge",
             JITORT_OPENBLAS_CORETYPE="inherit")
    assert r.returncode == 0 and r.stdout.split()[1].lower() == "sandybridge", \
        r.stdout + r.stderr[-2000:]
    r = _run(_PRIVATE, "openblas", JITORT_OPENBLAS_CORETYPE="Sandybridge")
    assert r.returncode == 0 and r.stdout.split()[1].lower() == "sandybridge", \
        r.stdout + r.stderr[-2000:]
    r = _run(_GEMM, "openblas", "openblas", JITORT_OPENBLAS_CORETYPE="Sandybridge")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
