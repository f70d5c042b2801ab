"""One CompiledModel called from many threads: per-thread workspaces, results bit-identical."""
import threading
import time

import numba
import numpy as np
import pytest
from onnx import helper

import jitort

from .helpers import F32, make_model
from .models import SHARED, shared_feeds, shared_path


def _mlp():
    rng = np.random.default_rng(0)
    init = {"w1": rng.standard_normal((32, 64)).astype(np.float32) / 8,
            "b1": rng.standard_normal(64).astype(np.float32),
            "w2": rng.standard_normal((64, 32)).astype(np.float32) / 8,
            "g": np.ones(32, np.float32), "beta": np.zeros(32, np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Tanh", ["hb"], ["t"]),
             helper.make_node("MatMul", ["t", "w2"], ["o"]),
             helper.make_node("Add", ["o", "x"], ["r"]),
             helper.make_node("LayerNormalization", ["r", "g", "beta"], ["y"], axis=-1)]
    return make_model(nodes, [("x", F32, ["B", 32])], [("y", F32, None)], init)


# Results are bit-identical at one thread count; another count splits the gemms differently
# (BLAS small-matrix kernels round differently from packed ones), so the models fix theirs.
THREADS = min(2, numba.config.NUMBA_NUM_THREADS)


def test_threads_get_bit_identical_results():
    cm = jitort.compile(_mlp(), threads=THREADS)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((int(rng.integers(1, 9)), 32)).astype(np.float32) for _ in range(16)]
    expected = [cm(x)[0] for x in inputs]  # also plans every shape once
    errors = []

    def worker(k):
        for i in range(40):
            j = (k * 7 + i) % len(inputs)
            got = cm(inputs[j])[0]
            if not np.array_equal(got, expected[j]):
                errors.append((k, i, j))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]


def _hammer(cm, inputs, expected, threads: int, calls: int) -> list:
    """``threads`` threads make ``calls`` calls each, cycling through ``inputs``; returns mismatches."""
    errors = []
    start = threading.Barrier(threads)

    def worker(k):
        start.wait()  # all threads call at once
        for i in range(calls):
            j = (k * 5 + i) % len(inputs)
            try:
                got = cm.run(None, inputs[j])
            except Exception as e:  # noqa: BLE001 - any exception in a thread is a failure
                errors.append((k, i, j, repr(e)))
                return
            if not all(np.array_equal(g, w) for g, w in zip(got, expected[j])):
                errors.append((k, i, j, "differs"))

    pool = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return errors


@pytest.mark.slow
@pytest.mark.models
def test_bert_eight_threads_thousand_calls_each():
    """8 threads x 1,000 calls on bert (4 layers, hidden 256): every result bit-identical."""
    if not shared_path("bert").exists():
        pytest.skip(f"{SHARED} not present (the shared model corpus is optional)")
    cm = jitort.compile(shared_path("bert"), threads=THREADS)
    # a few shapes, so threads plan, evict nothing and share plans while others run them
    inputs = [shared_feeds("bert", batch=b, seq=s, seed=i)
              for i, (b, s) in enumerate([(1, 8), (1, 16), (2, 8), (1, 12), (2, 4), (1, 5)])]
    expected = [cm.run(None, f) for f in inputs]  # single-threaded results
    t0 = time.perf_counter()
    errors = _hammer(cm, inputs, expected, threads=8, calls=1000)
    print(f"8 x 1000 bert calls in {time.perf_counter() - t0:.1f} s")
    assert not errors, errors[:5]


def test_first_calls_of_new_shapes_race_safely():
    """Threads that meet a new shape at the same moment all plan/compile it correctly."""
    cm = jitort.compile(_mlp(), threads=THREADS)
    rng = np.random.default_rng(2)
    inputs = [{"x": rng.standard_normal((b, 32)).astype(np.float32)} for b in range(11, 19)]
    expected = [jitort.compile(_mlp(), threads=THREADS).run(None, f)  # a separate, serial model
                for f in inputs]
    assert not _hammer(cm, inputs, expected, threads=8, calls=16)


_FORK_SCRIPT = r"""
import os, sys
import numpy as np
import jitort
from onnx import TensorProto, helper
node = helper.make_node("Relu", ["x"], ["y"])
g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1 << 20])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
cm = jitort.compile(m, threads=2, tiered=False)
x = np.linspace(-1, 1, 1 << 20, dtype=np.float32)
assert np.array_equal(cm(x)[0], np.maximum(x, 0))
import numba
print("layer", numba.threading_layer(), flush=True)
pid = os.fork()
if pid == 0:
    try:
        ok = np.array_equal(cm(x)[0], np.maximum(x, 0))
        os.write(1, b"child ran %d\n" % ok)
    except jitort.JitortError as e:
        os.write(1, ("child raised: " + str(e)[:80] + "\n").encode())
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("child status", status, flush=True)
assert np.array_equal(cm(x)[0], np.maximum(x, 0))
print("parent ran", flush=True)
"""


@pytest.mark.parametrize("pool", ["1", "0"])
@pytest.mark.parametrize("layer", ["tbb", "omp"])
def test_a_forked_child_runs_or_gets_a_clear_error(layer, pool):
    """On jitort's worker pool (the default) a child forked after the parent ran a model runs
    it too, whatever Numba's layer; so does one under Numba's TBB layer. Under Numba's GNU
    OpenMP layer (``JITORT_THREAD_POOL=0``) such a child would be killed (SIGTERM) by its
    first parallel region: its calls raise a JitortError naming the fix instead."""
    import os
    import subprocess
    import sys
    if layer == "omp":
        try:
            from numba.np.ufunc import omppool
        except ImportError:
            pytest.skip("Numba's OpenMP layer is not available")
        if omppool.openmp_vendor != "GNU":
            pytest.skip("only GNU OpenMP refuses forks")
    env = dict(os.environ, NUMBA_THREADING_LAYER=layer, JITORT_THREAD_POOL=pool)
    r = subprocess.run([sys.executable, "-c", _FORK_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=600)
    if r.returncode != 0 and "No threading layer could be loaded" in r.stderr:
        pytest.skip(f"Numba's {layer} layer is not available")
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"layer {layer}" in r.stdout and "parent ran" in r.stdout, r.stdout
    assert "child status 0" in r.stdout, r.stdout   # neither signalled nor failed
    if layer == "tbb" or pool == "1":
        assert "child ran 1" in r.stdout, r.stdout
    else:
        assert "child raised: this process was forked" in r.stdout, r.stdout
