"""Sequence and optional values run as control steps (jitort/sequences.py), in strict mode.

Each container op against onnx.reference (onnxruntime where the reference differs from the
spec: its Optional wraps the value in a list, its SequenceInsert wraps position n, the end,
to 0 and divides by zero inserting at a position into an empty sequence, its SequenceMap fails
on an empty sequence) on several inputs, negative positions and empty sequences included; a
model mixing sequence ops with compiled tensor ops against onnxruntime, with its structure
(sequence ops on control steps, no interpreter runner); SequenceMap and a Loop carrying a
sequence with compiled bodies; bad positions, element types and feeds refused with
:class:`jitort.InvalidInput`."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import jitort
from jitort.partition import CONTROL, ControlStep

from .helpers import F32, I64, run_onnxruntime, run_reference

OPSET = 18
I32 = TensorProto.INT32


def _seq(name, elem=F32, shape=None):
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def _tensor(name, elem=F32, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs,
                          [helper.make_tensor(n, t, np.shape(a), np.ravel(a)) for n, t, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8  # what onnxruntime reads
    return m


def _strict(m):
    cm = jitort.compile(m, strict=True, tiered=False, threads=1)
    assert cm.fallback_nodes() == []
    for n in cm.graph.nodes:
        if n.op_type.startswith(("Sequence", "Optional")) or n.op_type.endswith("Sequence"):
            assert cm.placement[id(n)] == CONTROL, n.label
            assert id(n) not in cm._runners, f"{n.label} has an interpreter runner"
    return cm


def _same(got, want):
    """Exact equality: arrays (dtype, shape, values), sequences element by element, None."""
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    if want is None:
        assert got is None
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape,
                                                                 want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)


def _elements(n, shape=(2, 3), seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for _ in range(n)]


# --- container ops against onnx.reference ------------------------------------------------------

def _position_model(op, with_pos, out_is_seq=True):
    ins = ["S", "T"] if op == "SequenceInsert" else ["S"]
    inputs = [_seq("S")] + ([_tensor("T")] if op == "SequenceInsert" else [])
    if with_pos:
        ins.append("p")
        inputs.append(_tensor("p", I64, []))
    out = _seq("Y") if out_is_seq else _tensor("Y")
    return _model([helper.make_node(op, ins, ["Y"])], inputs, [out])


@pytest.mark.parametrize("pos", [None, 0, 1, 3, -1, -3])
def test_sequence_insert(pos):
    m = _position_model("SequenceInsert", pos is not None)
    feeds = {"S": _elements(3), "T": _elements(1, seed=1)[0]}
    if pos is not None:
        feeds["p"] = np.array(pos, np.int64)
    got = _strict(m).run(None, feeds)
    _same(got, run_onnxruntime(m, feeds))
    if pos != 3:  # the reference wraps position n (the end) to 0
        _same(got, run_reference(m, feeds))


@pytest.mark.parametrize("pos", [None, 0, 2, -1, -3])
def test_sequence_erase(pos):
    m = _position_model("SequenceErase", pos is not None)
    feeds = {"S": _elements(3)}
    if pos is not None:
        feeds["p"] = np.array(pos, np.int64)
    _same(_strict(m).run(None, feeds), run_reference(m, feeds))


@pytest.mark.parametrize("pos", [0, 2, -1, -3])
def test_sequence_at(pos):
    m = _position_model("SequenceAt", True, out_is_seq=False)
    feeds = {"S": _elements(3), "p": np.array(pos, np.int64)}
    _same(_strict(m).run(None, feeds), run_reference(m, feeds))


def test_sequence_at_int32_position_and_length_of_empty():
    nodes = [helper.make_node("SequenceAt", ["S", "p"], ["a"]),
             helper.make_node("SequenceLength", ["S"], ["n"]),
             helper.make_node("SequenceEmpty", [], ["E"], dtype=TensorProto.INT64),
             helper.make_node("SequenceLength", ["E"], ["n0"])]
    m = _model(nodes, [_seq("S"), _tensor("p", I32, [])],
               [_tensor("a"), _tensor("n", I64, []), _tensor("n0", I64, [])])
    feeds = {"S": _elements(4, (5,)), "p": np.array(-2, np.int32)}
    got = _strict(m).run(None, feeds)
    _same(got, run_reference(m, feeds))
    assert got[2] == 0 and got[1] == 4


def test_insert_into_empty_sequence_then_construct_and_erase():
    """SequenceEmpty, inserts at the end and at position 0 (-n of a one-element sequence),
    SequenceConstruct, erase of the last element (onnxruntime: the reference divides by zero
    inserting at a position into an empty sequence)."""
    nodes = [helper.make_node("SequenceEmpty", [], ["E"]),
             helper.make_node("SequenceInsert", ["E", "x"], ["S1"]),
             helper.make_node("SequenceInsert", ["S1", "y", "m1"], ["S2"]),
             helper.make_node("SequenceConstruct", ["x", "y", "x"], ["C"]),
             helper.make_node("SequenceErase", ["C"], ["C2"]),
             helper.make_node("ConcatFromSequence", ["S2"], ["a"], axis=0),
             helper.make_node("ConcatFromSequence", ["C2"], ["b"], axis=1)]
    m = _model(nodes, [_tensor("x", F32, [2, 2]), _tensor("y", F32, [2, 2])],
               [_seq("S2"), _tensor("a"), _tensor("b")], [("m1", I64, np.array(-1))])
    x, y = _elements(2, (2, 2))
    got = _strict(m).run(None, {"x": x, "y": y})
    _same(got, run_onnxruntime(m, {"x": x, "y": y}))
    _same(got[0], [y, x])


@pytest.mark.parametrize("attrs,split", [
    ({"axis": 1}, None), ({"axis": 1, "keepdims": 0}, None), ({"axis": -1, "keepdims": 0}, None),
    ({"axis": 0}, np.array(2, np.int64)), ({"axis": 1}, np.array(3, np.int32)),
    ({"axis": -2}, np.array([1, 0, 4], np.int64))])
def test_split_to_sequence(attrs, split):
    ins, inputs = ["x"], [_tensor("x", F32, [5, 4])]
    if split is not None:
        ins.append("split")
        elem = I32 if split.dtype == np.int32 else I64
        inputs.append(_tensor("split", elem, list(split.shape)))
    m = _model([helper.make_node("SplitToSequence", ins, ["S"], **attrs)], inputs, [_seq("S")])
    feeds = {"x": np.arange(20, dtype=np.float32).reshape(5, 4)}
    if split is not None:
        feeds["split"] = split
    got = _strict(m).run(None, feeds)
    _same(got, run_reference(m, feeds))
    assert all(a.flags.c_contiguous for a in got[0])


@pytest.mark.parametrize("axis,new_axis", [(0, 0), (-1, 0), (1, 0), (0, 1), (2, 1), (-3, 1)])
def test_concat_from_sequence(axis, new_axis):
    m = _model([helper.make_node("ConcatFromSequence", ["S"], ["y"], axis=axis,
                                 new_axis=new_axis)], [_seq("S")], [_tensor("y")])
    feeds = {"S": _elements(3)}
    _same(_strict(m).run(None, feeds), run_reference(m, feeds))


def test_optional_ops_against_onnxruntime():
    opt_seq = helper.make_optional_type_proto(helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(F32, None)))
    nodes = [helper.make_node("Optional", ["x"], ["ox"]),
             helper.make_node("OptionalHasElement", ["ox"], ["has_x"]),
             helper.make_node("OptionalGetElement", ["ox"], ["gx"]),
             helper.make_node("Optional", [], ["none"], type=opt_seq.optional_type.elem_type),
             helper.make_node("OptionalHasElement", ["none"], ["has_none"]),
             helper.make_node("SequenceConstruct", ["x", "x"], ["S"]),
             helper.make_node("Optional", ["S"], ["oS"]),
             helper.make_node("OptionalGetElement", ["oS"], ["gS"]),
             helper.make_node("Identity", ["gS"], ["iS"])]
    m = _model(nodes, [_tensor("x", F32, [2])],
               [_tensor("has_x", TensorProto.BOOL, []), _tensor("gx", F32, [2]),
                _tensor("has_none", TensorProto.BOOL, []), _seq("iS")])
    feeds = {"x": np.array([1.5, -2], np.float32)}
    got = _strict(m).run(None, feeds)
    _same(got, run_onnxruntime(m, feeds))
    assert got[0] and not got[2]


def test_optional_graph_input_none_and_value():
    opt = helper.make_value_info("o", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(F32, [3])))
    m = _model([helper.make_node("OptionalHasElement", ["o"], ["h"])], [opt],
               [_tensor("h", TensorProto.BOOL, [])])
    cm = _strict(m)
    assert cm.run(None, {"o": None})[0] == np.array(False)
    assert cm.run(None, {"o": np.zeros(3, np.float32)})[0] == np.array(True)


def test_graph_input_sequence_and_optional_returned_as_outputs():
    """A graph output that is a sequence / optional graph input comes back as a list of
    copies / None (as onnxruntime returns them), not stacked into one array."""
    opt = helper.make_value_info("o", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(F32, [3])))
    m = _model([helper.make_node("SequenceLength", ["S"], ["n"])], [_seq("S"), opt],
               [_tensor("n", I64, []), _seq("S"), opt])
    S = _elements(2, (2,)) + _elements(1, (3,))
    n, got, o = _strict(m).run(None, {"S": S, "o": None})
    assert n == 3 and o is None
    _same(got, S)
    assert all(g is not s for g, s in zip(got, S)), "the caller owns the arrays returned"


# --- compiled tensor ops around sequence steps -------------------------------------------------

def test_mixed_model_strict_equals_onnxruntime():
    """Compiled Relu/Mul before, Add/Sigmoid between and after the sequence steps; the sequence
    itself a graph output."""
    nodes = [helper.make_node("Mul", ["x", "two"], ["m"]),
             helper.make_node("Relu", ["m"], ["a"]),
             helper.make_node("SplitToSequence", ["a"], ["S"], axis=1),
             helper.make_node("SequenceAt", ["S", "last"], ["t"]),
             helper.make_node("Add", ["t", "two"], ["u"]),
             helper.make_node("SequenceInsert", ["S", "u", "zero"], ["S2"]),
             helper.make_node("ConcatFromSequence", ["S2"], ["c"], axis=1),
             helper.make_node("Sigmoid", ["c"], ["z"]),
             helper.make_node("SequenceLength", ["S2"], ["n"])]
    m = _model(nodes, [_tensor("x", F32, [3, 4])],
               [_tensor("z"), _tensor("n", I64, []), _seq("S2")],
               [("two", F32, np.array(2.0)), ("last", I64, np.array(-1)),
                ("zero", I64, np.array(0))])
    cm = _strict(m)
    assert len(cm.compiled_segments()) >= 2
    assert sum(isinstance(st, ControlStep) for st in cm.steps) == 5
    rng = np.random.default_rng(3)
    for _ in range(2):
        x = rng.standard_normal((3, 4)).astype(np.float32)
        got, want = cm.run(None, {"x": x}), run_onnxruntime(m, {"x": x})
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-7)
        _same(got[1:], want[1:])


def test_sequence_map_compiled_body():
    body = helper.make_graph(
        [helper.make_node("Mul", ["e", "w"], ["p"]), helper.make_node("Shape", ["p"], ["s"])],
        "body", [_tensor("e", F32, ["N"]), _tensor("w", F32, [1])],
        [_tensor("p", F32, ["N"]), _tensor("s", I64, [1])])
    m = _model([helper.make_node("SequenceMap", ["S", "w"], ["P", "Sh"], body=body)],
               [_seq("S", F32, ["N"]), _tensor("w", F32, [1])],
               [_seq("P", F32, ["N"]), _seq("Sh", I64, [1])])
    cm = _strict(m)
    (node,) = cm.graph.nodes
    assert cm._flows[id(node)].body.model.fallback_nodes() == []
    for n in (3, 0):
        feeds = {"S": [np.arange(k + 1, dtype=np.float32) for k in range(n)],
                 "w": np.array([1.5], np.float32)}
        got = cm.run(None, feeds)
        _same(got, run_onnxruntime(m, feeds))
        if n:  # the reference fails on an empty sequence
            _same(got, run_reference(m, feeds))


def test_loop_carrying_a_sequence():
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Cast", ["i"], ["f"], to=F32),
         helper.make_node("Mul", ["f", "x"], ["v"]),
         helper.make_node("SequenceInsert", ["s_in", "v"], ["s_out"])],
        "body", [_tensor("i", I64, []), _tensor("c_in", TensorProto.BOOL, []), _seq("s_in")],
        [_tensor("c_out", TensorProto.BOOL, []), _seq("s_out")])
    nodes = [helper.make_node("SequenceEmpty", [], ["E"]),
             helper.make_node("Loop", ["n", "", "E"], ["S"], body=body),
             helper.make_node("ConcatFromSequence", ["S"], ["y"], axis=0, new_axis=1)]
    m = _model(nodes, [_tensor("n", I64, []), _tensor("x", F32, [2])],
               [_seq("S"), _tensor("y")])
    cm = _strict(m)
    feeds = {"n": np.array(4, np.int64), "x": np.array([1, -2], np.float32)}
    _same(cm.run(None, feeds), run_onnxruntime(m, feeds))


# --- bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize("op,n,pos", [("SequenceAt", 3, 3), ("SequenceAt", 3, -4),
                                      ("SequenceAt", 0, 0), ("SequenceErase", 2, 2),
                                      ("SequenceInsert", 2, 3), ("SequenceInsert", 2, -3)])
def test_position_out_of_range_raises(op, n, pos):
    m = _position_model(op, True, out_is_seq=op != "SequenceAt")
    feeds = {"S": _elements(n), "p": np.array(pos, np.int64)}
    if op == "SequenceInsert":
        feeds["T"] = _elements(1)[0]
    with pytest.raises(jitort.InvalidInput, match=f"position {pos} is out of range"):
        _strict(m).run(None, feeds)


def test_bad_values_raise():
    m = _position_model("SequenceInsert", False)
    cm = _strict(m)
    with pytest.raises(jitort.InvalidInput, match="element 0 of the input sequence is int32, "
                                                   "the model declares float32"):
        cm.run(None, {"S": _elements(1, dtype=np.int32), "T": _elements(1)[0]})
    with pytest.raises(jitort.InvalidInput, match="must be a sequence"):
        cm.run(None, {"S": np.zeros(3, np.float32), "T": _elements(1)[0]})
    with pytest.raises(jitort.InvalidInput, match="cannot erase from an empty sequence"):
        _strict(_position_model("SequenceErase", False)).run(None, {"S": []})
    concat = _model([helper.make_node("ConcatFromSequence", ["S"], ["y"], axis=0)],
                    [_seq("S")], [_tensor("y")])
    with pytest.raises(jitort.InvalidInput, match="empty sequence"):
        _strict(concat).run(None, {"S": []})
    opt = helper.make_value_info("o", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(F32, [3])))
    get = _model([helper.make_node("OptionalGetElement", ["o"], ["y"])], [opt],
                 [_tensor("y", F32, [3])])
    with pytest.raises(jitort.InvalidInput, match="optional input is empty"):
        _strict(get).run(None, {"o": None})
