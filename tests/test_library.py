"""The kernel library's entries (jitort/library.py): the committed list, literal arguments made
plain, typing drivers without compiling kernels, and ``jitort warmup --library`` filling an
empty Numba cache that a second process then loads without compiling."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import onnx
from numba import types
from onnx import TensorProto, helper

from jitort import library

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_list_reads_back_and_names_existing_kernels():
    es = library.read_list()
    assert len(es) >= 20
    # the conv2d wrappers are called at their common target (library.forward)
    assert {"conv._conv2d_core", "gemm.matmul_packed", "winograd._winograd_core"} <= {
        e.kernel for e in es}
    for e in es:
        assert library.Entry.parse(e.text()) == e
        assert hasattr(e.dispatcher(), "py_func"), e.kernel
        # entries are what native_call emits: literal-free parameters are plain
        assert library.plain_args(e.dispatcher(), e.args) == e.args, e.text()


def test_type_spelling_round_trips():
    tys = (types.Array(types.float32, 4, "C"), types.Array(types.int64, 1, "C", readonly=True),
           types.Array(types.float64, 2, "A", aligned=False), types.int64, types.float32,
           types.boolean, types.literal(True), types.literal(-1), types.none,
           types.UniTuple(types.int64, 3), types.Tuple((types.int64, types.float32)),
           types.Omitted(1))
    e = library.Entry("conv", "conv2d", tys)
    assert library.Entry.parse(e.text()) == e
    assert "array(int64, 1, C, readonly)" in e.text() and "lit(True)" in e.text()


def test_literal_free_parameters():
    from jitort.kernels.cpu import conv, gemm, norm
    names = lambda d: {list(d.py_func.__code__.co_varnames)[i] for i in library.literal_free(d)}
    # conv2d passes group and has_bias raw to _conv2d_core, which converts them first thing
    assert {"group", "has_bias", "sh", "pw"} <= names(conv.conv2d)
    assert {"act", "alpha_act", "beta_act"} == names(gemm.matmul3d_bias_act)
    # layernorm's has_bias reaches a branch: its literal value prunes code, so it stays
    assert "has_bias" not in names(norm.layernorm2d)
    lit = (types.Array(types.float32, 2, "C"),) * 4 + (types.int64, types.literal(2),
                                                       types.float64, types.float64)
    plain = library.plain_args(gemm.matmul3d_bias_act, lit[:4] + lit[5:])
    assert plain[4] == types.int64


def _softmax_model() -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5, 7])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _run(code: str, env: dict, timeout=300) -> dict:
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                       capture_output=True, text=True, timeout=timeout, cwd="/")
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])


def _env(tmp_path) -> dict:
    return dict(os.environ, JITORT_CACHE_DIR=str(tmp_path / "jitort"),
                NUMBA_CACHE_DIR=str(tmp_path / "numba"), JITORT_TIERED="0")


def test_infer_records_matches_a_real_compilation(tmp_path):
    """Typing a driver alone names the same kernels and argument types as compiling it, and
    compiles no library kernel (fresh caches, in a subprocess)."""
    path = tmp_path / "softmax.onnx"
    onnx.save(_softmax_model(), str(path))
    r = _run(f"""
        import json, numpy as np, numba, jitort
        from jitort import tiering, library
        from jitort.codegen import native
        cm = jitort.compile({str(path)!r}, tiered=False)
        parts = tiering.driver_parts(cm, {{"x": np.ones((3, 5, 7), np.float32)}})
        n0 = jitort.compile_count()
        kernels = []
        for mod, part, sig in parts:
            kernels += [str(library.from_record(*r)) for r in
                        native.infer_records(mod, part, sig).values()]
        lib_compiles = jitort.compile_count() - n0
        real = []
        for mod, part, sig in parts:
            real += [str(library.from_record(*r)) for r in
                     native.compile_part(mod, part, sig).values()]
        print(json.dumps({{"inferred": sorted(kernels), "real": sorted(real),
                          "cached": all(library.is_cached(library.Entry.parse(k))
                                        for k in real)}}))
    """, _env(tmp_path))
    assert r["inferred"] == r["real"] and any("softmax" in k for k in r["real"])
    assert r["cached"]


def test_warmup_library_fills_an_empty_cache(tmp_path):
    """``jitort warmup --library --only softmax.,data.copy`` in a process with empty caches
    compiles those listed entries (4) in 2 processes; a second process then finds every one
    cached and loads it without a Numba compilation."""
    env = _env(tmp_path)
    p = subprocess.run([sys.executable, "-m", "jitort", "warmup", "--library", "--only",
                        "softmax.,data.copy", "--jobs", "2", "-q"], env=env, capture_output=True,
                       text=True, timeout=300, cwd="/")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "kernel library:" in p.stdout and "0 were cached" in p.stdout, p.stdout
    assert "in 2 processes" in p.stdout, p.stdout
    assert list((tmp_path / "numba").rglob("softmax.*.nbi"))
    r = _run("""
        import json, jitort
        from jitort import library
        es = library.entries(only=["softmax.", "data.copy"])
        before = jitort.compile_count()
        cached = [library.is_cached(e) for e in es]
        for e in es:
            library.compile_entry(e)
        ds = {e.kernel: e.dispatcher() for e in es}.values()
        print(json.dumps({"n": len(es), "cached": cached, "compiles": jitort.compile_count()
                          - before, "hits": sum(sum(d.stats.cache_hits.values()) for d in ds),
                          "misses": sum(sum(d.stats.cache_misses.values()) for d in ds)}))
    """, env)
    assert r["n"] >= 3 and all(r["cached"]) and r["compiles"] == 0
    assert r["hits"] >= r["n"] and r["misses"] == 0
    # a second warmup has nothing left to do
    p = subprocess.run([sys.executable, "-m", "jitort", "warmup", "--library", "--only",
                        "softmax.,data.copy", "-q"], env=env, capture_output=True, text=True,
                       timeout=300, cwd="/")
    assert p.returncode == 0 and " 0 compiled" in p.stdout, p.stdout + p.stderr


def test_kernels_first_step_compiles_what_the_drivers_call(tmp_path):
    """The compile processes' first step (tiering._kernels_first, here as the only process)
    compiles the library entries a driver calls into an empty cache before the driver is
    typed: typing the driver afterwards compiles no library kernel."""
    path = tmp_path / "softmax.onnx"
    onnx.save(_softmax_model(), str(path))
    sync = tmp_path / "sync"
    sync.mkdir()
    r = _run(f"""
        import json, numpy as np, numba, jitort
        from jitort import library, tiering
        from jitort.codegen import native
        cm = jitort.compile({str(path)!r}, tiered=False)
        parts = tiering.driver_parts(cm, {{"x": np.ones((3, 5, 7), np.float32)}})
        warm_before = tiering._library_warm(parts)
        tiering._kernels_first(parts, 0, 1, __import__("pathlib").Path({str(sync)!r}))
        kernels = set()

        class L(numba.core.event.Listener):
            def on_start(self, ev):
                kernels.add(ev.data["dispatcher"].py_func.__module__)

            def on_end(self, ev):
                pass
        numba.core.event.register("numba:compile", L())
        recs = [native.compile_part(mod, part, sig) for mod, part, sig in parts]
        print(json.dumps({{"warm_before": warm_before, "warm_after": tiering._library_warm(parts),
                          "compiled_modules": sorted(kernels)}}))
    """, _env(tmp_path))
    assert not r["warm_before"] and r["warm_after"]
    assert r["compiled_modules"] and not [m for m in r["compiled_modules"]
                                          if m.startswith("jitort.kernels")]
    assert (sync / "need-0").read_text().startswith("softmax.")
    assert (sync / "done-0").exists()


def test_tiered_cold_start_with_two_compile_processes(tmp_path):
    """Empty caches, two compile processes (kernels first, then drivers): the model switches to
    the compiled tier with the right result and its process compiles nothing itself."""
    path = tmp_path / "softmax.onnx"
    onnx.save(_softmax_model(), str(path))
    env = dict(_env(tmp_path), JITORT_TIERED="1", JITORT_COMPILE_JOBS="2")
    r = _run(f"""
        import json, numpy as np, jitort
        from jitort.codegen import module
        x = np.random.default_rng(0).standard_normal((3, 5, 7)).astype(np.float32)
        cm = jitort.compile({str(path)!r})
        first = cm.run(None, {{"x": x}})[0]
        ok = cm.wait_compiled(timeout=600)
        y = cm.run(None, {{"x": x}})[0]
        e = np.exp(x - x.max(-1, keepdims=True))
        want = e / e.sum(-1, keepdims=True)
        sync = list((module.cache_dir() / "tiering").glob("sync-*"))
        print(json.dumps({{"ok": ok, "in_child": cm._tiering.compiled_in_child,
                          "err": float(np.abs(y - want).max()),
                          "err0": float(np.abs(first - want).max()),
                          "sync_left": len(sync), "parent_compiles": jitort.compile_count()}}))
    """, env, timeout=600)
    assert r["ok"] and r["in_child"] and r["err"] < 1e-5 and r["err0"] < 1e-5
    assert r["sync_left"] == 0
    assert r["parent_compiles"] == 0  # everything came from the cache the children filled


TWINS_CHILD = r"""
import re, sys
from numba.core import event
seen = {}
class Record(event.Listener):
    def on_start(self, ev): pass
    def on_end(self, ev):
        d = ev.data["dispatcher"]
        if d.py_func.__module__.startswith("jitort.kernels"):
            seen.setdefault(f"{d.py_func.__module__}.{d.py_func.__name__}", set()).add(
                tuple(map(str, ev.data["args"])))
