"""Strict mode: a node that would run in the fallback interpreter raises UnsupportedOp instead."""
import numpy as np
import pytest
from onnx import helper

import jitort
from jitort.codegen import cpu
from jitort.codegen.registry import Unlowerable

from .helpers import F32, make_model, run_reference


def _interpreted_model():
    # Bernoulli, a random generator, is left to the interpreter (its draws are numpy's); on
    # probabilities 0 and 1 (the Sign of a Relu) its output is deterministic
    return make_model([helper.make_node("Relu", ["x"], ["r"]),
                       helper.make_node("Sign", ["r"], ["p"]),
                       helper.make_node("Bernoulli", ["p"], ["y"])],
                      [("x", F32, [2, 3])], [("y", F32, None)])


def test_strict_refuses_a_model_with_interpreted_nodes_and_names_them():
    with pytest.raises(jitort.UnsupportedOp, match=r"strict mode: 1 node.*Bernoulli"):
        jitort.compile(_interpreted_model(), strict=True)


def test_default_mode_interprets_the_same_model():
    m = _interpreted_model()
    cm = jitort.compile(m)
    assert [n.split("(")[0] for n in cm.fallback_nodes()] == ["Bernoulli"]
    x = np.array([[0, 1, -2], [3, 0, 4]], np.float32)
    np.testing.assert_array_equal(cm(x)[0], run_reference(m, {"x": x})[0])


def test_strict_from_the_environment(monkeypatch):
    monkeypatch.setenv("JITORT_STRICT", "1")
    with pytest.raises(jitort.UnsupportedOp):
        jitort.compile(_interpreted_model())
    assert jitort.compile(_interpreted_model(), strict=False).fallback_nodes()  # explicit wins
    monkeypatch.setenv("JITORT_STRICT", "maybe")
    with pytest.raises(ValueError, match="JITORT_STRICT"):
        jitort.compile(_interpreted_model())


def test_strict_model_that_compiles_fully_runs():
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, [2, 3])], [("y", F32, None)])
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(jitort.compile(m, strict=True)(x)[0], np.maximum(x, 0))


def test_strict_raises_when_a_lowering_declines_at_run_time(monkeypatch):
    def decline(em, n):
        raise Unlowerable(n, "test: declined these shapes")
    monkeypatch.setitem(cpu.LOWER, ("", "Softmax"), decline)
    m = make_model([helper.make_node("Softmax", ["x"], ["y"])], [("x", F32, [2, 3])], [("y", F32, None)])
    cm = jitort.compile(m, strict=True)  # claimed statically...
    with pytest.raises(jitort.UnsupportedOp, match="declined these shapes"):
        cm(np.ones((2, 3), np.float32))  # ...declined when planned
