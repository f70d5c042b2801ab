"""Start-up on warm caches: what a fresh process finds on disk instead of compiling again.

- A model's snapshot (jitort/warm.py): after the first compiled call, ``jitort.compile`` of
  the same bytes and options in a new process runs the snapshot's plans without importing onnx
  or the compiler; a changed model, option or environment misses; a shape no plan covers is
  answered by the full model.
- The worker pool's machine code (kernels/cpu/workers.py) is cached under the kernel cache
  root, keyed by its LLVM text, Numba's target (CPU name and features) and versions: a second
  process loads it, a damaged entry is compiled again, another option compiles another entry.

Every test runs fresh processes against empty temporary caches.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from jitort import warm

from .helpers import F32, assert_outputs_close, make_model, run_onnxruntime

ROOT = Path(__file__).resolve().parents[1]

# A parallel region run on the pool: the sum of a prange loop, and the pool's job counter
POOL_CHILD = """
import numba, numpy as np
import jitort.kernels.cpu  # installs the pool
from jitort.kernels.cpu import workers

@numba.njit(parallel=True)
def total(x):
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += x[i]
    return s

x = np.arange(100_000, dtype=np.float64)
assert workers.installed()
before = int(workers.state()[workers.EPOCH]) >> 8
print("sum", total(x), "regions", (int(workers.state()[workers.EPOCH]) >> 8) - before)
"""


def _run(code: str, env: dict) -> str:
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def _pool_env(tmp_path: Path, **extra) -> dict:
    env = dict(os.environ, JITORT_KERNEL_CACHE_DIR=str(tmp_path / "kernels"),
               NUMBA_NUM_THREADS="2", **extra)
    env.pop("JITORT_THREAD_POOL", None)
    return env


def _entries(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "kernels" / "workers").glob("*.pkl"))


def test_pool_code_cached_reloaded_repaired_keyed(tmp_path):
    """Compiled and written once; loaded by the next process (the entry left as it was); a
    damaged entry compiled again and rewritten; JITORT_SPIN_PAUSE=0 (other code) another entry."""
    env = _pool_env(tmp_path)
    want = f"sum {float(sum(range(100_000)))} regions 1"
    assert want in _run(POOL_CHILD, env)
    (entry,) = _entries(tmp_path)
    stamp = entry.stat().st_mtime_ns
    assert want in _run(POOL_CHILD, env)
    assert _entries(tmp_path) == [entry] and entry.stat().st_mtime_ns == stamp
    entry.write_bytes(b"not a pickle")
    assert want in _run(POOL_CHILD, env)
    assert entry.read_bytes() != b"not a pickle"
    assert want in _run(POOL_CHILD, _pool_env(tmp_path, JITORT_SPIN_PAUSE="0"))
    assert len(_entries(tmp_path)) == 2


# --- the model snapshot ------------------------------------------------------------------------

def _model(w: float):
    """y = tanh(x + w) * x: elementwise only (quick to compile cold); ``w`` in the bytes."""
    nodes = [helper.make_node("Add", ["x", "w"], ["a"]), helper.make_node("Tanh", ["a"], ["t"]),
             helper.make_node("Mul", ["t", "x"], ["y"])]
    return make_model(nodes, [("x", F32, ["B", 8])], [("y", F32, None)],
                      {"w": np.full(8, w, np.float32)})


# compiles argv[1] (options: json argv[2]) and runs it on x of argv[3] rows; prints the model's
# class, whether onnx / the compiler / scipy.linalg were imported, the output
WARM_CHILD = """
import json, sys, numpy as np, jitort
cm = jitort.compile(sys.argv[1], **json.loads(sys.argv[2]))
x = np.linspace(-2, 2, int(sys.argv[3]) * 8, dtype=np.float32).reshape(-1, 8)
y = cm.run(None, {"x": x})[0]
print(json.dumps({"cls": type(cm).__name__, "onnx": "onnx" in sys.modules,
                  "compiler": "jitort.runtime" in sys.modules,
                  "scipy.linalg": "scipy.linalg" in sys.modules, "y": y.tolist()}))
