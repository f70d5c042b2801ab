"""The on-disk cache: never stale, self-repairing, safe under concurrent writers.

Cross-process behaviour is what the cache is for, so most tests run fresh Python processes on
a small model against an empty temporary ``JITORT_CACHE_DIR`` (Numba's cache files then sit in
``__pycache__`` beside the generated modules; the kernel library's stay in its own cache,
kernels/_cache.py).
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import jitort
from jitort.codegen import module as modmgr

from .helpers import F32, make_model, run_reference
from .test_concurrency import _mlp

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import sys, numpy as np, jitort
cm = jitort.compile(sys.argv[1])
x = np.random.default_rng(0).standard_normal((3, 32)).astype(np.float32)
np.save(sys.argv[2], cm(x)[0])
print("compiles", jitort.compile_count())
"""


def _x():
    return np.random.default_rng(0).standard_normal((3, 32)).astype(np.float32)


def _env(cache: Path) -> dict:
    env = dict(os.environ)
    env["JITORT_CACHE_DIR"] = str(cache)
    env.pop("NUMBA_CACHE_DIR", None)  # Numba's files beside the generated ones
    return env


def _child(model: Path, cache: Path, out: Path) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-c", CHILD, str(model), str(out)], env=_env(cache),
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def _compiles(p: subprocess.CompletedProcess) -> int:
    return int(p.stdout.split("compiles")[-1])


@pytest.fixture
def mlp_file(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), str(path))
    return path


def _gen(cache: Path) -> Path:
    (d,) = cache.glob("gen-*/jitort_gen")
    return d


# --- never stale -------------------------------------------------------------------------------