event.register("numba:compile", Record())
from jitort import library
for e in library.entries(only=sys.argv[1:], with_cache=False):
    library.compile_entry(e)
def plain(t):  # an integer literal or uint64 read as the int64 it stands for
    return "int64" if re.fullmatch(r"Literal\[int\]\(-?\d+\)|u?int64", t) else t
for fn, sigs in sorted(seen.items()):
    if len({tuple(map(plain, s)) for s in sigs}) < len(sigs):
        print("TWIN", fn, sorted(sigs))
print("functions", len(seen))
"""


def test_library_helpers_are_not_compiled_again_for_a_literal_or_a_prange_index(tmp_path):
    """Numba compiles a callee once more for a literal argument (``f(x, 0)``), for a loop
    variable whose first value is a literal, and for a ``prange`` index (uint64): the library's
    call sites pass int64 (``np.int64(0)``), so no helper of these entries is compiled for two
    signatures that differ only there (the Winograd entry compiled five helpers twice)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), JITORT_KERNEL_CACHE_DIR=str(tmp_path),
               JITORT_CACHE_DIR=str(tmp_path / "gen"))
    p = subprocess.run([sys.executable, "-c", TWINS_CHILD, "winograd", "softmax",
                        "conv_nhwc.dwconv_nhwc"], env=env, capture_output=True, text=True,
                       cwd="/", timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    assert int(p.stdout.split("functions")[-1]) >= 15
    assert "TWIN" not in p.stdout, p.stdout
