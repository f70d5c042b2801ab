"""Profiling: one timed chunk per step, a Chrome trace, FLOP estimates; the plain path untouched."""
import json
import re
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import jitort
from jitort.codegen import assembly
from jitort.ir import Node, Value
from jitort.profiling import machine_peak_gflops, node_flops, op_label

from .helpers import F32, make_model
from .test_concurrency import _mlp


def _x(b=4):
    return np.random.default_rng(0).standard_normal((b, 32)).astype(np.float32)


def test_profile_mode_times_every_kernel_and_writes_a_chrome_trace(tmp_path):
    m = _mlp()
    plain = jitort.compile(m)
    cm = jitort.compile(m, profile=True)
    x = _x()
    np.testing.assert_array_equal(cm(x)[0], plain(x)[0])
    cm.profiler.reset()
    for _ in range(3):
        cm(x)
    (plan,) = cm.plans()
    # one chunk per step: 4 nodes after passes (MatMulBias with its Tanh fused in, MatMul, Add,
    # LayerNorm); the fused op is reported under the name of what it absorbed
    assert [p.ops for p in plan.parts] == [["MatMulBias+Tanh"], ["MatMul"], ["Add"],
                                          ["LayerNormalization"]]
    src = Path(plan.source_path).read_text()
    assert len(re.findall(r"^def part\d+\(", src, re.M)) == len(plan.parts)
    stats = cm.profiler.kernel_stats()
    assert [s.calls for s in stats] == [3] * 4
    mm = next(s for s in stats if s.ops == ["MatMul"])
    assert mm.flops == 2 * 4 * 64 * 32 and mm.gflops > 0
    path = cm.end_profiling(tmp_path / "trace.json")
    events = json.loads(Path(path).read_text())
    assert len(events) == 3 * (4 + 1)  # four kernels and the segment around them, per run
    for e in events:
        assert {"name", "ph", "ts", "dur", "pid", "tid", "args"} <= set(e)
        assert e["ph"] == "X" and e["dur"] >= 0
    assert {e["cat"] for e in events} == {"kernel", "segment"}
    kernels = [e for e in events if e["cat"] == "kernel"]
    assert all(e["args"]["compiled"] is False for e in kernels)


def test_profile_records_interpreter_steps():
    # Bernoulli: a random generator, left to the interpreter (Einsum, then Unique were used here
    # until they got compiled); on probabilities 0 and 1 (a Sign of a Relu) it is deterministic
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Sign", ["r"], ["p"]),
             helper.make_node("Bernoulli", ["p"], ["e"]),
             helper.make_node("Neg", ["e"], ["y"])]
    m = make_model(nodes, [("x", F32, [3, 4])], [("y", F32, None)])
    cm = jitort.compile(m, profile=True)
    assert cm.fallback_nodes() == ["Bernoulli"], \
        f"{cm.fallback_nodes()} interpreted: pick an op the CPU backend leaves to the interpreter"
    x = np.array([[1, 2, 2, 0], [-1, 3, 1, 2], [0, 0, 3, 1]], np.float32)
    assert cm(x)[0].tolist() == (-(x > 0).astype(np.float32)).tolist()
    stats = cm.profiler.kernel_stats(include_compiles=True)
    assert any(s.kind == "interp" and s.ops == ["Bernoulli"] for s in stats), stats


def test_plain_compile_is_unaffected_by_profile_mode():
    m = _mlp()
    x = _x()
    before = jitort.compile(m)
    before(x)
    (src,) = before.generated_sources()
    text = Path(src).read_bytes()
    prof = jitort.compile(m, profile=True)
    prof(x)
    assert prof.generated_sources() != [src]  # profile drivers are separate modules
    after = jitort.compile(m)
    after(x)
    assert after.generated_sources() == [src] and Path(src).read_bytes() == text
    (plan,) = after.plans()
    assert plan.parts is None and after.profiler is None
    with pytest.raises(jitort.JitortError):
        after.end_profiling()


def test_step_chunks_split_at_every_step():
    calls = [(0, "a()"), (0, "b()"), (2, "c()"), (3, "d()")]
    assert assembly._step_chunks(calls) == ([0, 2, 3], [["a()", "b()"], ["c()"], ["d()"]])
    assert assembly._step_chunks([]) == ([None], [["pass"]])


def _v(name, shape):
    v = Value(name)
    return v, {id(v): shape}


def test_flop_estimates():
    a, sa = _v("a", (2, 3, 4))
    b, sb = _v("b", (4, 5))
    y, sy = _v("y", (2, 3, 5))
    shapes = {**sa, **sb, **sy}
    assert node_flops(Node("MatMul", [a, b], [y], {}), shapes) == 2 * 2 * 3 * 5 * 4
    assert node_flops(Node("Relu", [y], [a], {}), {**shapes, id(a): (2, 3, 5)}) == 30
    x, sx = _v("x", (1, 8, 10, 10))
    w, sw = _v("w", (16, 8, 3, 3))
    o, so = _v("o", (1, 16, 8, 8))
    conv = Node("Conv", [x, w], [o], {})
    assert node_flops(conv, {**sx, **sw, **so}) == 2 * 16 * 8 * 8 * 8 * 3 * 3
    # fused epilogues count like the op they extend, plus the residual add and the activation
    r, sr = _v("r", (1, 16, 8, 8))
    fused = Node("FusedConv", [x, w, None, r], [o], {"activation": "Relu"}, "jitort")
    assert node_flops(fused, {**sx, **sw, **so, **sr}) == 2 * 16 * 8 * 8 * 8 * 3 * 3 + 2 * 16 * 64
    assert op_label(fused) == "FusedConv+Add+Relu"
    bias, sbias = _v("bias", (5,))
    mmb = Node("MatMulBias", [a, b, bias], [y], {"activation": "Gelu"}, "jitort")
    assert node_flops(mmb, {**shapes, **sbias}) == 2 * 2 * 3 * 5 * 4 + 30 + 8 * 30
    assert op_label(mmb) == "MatMulBias+Gelu"
    assert op_label(Node("MatMulBias", [a, b, bias], [y], {"activation": ""}, "jitort")) == "MatMulBias"
    t, st = _v("t", (4, 4))
    assert node_flops(Node("Transpose", [t], [t], {}), st) == 0


def test_machine_peak_is_measured_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("JITORT_CACHE_DIR", str(tmp_path))
    peak = machine_peak_gflops()
    assert peak > 0.1
    assert (tmp_path / "peak.json").exists()
    assert machine_peak_gflops() == peak
