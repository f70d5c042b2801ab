"""Tiered execution (jitort/tiering.py): interpreter first, compiled program after the switch.

Each test builds its own small model (a distinct chain, so a distinct generated module) and
points ``JITORT_CACHE_DIR`` at a fresh folder, so the background really compiles in a process.
"""
from __future__ import annotations

import gc
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import jitort
from jitort import tiering

from .helpers import numba_cache_beside_generated_code

ort = pytest.importorskip("onnxruntime")


def _model(seed: float, batch="N") -> onnx.ModelProto:
    """x [batch, 8] -> Relu(x @ W + b) * seed ... + x @ V: two GEMMs and a fused chain of
    ``int(seed)`` multiplications, so that each test's generated code is its own (weights and
    scalars live in the constants buffer, not in the text)."""
    rng = np.random.default_rng(int(seed * 1000))
    w = rng.standard_normal((8, 8)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    v = rng.standard_normal((8, 8)).astype(np.float32)
    inits = [helper.make_tensor(n, TensorProto.FLOAT, a.shape, a.ravel())
             for n, a in (("w", w), ("b", b), ("v", v))]
    inits.append(helper.make_tensor("s", TensorProto.FLOAT, [], [seed]))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             *[helper.make_node("Mul", ["r" if k == 0 else f"r{k}", "s"],
                                ["rs" if k == int(seed) - 1 else f"r{k + 1}"])
               for k in range(int(seed))],
             helper.make_node("MatMul", ["x", "v"], ["xv"]),
             helper.make_node("Add", ["rs", "xv"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [batch, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _ort(m, x):
    return ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("JITORT_CACHE_DIR", str(tmp_path / "cache"))
    numba_cache_beside_generated_code(monkeypatch)
    return tmp_path / "cache"


def test_results_equal_before_and_after_the_switch(fresh_cache):
    m = _model(1.5)
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    cm = jitort.compile(m, tiered=True)
    assert cm.tier == "interpreter"
    before = compiles = jitort.compile_count()
    first = cm(x)[0]
    assert jitort.compile_count() == compiles  # tier 0 compiles nothing in this process
    assert cm.wait_compiled(timeout=300)
    assert cm.tier == "compiled" and cm._tiering.compiled_in_child
    assert not list((fresh_cache / "tiering").iterdir())  # no job or log files left behind
    after = cm(x)[0]
    want = _ort(m, x)
    np.testing.assert_allclose(first, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(after, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(first, after, rtol=1e-5, atol=1e-6)
    # the process compiled it: this one only loaded machine code from the cache
    assert jitort.compile_count() == before
    # a new shape after the switch runs compiled too (same generated code, replayed plan)
    x2 = np.ones((5, 8), np.float32)
    np.testing.assert_allclose(cm(x2)[0], _ort(m, x2), rtol=1e-5, atol=1e-6)

    # a second model of the same graph finds the cache warm: no process, a quick switch
    cm2 = jitort.compile(m, tiered=True)
    t = time.monotonic()
    np.testing.assert_allclose(cm2(x)[0], want, rtol=1e-5, atol=1e-6)
    assert cm2.wait_compiled(timeout=120)
    assert cm2._tiering.compiled_in_child is False
    assert time.monotonic() - t < 30
    assert jitort.compile_count() == before


def test_concurrent_callers_across_the_switch(fresh_cache):
    m = _model(2.5)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((b, 8)).astype(np.float32) for b in (1, 2, 3, 4)]
    wants = [_ort(m, x) for x in xs]
    cm = jitort.compile(m, tiered=True)
    errors, seen = [], [set() for _ in xs]
    stop = threading.Event()

    def caller(k):
        try:
            while not stop.is_set():
                tier = cm.tier
                got = cm(xs[k])[0]
                np.testing.assert_allclose(got, wants[k], rtol=1e-5, atol=1e-6)
                seen[k].add(tier)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(len(xs))]
    for t in threads:
        t.start()
    try:
        while not cm._tiering.starting:  # the first call has begun
            time.sleep(0.001)
        assert cm.wait_compiled(timeout=300)
        time.sleep(0.5)  # calls on the compiled tier too
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[0]
    assert all(s == {"interpreter", "compiled"} for s in seen), seen


def test_a_failed_compile_leaves_the_interpreter_running_and_warns(fresh_cache, monkeypatch):
    m = _model(3.5)
    x = np.ones((2, 8), np.float32)
    # the compile process is a program that fails at once
    monkeypatch.setattr(tiering.sys, "executable", "/bin/false")
    cm = jitort.compile(m, tiered=True)
    first = cm(x)[0]
    with pytest.warns(tiering.TieringWarning, match="exited with status 1"):
        assert cm.wait_compiled(timeout=60) is False
    assert cm.tier == "interpreter" and cm._tiering.state == "failed"
    np.testing.assert_allclose(cm(x)[0], first)
    np.testing.assert_allclose(first, _ort(m, x), rtol=1e-5, atol=1e-6)


def test_a_killed_compile_process_leaves_no_broken_cache_entry(fresh_cache):
    m = _model(4.5)
    x = np.ones((2, 8), np.float32)
    cm = jitort.compile(m, tiered=True)
    cm(x)
    deadline = time.monotonic() + 60
    while not cm._tiering.children and time.monotonic() < deadline:
        time.sleep(0.05)
    proc = cm._tiering.children[0]
    # kill it as soon as Numba has written its first cache entry: mid-way through the cache
    while not list(fresh_cache.rglob("*.nbi")) and proc.poll() is None:
        time.sleep(0.005)
    assert proc.poll() is None, "the compile process finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tiering.TieringWarning)
        ok = cm.wait_compiled(timeout=60)
    assert not ok and cm._tiering.state == "failed"
    written = len(list(fresh_cache.rglob("*.nbi")))
    np.testing.assert_allclose(cm(x)[0], _ort(m, x), rtol=1e-5, atol=1e-6)
    # a fresh process on the same cache: every entry loads or compiles cleanly (a damaged one
    # would give a jitort CacheWarning, an error here) and the result is right
    path = fresh_cache.parent / "m.onnx"
    onnx.save(m, path)
    code = ("import sys, warnings, numpy as np, jitort\n"
            "from jitort.codegen.module import CacheWarning\n"
            "warnings.simplefilter('error', CacheWarning)\n"
            "cm = jitort.compile(sys.argv[1], tiered=False)\n"
            "print(repr(cm(np.ones((2, 8), np.float32))[0].tolist()))\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                         env=dict(os.environ), cwd=str(fresh_cache.parent), timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(list(fresh_cache.rglob("*.nbi"))) > written  # it finished what the kill cut
    np.testing.assert_allclose(np.array(eval(out.stdout.strip().splitlines()[-1])),
                               _ort(m, x), rtol=1e-5, atol=1e-6)


def test_fixed_shapes_start_compiling_at_compile_and_tiering_can_be_turned_off(fresh_cache,
                                                                               monkeypatch):
    m = _model(5.5, batch=2)
    cm = jitort.compile(m, tiered=True)
    assert cm._tiering.started  # shapes known: started without a call
    assert cm.wait_compiled(timeout=300)
    x = np.ones((2, 8), np.float32)
    np.testing.assert_allclose(cm(x)[0], _ort(m, x), rtol=1e-5, atol=1e-6)

    off = jitort.compile(m, tiered=False)
    assert off.tier == "compiled" and off.wait_compiled() is True
    monkeypatch.setenv("JITORT_TIERED", "0")
    assert jitort.compile(m).tier == "compiled"
    monkeypatch.setenv("JITORT_TIERED", "1")
    on = jitort.compile(_model(6.5))
    assert on.tier == "interpreter"
    with pytest.raises(jitort.JitortError, match="nothing is compiling yet"):
        on.wait_compiled(timeout=0)
    # bad input is refused the same way on tier 0
    with pytest.raises(jitort.InvalidInput, match="dtype"):
        on(np.ones((2, 8), np.float64))
    with pytest.raises(jitort.InvalidInput, match="rank"):
        on(np.ones(8, np.float32))


def test_a_cached_driver_without_its_call_site_record_is_recovered(fresh_cache):
    """A process killed after Numba cached a driver function but before the record of its
    call sites (``*.sigs``, jitort/codegen/native.py) was written: the next process types the
    function again to recover the record instead of calling through an empty table."""
    m = _model(7.5)
    x = np.full((3, 8), 0.5, np.float32)
    path = fresh_cache.parent / "m.onnx"
    onnx.save(m, path)
    code = ("import sys, numpy as np, jitort\n"
            "cm = jitort.compile(sys.argv[1], tiered=False)\n"
            "print(repr(cm(np.full((3, 8), 0.5, np.float32))[0].tolist()))\n"
            "print('compiles', jitort.compile_count())\n")

    def fresh_process():
        out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                             text=True, env=dict(os.environ), cwd=str(fresh_cache.parent),
                             timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        lines = out.stdout.strip().splitlines()
        return np.array(eval(lines[-2])), int(lines[-1].split()[1])

    want = _ort(m, x)
    got, _ = fresh_process()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    records = list(fresh_cache.rglob("driver_*.sigs"))
    assert records
    for r in records:
        r.unlink()
    got, compiles = fresh_process()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert compiles >= 1  # typed again (uncached copy) to rebuild the record
    assert sorted(p.name for p in fresh_cache.rglob("driver_*.sigs")) == \
        sorted(p.name for p in records)
    got, compiles = fresh_process()  # and from then on a plain cache load
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert compiles == 0


def test_interpreter_tier_outputs_are_the_callers_own(fresh_cache):
    """An output that is a graph input (or a constant) comes back as a copy on both tiers,
    never as the caller's array itself."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    g = helper.make_graph([helper.make_node("Add", ["x", "one"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8]),
                           helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8]),
                           helper.make_tensor_value_info("one", TensorProto.FLOAT, [])],
                          [one])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    cm = jitort.compile(m, tiered=True)
    for tier in ("interpreter", "compiled"):
        assert cm.tier == tier
        y, xo, c = cm(x)
        np.testing.assert_array_equal(y, x + 1)
        np.testing.assert_array_equal(xo, x)
        assert not np.shares_memory(xo, x) and float(c) == 1.0
        assert cm.wait_compiled(timeout=300)


def test_compile_processes_plan_a_wholly_compiled_model_without_interpreting(fresh_cache,
                                                                            monkeypatch):
    """A compile process plans every segment for the feeds; when the compiled segments read
    only graph inputs it does not run the model on the interpreter first (its parts are the
    same as planned after interpreting)."""
    m = _model(2.0)
    cm = jitort.compile(m, tiered=False)
    feeds = {"x": np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)}
    calls = []
    orig = tiering.Tiering.interpret
    monkeypatch.setattr(tiering.Tiering, "interpret",
                        lambda self, env, free=True: calls.append(1) or orig(self, env, free))
    parts = tiering.driver_parts(cm, feeds)
    assert parts and not calls
    import numba
    x_type = numba.typeof(feeds["x"])
    assert all(x_type in sig for _, _, sig in parts), parts  # typed for the feeds given
    # what it planned runs: the driver compiles for those argument types and gives ORT's result
    np.testing.assert_allclose(cm(**feeds)[0], _ort(m, feeds["x"]), rtol=1e-5, atol=1e-5)


# --- the process-wide compile queue (jitort/compile_queue.py) --------------------------------

def _live_compile_processes() -> int:
    """Compile processes (``python -m jitort.tiering``) alive now among this process's
    children (zombies, which have exited, not counted)."""
    me, n = os.getpid(), 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
            if int(ppid) != me or state == "Z":
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError, IndexError):  # it exited while we looked
            continue
        n += b"jitort.tiering" in cmd
    return n


#: the binary ops of the queue tests' models, with their numpy reference
_OPS = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Max": np.maximum,
        "Min": np.minimum}


def _tiny(chain: tuple, seed: int):
    """x [2, 8] -> op(...op(x, c)..., c) for the ops of ``chain``, with a constant vector c of
    its own: models of one chain differ only in c, which lives in the constants buffer, so
    they share one generated program. x is of fixed shape: it starts compiling at compile().
    Returns the model and its numpy reference."""
    c = np.random.default_rng(seed).standard_normal(8).astype(np.float32)
    names = ["x", *[f"t{k}" for k in range(len(chain) - 1)], "y"]
    nodes = [helper.make_node(op, [names[k], "c"], [names[k + 1]]) for k, op in enumerate(chain)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor("c", TensorProto.FLOAT, [8], c)])

    def ref(x):
        for op in chain:
            x = _OPS[op](x, c)
        return x
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), ref


def _queue_drains_within_the_bound(monkeypatch, chains: list, dropped: tuple) -> None:
    """Compile a tiered model per entry of ``chains`` in a loop, then 5 of chain ``dropped``
    that are garbage-collected at once (last in line): while they drain, at most
    JITORT_COMPILE_JOBS compile processes are ever alive; queued models answer on the
    interpreter tier; every kept model is promoted and answers the same compiled; the dropped
    ones never run."""
    from jitort.compile_queue import QUEUE
    bound = 2
    monkeypatch.setenv("JITORT_COMPILE_JOBS", str(bound))
    gc.collect()  # the queue is process-wide: let what earlier tests left in it drain first
    deadline = time.monotonic() + 600
    while (QUEUE.running() or QUEUE.waiting()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert QUEUE.running() == 0
    QUEUE.peak = 0
    samples, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            samples.append(_live_compile_processes())
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started, collected = QUEUE.started, QUEUE.collected
    x = np.random.default_rng(7).standard_normal((2, 8)).astype(np.float32)
    try:
        models = []
        for i, chain in enumerate(chains):
            m, ref = _tiny(chain, i)
            models.append((jitort.compile(m, tiered=True), ref))
        for i in range(5):
            jitort.compile(_tiny(dropped, 1000 + i)[0], tiered=True)
        gc.collect()
        queued = 0
        for cm, ref in models:
            assert cm._tiering is not None
            was_queued = cm._tiering.state == "queued"
            got = cm(x)[0]
            queued += was_queued and cm._tiering.state in ("queued", "compiling")
            np.testing.assert_allclose(got, ref(x), rtol=1e-6, atol=1e-6)
        assert queued >= len(chains) // 2, queued  # most answered from the queue, on tier 0
        for cm, ref in models:
            assert cm.wait_compiled(timeout=900)
            assert cm.tier == "compiled"
            np.testing.assert_allclose(cm(x)[0], ref(x), rtol=1e-6, atol=1e-6)
    finally:
        stop.set()
        sampler.join()
    assert max(samples) <= bound, max(samples)
    assert max(samples) >= 1  # the sampler saw the compiles it bounds
    assert QUEUE.peak <= bound
    # every model that queued ran once; one whose first call found its program already cached
    # (another model's compile finished first: a loaded host makes the loop slow) never queued
    queued_models = sum(cm._tiering._work is not None for cm, _ in models)
    assert QUEUE.started - started == queued_models and QUEUE.collected - collected == 5
    assert queued_models >= len(set(chains))
    # a program compiles in a process at most twice (two jobs at a time); a model whose
    # program another model compiled meanwhile finds it in the cache when its turn comes
    in_child = sum(bool(cm._tiering.compiled_in_child) for cm, _ in models)
    assert in_child <= 2 * len(set(chains)), in_child


def test_fifty_models_share_a_bounded_compile_queue(fresh_cache, monkeypatch):
    """45 models of 5 programs, and 5 more dropped while queued."""
    _queue_drains_within_the_bound(monkeypatch, [(op,) for op in _OPS] * 9, ("Min", "Add"))


@pytest.mark.slow
def test_fifty_distinct_programs_share_a_bounded_compile_queue(fresh_cache, monkeypatch):
    """45 models of 45 programs (each compiles in a process), and 5 more dropped."""
    chains = list(itertools.product(_OPS, repeat=3))[:45]
    _queue_drains_within_the_bound(monkeypatch, chains, ("Min", "Min", "Min", "Min"))


def test_the_queue_closes_at_exit(fresh_cache):
    """A process that exits with models still queued exits at once and cleanly: nothing
    waits for the queue, and no compile process starts during shutdown."""
    code = ("import numpy as np, jitort, onnx, sys\n"
            "from jitort.compile_queue import QUEUE\n"
            "ms = [jitort.compile(onnx.load(p), tiered=True) for p in sys.argv[1:]]\n"
            "print('waiting', QUEUE.waiting())\n")
    paths = []
    for i in range(4):
        path = fresh_cache.parent / f"m{i}.onnx"
        onnx.save(_tiny((list(_OPS)[i],), 200 + i)[0], path)
        paths.append(str(path))
    env = dict(os.environ, JITORT_COMPILE_JOBS="1")
    t = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code, *paths], capture_output=True, text=True,
                         env=env, cwd=str(fresh_cache.parent), timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["waiting", "3"]  # one running, three in line
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    assert time.monotonic() - t < 120


def test_a_forked_child_drops_the_queue_it_inherited(fresh_cache):
    """A child forked while models wait in the queue does not wait for compiles it cannot see:
    its copies of those models report a dropped compile and answer on the interpreter tier;
    the parent's queue goes on and promotes them."""
    code = ("import os, sys, warnings, numpy as np, onnx, jitort\n"
            "from jitort.compile_queue import QUEUE\n"
            "ms = [jitort.compile(onnx.load(p), tiered=True) for p in sys.argv[1:]]\n"
            "x = np.ones((2, 8), np.float32)\n"
            "want = [m(x)[0] for m in ms]\n"
            "assert QUEUE.waiting() >= 1\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    with warnings.catch_warnings(record=True) as w:\n"
            "        warnings.simplefilter('always')\n"
            "        ok = [m.wait_compiled(timeout=5) for m in ms]\n"
            "    same = all(np.array_equal(m(x)[0], y) for m, y in zip(ms, want))\n"
            "    forked = any('forked' in str(e.message) for e in w)\n"
            "    os._exit(0 if not any(ok) and same and forked and QUEUE.waiting() == 0 else 3)\n"
            "_, status = os.waitpid(pid, 0)\n"
            "assert all(m.wait_compiled(timeout=300) for m in ms), 'parent promotes'\n"
            "assert all(np.array_equal(m(x)[0], y) for m, y in zip(ms, want))\n"
            "print('child', os.waitstatus_to_exitcode(status))\n")
    paths = []
    for i in range(2):  # one compiling, one in line (the same program: it then loads)
        path = fresh_cache.parent / f"f{i}.onnx"
        onnx.save(_tiny(("Add",), 300 + i)[0], path)
        paths.append(str(path))
    out = subprocess.run([sys.executable, "-c", code, *paths], capture_output=True, text=True,
                         env=dict(os.environ, JITORT_COMPILE_JOBS="1"),
                         cwd=str(fresh_cache.parent), timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["child", "0"], out.stdout + out.stderr[-2000:]


def test_a_bad_compile_jobs_setting_is_refused_clearly(fresh_cache, monkeypatch):
    from jitort.compile_queue import QUEUE, InvalidSetting
    m, ref = _tiny(("Sub", "Mul"), 400)
    waiting = QUEUE.waiting()
    for bad in ("two", "0", "-3"):
        monkeypatch.setenv("JITORT_COMPILE_JOBS", bad)
        with pytest.raises(InvalidSetting, match="JITORT_COMPILE_JOBS must be a positive int"):
            jitort.compile(m, tiered=True)  # fixed shapes: it would queue its compile now
        assert QUEUE.waiting() == waiting
    assert issubclass(InvalidSetting, jitort.JitortError)
    monkeypatch.setenv("JITORT_COMPILE_JOBS", "1")
    cm = jitort.compile(m, tiered=True)
    x = np.ones((2, 8), np.float32)
    np.testing.assert_allclose(cm(x)[0], ref(x), rtol=1e-6)
    assert cm.wait_compiled(timeout=300)
    np.testing.assert_allclose(cm(x)[0], ref(x), rtol=1e-6)