"""


def _warm_child(model: Path, cache: Path, rows: int = 3, env: dict | None = None, **options):
    env = dict(os.environ, JITORT_CACHE_DIR=str(cache), **(env or {}))
    env.pop("NUMBA_CACHE_DIR", None)
    p = subprocess.run([sys.executable, "-c", WARM_CHILD, str(model), json.dumps(options),
                        str(rows)], env=env, capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def _want(proto, rows: int):
    x = np.linspace(-2, 2, rows * 8, dtype=np.float32).reshape(-1, 8)
    return run_onnxruntime(proto, {"x": x})


def test_snapshot_hit_skips_the_compiler_and_misses_on_changes(tmp_path):
    cache = tmp_path / "cache"
    proto = _model(0.5)
    path = tmp_path / "m.onnx"
    onnx.save(proto, str(path))
    first = _warm_child(path, cache, tiered=False)
    assert first["cls"] == "CompiledModel" and first["onnx"]
    assert len(list(cache.glob("warm-*/*.pkl"))) == 1       # written after the compiled call
    assert_outputs_close([np.array(first["y"], np.float32)], _want(proto, 3))

    warm_run = _warm_child(path, cache, tiered=False)
    assert warm_run["cls"] == "WarmModel"
    assert not warm_run["onnx"] and not warm_run["compiler"]  # no parse, no passes, no planning
    assert not warm_run["scipy.linalg"]  # Numba's BLAS check met by the extension alone
    assert warm_run["y"] == first["y"]
    assert _warm_child(path, cache)["cls"] == "WarmModel"    # tiered or not: the same program

    # another option, another environment: the full compile (which writes its own snapshot)
    assert _warm_child(path, cache, threads=1)["cls"] == "CompiledModel"
    assert _warm_child(path, cache, env={"JITORT_SPIN_US": "50"})["cls"] == "CompiledModel"

    # other bytes at the same path: a miss, and the new model's outputs
    other = _model(-1.0)
    onnx.save(other, str(path))
    changed = _warm_child(path, cache, tiered=False)
    assert changed["cls"] == "CompiledModel"
    assert_outputs_close([np.array(changed["y"], np.float32)], _want(other, 3))

    # a shape no plan of the snapshot covers: answered by the full model
    new_shape = _warm_child(path, cache, rows=5, tiered=False)
    assert new_shape["cls"] == "WarmModel" and new_shape["compiler"]
    assert_outputs_close([np.array(new_shape["y"], np.float32)], _want(other, 5))


# what a user reads off a compiled model, answered by a WarmModel from its snapshot
_OWN = ("options", "strict", "debug", "threads", "inputs", "input_names", "output_names",
        "device", "tier", "profiler")


def test_warm_model_has_the_compiled_models_public_surface(tmp_path, monkeypatch):
    """A WarmModel's own attributes equal the full model's, without compiling the full model;
    every other public name of the full model reaches it through the WarmModel."""
    import jitort
    monkeypatch.setenv("JITORT_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "m.onnx"
    onnx.save(_model(0.5), str(path))
    x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(3, 8)
    cold = jitort.compile(str(path), tiered=False, strict=True)
    y = cold(x)                                       # writes the snapshot
    hot = jitort.compile(str(path), tiered=False, strict=True)
    assert type(hot) is warm.WarmModel and type(cold) is jitort.CompiledModel
    for name in _OWN:
        assert getattr(hot, name) == getattr(cold, name), name
    assert isinstance(hot.options, jitort.Options) and hot.options.strict
    assert hot.wait_compiled() and np.array_equal(hot(x)[0], y[0])
    hot.prepare({"x": (3, 8)})                        # a snapshot shape: its plan, loaded
    with pytest.raises(jitort.JitortError, match="profile=True"):
        hot.end_profiling()
    assert hot._full_model is None                    # none of the above compiled the model

    public = sorted(n for n in dir(cold) if not n.startswith("_"))
    assert set(_OWN) < set(public)
    for name in public:                               # the rest: from the full model
        assert hasattr(hot, name), name
    assert hot._full_model is not None and hot.summary() == cold.summary()
    assert np.array_equal(hot.run(None, {"x": x})[0], y[0])


def test_snapshot_key_covers_bytes_options_environment(tmp_path, monkeypatch):
    data = _model(0.5).SerializeToString()
    base = dict(threads=None, base_dir=None, optimize=True)
    key = warm.snapshot_key(data, base)
    assert key == warm.snapshot_key(data, dict(base, tiered=False))
    assert key != warm.snapshot_key(_model(0.25).SerializeToString(), base)
    assert key != warm.snapshot_key(data, dict(base, threads=1))
    assert key != warm.snapshot_key(data, dict(base, optimize=False))
    monkeypatch.setenv("JITORT_SOMETHING", "1")
    assert key != warm.snapshot_key(data, base)
    for no in (dict(base, profile=True), dict(base, debug=True),
               dict(base, example_shapes=[{"x": (1, 8)}]), dict(base, unknown=1)):
        assert warm.snapshot_key(data, no) is None
    assert warm.snapshot_key(_model(0.5), base) is None     # a ModelProto: onnx loaded anyway


def test_damaged_snapshot_is_a_miss(tmp_path, monkeypatch):
    monkeypatch.setenv("JITORT_CACHE_DIR", str(tmp_path))
    path = warm._path("0" * 40)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x80\x05damaged")
    assert warm._load("0" * 40) is None
    assert warm._load("1" * 40) is None                      # absent


@pytest.fixture(autouse=True)
def _no_tuning_process(monkeypatch):
    monkeypatch.setenv("JITORT_TUNE_BACKGROUND", "0")
