"""If / Loop / Scan with compiled bodies (jitort/control_flow.py), against onnxruntime on the
same inputs, in strict mode (nothing interpreted, bodies included); the structure of the
program (a control step calling its bodies' compiled programs, no interpreter runner); and the
cases declined with the reason named. Each model is compiled once and called on several inputs."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import jitort
from jitort.control_flow import Body
from jitort.partition import CONTROL, ControlStep, InterpStep, Segment

from .helpers import F32, I64, assert_outputs_close, make_model, run_onnxruntime, run_reference

B = TensorProto.BOOL


def _g(nodes, name, inputs, outputs, inits=()):
    from onnx import numpy_helper
    return helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits])


def _strict_same(m, feeds_list):
    """Compile ``m`` strictly, run every feed, compare with onnxruntime; return the model."""
    cm = jitort.compile(m, strict=True, threads=1)
    assert cm.fallback_nodes() == []
    for feeds in feeds_list:
        assert_outputs_close(cm.run(None, feeds), run_onnxruntime(m, feeds))
    return cm


# --- If ----------------------------------------------------------------------------------------

def _if_model():
    """y = 2x; z = If(c, y + w, y * x) (both branches read outer values); out = Relu(z) - 1."""
    then = _g([helper.make_node("Add", ["y", "w"], ["t"])], "then", [], [("t", F32, None)])
    orelse = _g([helper.make_node("Mul", ["y", "x"], ["e"])], "else", [], [("e", F32, None)])
    nodes = [helper.make_node("Mul", ["x", "two"], ["y"]),
             helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=orelse),
             helper.make_node("Relu", ["z"], ["r"]),
             helper.make_node("Sub", ["r", "one"], ["out"])]
    inits = {"two": np.float32(2), "one": np.float32(1),
             "w": np.linspace(-3, 3, 4).astype(np.float32)}
    return make_model(nodes, [("x", F32, ["N", 4]), ("c", B, [])], [("out", F32, None)], inits)


def test_if_runs_compiled_branches_reading_outer_values():
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    feeds = [{"x": x, "c": np.array(True)}, {"x": x, "c": np.array(False)},
             {"x": x[:2], "c": np.array(True)}]
    cm = _strict_same(_if_model(), feeds)
    # structure: the If is a control step, its branches are compiled models with planned drivers
    (node,) = [n for n in cm.graph.nodes if n.op_type == "If"]
    assert cm.placement[id(node)] == CONTROL
    assert "control flow with compiled bodies 1, interpreted 0" in cm.summary()
    steps = [st for st in cm.steps if isinstance(st, InterpStep)]
    assert len(steps) == 1 and isinstance(steps[0], ControlStep) and steps[0].node is node
    assert id(node) not in cm._runners  # no interpreter runner was built for it
    flow = cm._flows[id(node)]
    for body in flow.bodies.values():
        assert isinstance(body, Body) and body.model.fallback_nodes() == []
        assert not any(isinstance(st, InterpStep) for st in body.model.steps)
        assert list(body.model.plans()), "the branch ran no compiled plan"
        assert [v.name for v in body.model.graph.inputs] == [n for n, _ in body.outer]


def test_if_never_calls_the_interpreter(monkeypatch):
    from jitort.interpreter import reference
    cm = jitort.compile(_if_model(), strict=True, threads=1)

    def refuse(*a, **k):
        raise AssertionError("the interpreter ran a node")
    monkeypatch.setattr(reference.ReferenceRunner, "__call__", refuse)
    x = np.ones((2, 4), np.float32)
    for c in (True, False):
        feeds = {"x": x, "c": np.array(c)}
        assert_outputs_close(cm.run(None, feeds), run_onnxruntime(_if_model(), feeds))


# --- Loop --------------------------------------------------------------------------------------

def _loop_model():
    """Loop(M, cond) carrying acc (N,) and a counter k, with scan outputs acc and k; the body
    stops when k reaches the outer ``limit`` and nests an If on the iteration number that reads
    the outer ``x`` (a value two scopes up)."""
    inner_then = _g([helper.make_node("Mul", ["a1", "x"], ["it"])], "ithen", [], [("it", F32, None)])
    inner_else = _g([helper.make_node("Sub", ["a1", "x"], ["ie"])], "ielse", [], [("ie", F32, None)])
    body = _g([
        helper.make_node("Cast", ["i"], ["fi"], to=F32),
        helper.make_node("Add", ["acc", "fi"], ["a1"]),
        helper.make_node("Greater", ["i", "one_i"], ["big"]),
        helper.make_node("If", ["big"], ["a2"], then_branch=inner_then, else_branch=inner_else),
        helper.make_node("Add", ["k", "one_i"], ["k2"]),
        helper.make_node("Less", ["k2", "limit"], ["c2"]),
        helper.make_node("Identity", ["a2"], ["a_scan"]),
        helper.make_node("Identity", ["k2"], ["k_scan"]),
    ], "body", [("i", I64, []), ("c", B, []), ("acc", F32, ["N"]), ("k", I64, [])],
        [("c2", B, []), ("a2", F32, ["N"]), ("k2", I64, []), ("a_scan", F32, ["N"]),
         ("k_scan", I64, [])], inits=[("one_i", np.int64(1))])
    nodes = [helper.make_node("Loop", ["M", "cond", "x0", "k0"], ["acc_f", "k_f", "accs", "ks"],
                              body=body)]
    return make_model(nodes, [("M", I64, []), ("cond", B, []), ("x0", F32, ["N"]),
                              ("k0", I64, []), ("x", F32, ["N"]), ("limit", I64, [])],
                      [("acc_f", F32, None), ("k_f", I64, None), ("accs", F32, None),
                       ("ks", I64, None)])


def test_loop_with_counter_condition_carried_values_scan_outputs_and_nested_if():
    rng = np.random.default_rng(1)
    x, x0 = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    feeds = [dict(M=np.array(m, np.int64), cond=np.array(c), x0=x0[:n], k0=np.array(0, np.int64),
                  x=x[:n], limit=np.array(lim, np.int64))
             for m, c, n, lim in [(6, True, 5, 100),  # the trip count stops it
                                  (9, True, 5, 3),  # the condition stops it
                                  (4, True, 2, 100)]]  # other shapes: planned again
    cm = _strict_same(_loop_model(), feeds)
    (node,) = cm.graph.nodes
    assert isinstance(cm.steps[0], ControlStep)
    inner = cm._flows[id(node)].body.model
    assert [n.op_type for n in inner.graph.nodes if inner.placement[id(n)] == CONTROL] == ["If"]


def test_loop_zero_iterations_returns_initial_values_and_empty_scans():
    cm = jitort.compile(_loop_model(), strict=True, threads=1)
    x0 = np.arange(3, dtype=np.float32)
    got = cm.run(None, dict(M=np.array(0, np.int64), cond=np.array(True), x0=x0,
                            k0=np.array(7, np.int64), x=x0, limit=np.array(9, np.int64)))
    np.testing.assert_array_equal(got[0], x0)
    assert got[0] is not x0 and int(got[1]) == 7
    assert got[2].shape[0] == 0 and got[3].shape[0] == 0


def _slice_loop_model():
    """onnx's loop11 form: y += x[i:i+1] each iteration i, scanned; the Slice's bounds come from
    the iteration number (computed on the host: one plan per iteration value)."""
    body = _g([helper.make_node("Add", ["i", "one"], ["end"]),
               helper.make_node("Unsqueeze", ["i", "zero"], ["st"]),
               helper.make_node("Unsqueeze", ["end", "zero"], ["en"]),
               helper.make_node("Slice", ["x", "st", "en"], ["sl"]),
               helper.make_node("Add", ["y", "sl"], ["y2"]),
               helper.make_node("Identity", ["y2"], ["ys"]),
               helper.make_node("Identity", ["c"], ["c2"])],
              "body", [("i", I64, []), ("c", B, []), ("y", F32, [1])],
              [("c2", B, []), ("y2", F32, [1]), ("ys", F32, [1])],
              inits=[("one", np.int64(1)), ("zero", np.array([0], np.int64))])
    nodes = [helper.make_node("Loop", ["M", "", "y0"], ["y_f", "ys_all"], body=body)]
    return make_model(nodes, [("M", I64, []), ("y0", F32, [1]), ("x", F32, [5])],
                      [("y_f", F32, None), ("ys_all", F32, None)])


def test_loop_slicing_by_the_iteration_number():
    feeds = [{"M": np.array(5, np.int64), "y0": np.float32([-2]),
              "x": np.arange(1, 6, dtype=np.float32)}]
    cm = _strict_same(_slice_loop_model(), feeds)
    body = cm._flows[id(cm.graph.nodes[0])].body.model
    # i (a scalar) is a plan-time value: its Add/Unsqueeze chain runs on the host
    (seg,) = [st for st in body.steps if isinstance(st, Segment)]
    assert [v.name for v in seg.value_inputs] == ["i"]
    assert body.plan_cache_size == body.PLAN_TIME_CACHE_SIZE


def _growing_model(scan_it: bool):
    """Loop M times: s = Concat(s, [i]) (a carried value that grows); optionally scanned."""
    body = _g([helper.make_node("Cast", ["i"], ["fi"], to=F32),
               helper.make_node("Unsqueeze", ["fi", "zero"], ["fi1"]),
               helper.make_node("Concat", ["s", "fi1"], ["s2"], axis=0),
               helper.make_node("Identity", ["c"], ["c2"])]
              + ([helper.make_node("Identity", ["s2"], ["s_scan"])] if scan_it else []),
              "body", [("i", I64, []), ("c", B, []), ("s", F32, [None])],
              [("c2", B, []), ("s2", F32, [None])] + ([("s_scan", F32, [None])] if scan_it else []),
              inits=[("zero", np.array([0], np.int64))])
    outs = ["s_f", "s_all"] if scan_it else ["s_f"]
    nodes = [helper.make_node("Loop", ["M", "", "s0"], outs, body=body)]
    return make_model(nodes, [("M", I64, []), ("s0", F32, [None])],
                      [(o, F32, None) for o in outs])


def test_loop_carried_value_that_grows_is_planned_per_shape():
    feeds = [{"M": np.array(4, np.int64), "s0": np.array([5.0], np.float32)}]
    _strict_same(_growing_model(False), feeds)


def test_scan_output_that_changes_shape_is_declined_with_the_reason():
    m = _growing_model(True)
    cm = jitort.compile(m, strict=True, threads=1)
    feeds = {"M": np.array(3, np.int64), "s0": np.array([5.0], np.float32)}
    with pytest.raises(jitort.UnsupportedOp, match="'s_all' changes shape between iterations"):
        cm.run(None, feeds)


# --- Scan --------------------------------------------------------------------------------------

def _scan_model():
    """Scan with one state and two scan inputs (x1 forward on axis 0, x2 reversed on axis 1)
    reading an outer ``w``; scan outputs y1 (axis 0, forward) and y2 (axis 1, reversed)."""
    body = _g([helper.make_node("Add", ["s", "a"], ["s1"]),
               helper.make_node("Mul", ["s1", "w"], ["s2"]),
               helper.make_node("Sub", ["s2", "b"], ["y1"]),
               helper.make_node("Neg", ["s2"], ["y2"])],
              "body", [("s", F32, [4]), ("a", F32, [4]), ("b", F32, [4])],
              [("s2", F32, [4]), ("y1", F32, [4]), ("y2", F32, [4])])
    node = helper.make_node("Scan", ["s0", "x1", "x2"], ["s_f", "y1s", "y2s"], body=body,
                            num_scan_inputs=2, scan_input_directions=[0, 1],
                            scan_input_axes=[0, 1], scan_output_directions=[0, 1],
                            scan_output_axes=[0, -1])
    return make_model([node], [("s0", F32, [4]), ("x1", F32, ["T", 4]), ("x2", F32, [4, "T"]),
                               ("w", F32, [4])],
                      [("s_f", F32, None), ("y1s", F32, None), ("y2s", F32, None)])


def test_scan_with_state_directions_and_axes():
    rng = np.random.default_rng(2)
    feeds = [{"s0": rng.standard_normal(4).astype(np.float32),
              "x1": rng.standard_normal((t, 4)).astype(np.float32),
              "x2": rng.standard_normal((4, t)).astype(np.float32),
              "w": np.float32([0.5, -1, 0.25, 1.5])} for t in (5, 2)]
    cm = _strict_same(_scan_model(), feeds)
    assert isinstance(cm.steps[0], ControlStep)


# --- declined bodies ---------------------------------------------------------------------------

def _if_with_bernoulli():
    # Bernoulli (a random generator) stays interpreted; on probabilities 0 and 1, deterministic
    then = _g([helper.make_node("Bernoulli", ["x"], ["t"])], "then", [], [("t", F32, None)])
    orelse = _g([helper.make_node("Neg", ["x"], ["e"])], "else", [], [("e", F32, None)])
    nodes = [helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=orelse)]
    return make_model(nodes, [("x", F32, [3]), ("c", B, [])], [("z", F32, None)])


def test_a_body_that_cannot_compile_leaves_the_node_interpreted_with_the_reason():
    with pytest.raises(jitort.UnsupportedOp, match=r"If.*body not compiled.*Bernoulli"):
        jitort.compile(_if_with_bernoulli(), strict=True)
    cm = jitort.compile(_if_with_bernoulli(), threads=1)
    (label,) = cm.fallback_nodes()
    assert "Bernoulli" in cm.fallback_reasons[label]
    x = np.array([0, 1, 0], np.float32)
    feeds = {"x": x, "c": np.array(True)}
    # onnx.reference, not onnxruntime: onnxruntime 1.32's Bernoulli draws 1 for p = 0
    assert_outputs_close(cm.run(None, feeds), run_reference(_if_with_bernoulli(), feeds))