def test_generated_code_is_keyed_by_the_kernel_modules_it_reaches(tmp_path):
    """A generated file's header hashes the kernel modules it imports and their imports
    (kernels/_cache.modules_hash): editing one of those changes the text (so the file name and
    cache entry), editing an unrelated kernel or a CUDA kernel does not. The kernel library's
    own cache folders (one per module, kernels/_cache.folder) follow the same closures."""
    from jitort.kernels import _cache
    import jitort.kernels as kernels
    copy = tmp_path / "kernels"
    shutil.copytree(Path(kernels.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert _cache.closure(["conv"]) == ["blas", "conv", "epilogue", "gemm", "mathfn", "nthreads",
                                        "phases", "ptr", "qgemm", "sgemm", "sync", "tunables"]
    h = {m: _cache.modules_hash([m], copy) for m in ("conv", "data", "mathfn")}
    assert h == {m: _cache.modules_hash([m]) for m in h}  # same sources, same hashes
    folders = {m: _cache.folder(m, copy) for m in _cache.modules(copy)}
    assert folders == {m: _cache.folder(m) for m in _cache.modules()}
    assert folders["conv"] == f"conv-{h['conv']}"
    # CUDA kernels are not called from CPU code: editing one invalidates nothing
    cuda = next(copy.rglob("cuda/*.py"), None)
    assert cuda is not None, f"no CUDA kernel under {copy}: the check below would check nothing"
    cuda.write_text(cuda.read_text() + "\n# edited\n")
    assert {m: _cache.folder(m, copy) for m in folders} == folders
    assert {m: _cache.modules_hash([m], copy) for m in h} == h
    gemm = copy / "cpu" / "gemm.py"  # imported by conv, not by data nor mathfn
    gemm.write_text(gemm.read_text() + "\n# an edit that changes nothing but the text\n")
    assert _cache.modules_hash(["conv"], copy) != h["conv"]
    assert _cache.modules_hash(["data"], copy) == h["data"]
    assert _cache.modules_hash(["mathfn"], copy) == h["mathfn"]
    moved = {m for m in folders if _cache.folder(m, copy) != folders[m]}
    assert moved == {m for m in folders if "gemm" in _cache.closure([m])}
    assert {"gemm", "conv", "rnn", "quant"} <= moved and not moved & {"data", "mathfn", "scan"}
    (copy / "cpu" / "extra.py").write_text("X = 1\n")  # a new kernel file is a new module
    assert _cache.modules(copy) == sorted([*folders, "extra"])
    assert {m: _cache.folder(m, copy) for m in folders if m not in moved} == \
        {m: folders[m] for m in folders if m not in moved}


KERNEL_CHILD = """
import numpy as np, jitort
from jitort.kernels.cpu import softmax
x = np.arange(40, dtype=np.float32).reshape(4, 10)
assert softmax.row_max(x[1]) == 19.0
print(softmax.row_max._cache._cache_path)
print("compiles", jitort.compile_count())
"""


def test_kernel_library_is_cached_outside_the_tree_in_a_directory_keyed_by_its_sources(tmp_path):
    """A kernel module's Numba cache sits in ``<root>/kernels/<module>-<hash of its closure>``
    (kernels/_cache.py), so a fresh clone or reinstall finds it and an edit of a file it imports
    (a callee inlined into its kernels) starts a new one; a second process loads without
    compiling."""
    from jitort.kernels import _cache
    env = dict(os.environ, JITORT_KERNEL_CACHE_DIR=str(tmp_path / "k"))
    runs = [subprocess.run([sys.executable, "-c", KERNEL_CHILD], env=env, capture_output=True,
                           text=True, cwd="/", timeout=300) for _ in range(2)]
    for p in runs:
        assert p.returncode == 0, p.stdout + p.stderr
    where = Path(runs[0].stdout.splitlines()[0])
    assert where == tmp_path / "k" / "kernels" / f"softmax-{_cache.modules_hash(['softmax'])}"
    assert list(where.glob("softmax.row_max-*.nbi"))
    assert _compiles(runs[0]) >= 1 and _compiles(runs[1]) == 0
    # another copy of the same sources hashes the same; editing a callee's file changes it
    import jitort.kernels as kernels
    copy = tmp_path / "copy"
    shutil.copytree(Path(kernels.__file__).parent, copy,
                    ignore=shutil.ignore_patterns("__pycache__"))
    assert _cache.folder("conv", copy) == _cache.folder("conv")
    epi = copy / "cpu" / "epilogue.py"
    epi.write_text(epi.read_text() + "\n# edited\n")
    assert _cache.folder("conv", copy) != _cache.folder("conv")
    assert _cache.folder("softmax", copy) != _cache.folder("softmax")  # through gemm


def test_generated_files_carry_the_library_hash_and_their_content_hash():
    cm = jitort.compile(_mlp())
    cm(_x())
    (src,) = cm.generated_sources()
    path = Path(src)
    assert path.parent.parent.name == f"gen-{modmgr.gen_hash()}"
    text = path.read_text()
    from jitort.kernels import _cache
    libs = re.findall(r"^from jitort\.kernels\.cpu import (\w+) as", text, re.M)
    assert f"kernels {_cache.modules_hash(libs)}" in text.splitlines()[0]
    import numba
    assert f"numba {numba.__version__}" in text.splitlines()[0]
    # native_call's lowering is compiled into the driver: its source is in the name too
    import hashlib
    from jitort.codegen import native
    calls = hashlib.sha256(Path(native.__file__).read_bytes()).hexdigest()[:12]
    assert f"calls {calls}" in text.splitlines()[0]
    assert path.stem == modmgr.module_name("driver", text)  # the name is the text's hash


def _binary(op: str):
    nodes = [helper.make_node(op, ["x", "c"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    return make_model(nodes, [("x", F32, ["B", 32])], [("y", F32, None)],
                      {"c": np.linspace(-1, 1, 32, dtype=np.float32)})


def test_models_and_options_never_share_code():
    """A different model, or a different option, gets different text, hence different files."""
    x = _x()
    sources = {}
    for op in ("Add", "Sub", "Mul"):
        m = _binary(op)
        cm = jitort.compile(m)
        np.testing.assert_allclose(cm(x)[0], run_reference(m, {"x": x})[0], rtol=1e-6, atol=1e-6)
        sources[op] = cm.generated_sources()[0]
    assert len(set(sources.values())) == 3
    m = _mlp()
    ref = run_reference(m, {"x": x})[0]
    variants = {"default": {}, "no-optimize": {"optimize": False}, "profile": {"profile": True}}
    import inspect
    if "debug" in inspect.signature(jitort.CompiledModel.__init__).parameters:
        variants["debug"] = {"debug": True}
    for name, opts in variants.items():
        cm = jitort.compile(m, **opts)
        np.testing.assert_allclose(cm(x)[0], ref, rtol=1e-4, atol=1e-5)
        sources[name] = cm.generated_sources()[0]
    assert len({sources[k] for k in variants}) == len(variants), sources


def test_a_changed_model_in_a_warm_cache_runs_its_own_code(tmp_path):
    cache = tmp_path / "cache"
    x = _x()
    for op in ("Add", "Sub"):
        path = tmp_path / f"{op}.onnx"
        m = _binary(op)
        onnx.save(m, str(path))
        out = tmp_path / f"{op}.npy"
        _child(path, cache, out)
        np.testing.assert_allclose(np.load(out), run_reference(m, {"x": x})[0], rtol=1e-6,
                                   atol=1e-6)


# --- damage is repaired ------------------------------------------------------------------------

def test_damaged_generated_sources_are_rewritten(tmp_path, mlp_file):
    cache = tmp_path / "cache"
    _child(mlp_file, cache, tmp_path / "ref.npy")
    gen = _gen(cache)
    (driver,) = gen.glob("driver_*.py")
    good = driver.read_bytes()
    driver.write_bytes(good[: len(good) // 2])  # truncated mid-function: a SyntaxError
    kernel = next(gen.glob("k_*.py"))
    kernel_good = kernel.read_bytes()
    kernel.write_bytes(b"\x00\xff garbage \xfe" * 10)  # not even UTF-8
    p = _child(mlp_file, cache, tmp_path / "out.npy")
    assert "damaged" in p.stderr and "CacheWarning" in p.stderr, p.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), np.load(tmp_path / "ref.npy"))
    assert driver.read_bytes() == good and kernel.read_bytes() == kernel_good


def test_damaged_numba_cache_files_warn_and_rebuild(tmp_path, mlp_file):
    cache = tmp_path / "cache"
    first = _child(mlp_file, cache, tmp_path / "ref.npy")
    assert _compiles(first) > 0
    pyc = _gen(cache) / "__pycache__"
    indexes = sorted(pyc.glob("*.nbi"))
    data = sorted(pyc.glob("*.nbc"))
    assert len(indexes) >= 2 and data  # the driver and its fused kernel at least
    # half the functions get a truncated index, the others garbage data files
    damaged_index = indexes[::2]
    for f in damaged_index:
        f.write_bytes(f.read_bytes()[:20])
    stems = {f.name.split(".")[0] for f in damaged_index}
    damaged_data = [f for f in data if f.name.split(".")[0] not in stems]
    assert damaged_data
    for f in damaged_data:
        f.write_bytes(b"not a pickle" * 3)
    p = _child(mlp_file, cache, tmp_path / "out.npy")
    assert "unreadable" in p.stderr and "recompiling" in p.stderr, p.stderr
    assert "EOFError" in p.stderr or "UnpicklingError" in p.stderr, p.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), np.load(tmp_path / "ref.npy"))
    # the rebuild rewrote a good cache: the next process loads everything, silently
    again = _child(mlp_file, cache, tmp_path / "again.npy")
    assert _compiles(again) == 0, again.stdout
    assert "CacheWarning" not in again.stderr, again.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "again.npy"), np.load(tmp_path / "ref.npy"))


# --- concurrent writers ------------------------------------------------------------------------

def test_two_processes_warming_the_same_model_both_succeed(tmp_path, mlp_file):
    cache = tmp_path / "cache"
    cmd = [sys.executable, "-m", "jitort", "warmup", str(mlp_file), "--shape", "x=3x32", "-q"]
    procs = [subprocess.Popen(cmd, env=_env(cache), cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, out + err
        assert "mlp:" in out and "Traceback" not in err, out + err
    gen = _gen(cache)
    assert not list(gen.rglob(".tmp-*")) and not list(gen.rglob("*.tmp.*"))  # no leftovers
    # what they left behind is complete and correct: a third process compiles nothing
    p = _child(mlp_file, cache, tmp_path / "out.npy")
    assert _compiles(p) == 0, p.stdout + p.stderr
    ref = run_reference(_mlp(), {"x": _x()})[0]
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), ref, rtol=1e-4, atol=1e-5)


def test_create_if_absent_keeps_the_first_writers_file(tmp_path):
    path = tmp_path / "m.py"
    modmgr._atomic_write(path, "x = 1\n", replace=False)
    mtime = path.stat().st_mtime_ns
    modmgr._atomic_write(path, "x = 1\n", replace=False)  # a second writer: left alone
    assert path.stat().st_mtime_ns == mtime and path.read_text() == "x = 1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["m.py"]
