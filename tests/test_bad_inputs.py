"""Bad feeds and malformed models: each raises the expected jitort exception naming the culprit.

Every case runs in its own forked child of one fresh ``python`` process (``python -m
tests.test_bad_inputs CASE...``) that has imported jitort but run no kernel: forking after
OpenMP's threads exist can hang, and a case that segfaults or aborts must show up as a failed
test, not as a dead test session. The children load their kernels from the on-disk cache.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import TIERS, run_tier

ROOT = Path(__file__).resolve().parents[1]
CASE_TIMEOUT_S = 60

#: name -> (function that must raise, expected exception class name, regex the message matches)
CASES: dict[str, tuple] = {}


def case(exc: str, match: str):
    def deco(fn):
        CASES[fn.__name__] = (fn, exc, match)
        return fn
    return deco


#: Not jitort errors on purpose: what debug mode turns an out-of-bounds access into.
RAW_ERRORS = {"debug_mode_catches_out_of_bounds_read_x0",
              "debug_mode_catches_out_of_bounds_read_x1"}


# --- models the cases use ----------------------------------------------------------------------
F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    from tests.helpers import make_model
    return make_model(nodes, inputs, outputs, initializers, opset)


def _add():
    import jitort
    return jitort.compile(_model([helper.make_node("Add", ["x", "y"], ["z"])],
                                 [("x", F32, ["N", 4]), ("y", F32, ["N", 4])], [("z", F32, None)]))


def _ok(n=2, dtype=np.float32):
    return np.ones((n, 4), dtype)


def _run(m, *args, **kw):
    import jitort
    return jitort.compile(m)(*args, **kw)


def _compile(m):
    import jitort
    return jitort.compile(m)


# --- feeds: names ---------------------------------------------------------------------------
@case("InvalidInput", r"missing input 'y' \(float32\['N', 4\]\)")
def feed_missing():
    _add().run(None, {"x": _ok()})


@case("InvalidInput", r"unknown input name\(s\) \['w'\]")
def feed_extra():
    _add().run(None, {"x": _ok(), "y": _ok(), "w": _ok()})


@case("InvalidInput", r"unknown input name\(s\) \['Y'\].*inputs are \['x', 'y'\]")
def feed_misnamed():
    _add().run(None, {"x": _ok(), "Y": _ok()})


@case("InvalidInput", r"unknown input name\(s\) \[3\]")
def feed_non_string_key():
    _add().run(None, {"x": _ok(), 3: _ok()})


@case("InvalidInput", "model takes 2 inputs, got 3 positional")
def feed_too_many_positional():
    _add()(_ok(), _ok(), _ok())


@case("InvalidInput", "input 'x' given both positionally and by name")
def feed_positional_and_keyword():
    _add()(_ok(), x=_ok())


@case("InvalidInput", r"unknown output name\(s\) \['nope'\]")
def feed_unknown_output():
    _add().run(["nope"], {"x": _ok(), "y": _ok()})


@case("InvalidInput", "feeds must be a dict")
def feed_not_a_dict():
    _add().run(None, [_ok(), _ok()])


# --- feeds: dtype -------------------------------------------------------------------------------
@case("InvalidInput", "input 'y' has dtype float64, expected float32")
def feed_dtype_float64():
    _add().run(None, {"x": _ok(), "y": _ok(dtype=np.float64)})


@case("InvalidInput", "input 'x' has dtype int32, expected float32")
def feed_dtype_int32():
    _add().run(None, {"x": _ok(dtype=np.int32), "y": _ok()})


@case("InvalidInput", "input 'x' has dtype bool, expected float32")
def feed_dtype_bool():
    _add().run(None, {"x": _ok(dtype=bool), "y": _ok()})


@case("InvalidInput", "input 'y' has dtype float16, expected float32")
def feed_dtype_float16():
    _add().run(None, {"x": _ok(), "y": _ok(dtype=np.float16)})


@case("InvalidInput", "input 'y' has dtype complex64, expected float32")
def feed_dtype_complex():
    _add().run(None, {"x": _ok(), "y": _ok(dtype=np.complex64)})


@case("InvalidInput", "input 'y' has dtype object, expected float32")
def feed_dtype_object():
    _add().run(None, {"x": _ok(), "y": np.array([[1.0, "a", None, 2]] * 2, dtype=object)})


@case("InvalidInput", "input 'y' has dtype float64, expected float32.*astype")
def feed_python_list_is_not_cast():
    _add().run(None, {"x": _ok(), "y": [[1.0] * 4] * 2})


@case("InvalidInput", "input 'i' has dtype int32, expected int64")
def feed_index_dtype():
    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    m = _model([helper.make_node("Gather", ["t", "i"], ["y"])], [("i", I64, ["K"])],
               [("y", F32, None)], {"t": table})
    _run(m, np.array([0, 1], np.int32))


# --- feeds: not arrays ----------------------------------------------------------------------------
@case("InvalidInput", "input 'y' must be a numpy array, got str")
def feed_string():
    _add().run(None, {"x": _ok(), "y": "not an array"})


@case("InvalidInput", "input 'y' must be a numpy array, got NoneType")
def feed_none():
    _add().run(None, {"x": _ok(), "y": None})


@case("InvalidInput", "input 'y' cannot be converted to an array")
def feed_ragged_list():
    _add().run(None, {"x": _ok(), "y": [[1.0, 2.0], [3.0]]})


@case("InvalidInput", "input 'y' must be a numpy array, got dict")
def feed_dict_value():
    _add().run(None, {"x": _ok(), "y": {"a": 1}})


# --- feeds: rank and dims -----------------------------------------------------------------------
@case("InvalidInput", r"input 'y' has rank 1 \(shape \(4,\)\), expected rank 2")
def feed_rank_low():
    _add().run(None, {"x": _ok(), "y": np.ones(4, np.float32)})


@case("InvalidInput", r"input 'x' has rank 3 \(shape \(1, 2, 4\)\), expected rank 2")
def feed_rank_high():
    _add().run(None, {"x": np.ones((1, 2, 4), np.float32), "y": _ok()})


@case("InvalidInput", r"input 'y' has rank 0")
def feed_scalar():
    _add().run(None, {"x": _ok(), "y": np.float32(1)})


@case("InvalidInput", r"input 'y' has shape \(2, 5\): dim 1 must be 4")
def feed_fixed_dim():
    _add().run(None, {"x": _ok(), "y": np.ones((2, 5), np.float32)})


@case("InvalidInput", r"input 'y' has shape \(2, 0\): dim 1 must be 4")
def feed_fixed_dim_zero():
    _add().run(None, {"x": _ok(), "y": np.ones((2, 0), np.float32)})


@case("InvalidInput", r"input 'y' dim 0 \(N\) is 3 but input 'x' has N=2")
def feed_symbolic_conflict():
    _add().run(None, {"x": _ok(2), "y": _ok(3)})


@case("InvalidInput", r"input 'b' dim 1 \(S\) is 5 but input 'a' has S=4")
def feed_symbolic_conflict_across_dims():
    m = _model([helper.make_node("MatMul", ["a", "b"], ["c"])],
               [("a", F32, ["B", "S"]), ("b", F32, ["S", "S"])], [("c", F32, None)])
    _run(m, np.ones((2, 4), np.float32), np.ones((4, 5), np.float32))


# --- shapes that contradict the model (found when planning, before any kernel) ------------------
@case("InvalidInput", r"node MatMul\(mm\): inner dimensions differ \(7 vs 8\)")
def shape_matmul_inner():
    w = np.ones((8, 16), np.float32)
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
               [("x", F32, ["B", "K"])], [("y", F32, None)], {"w": w})
    _run(m, np.ones((2, 7), np.float32))


@case("InvalidInput", r"node Add\(add\): .*not broadcastable")
def shape_broadcast_conflict():
    m = _model([helper.make_node("Add", ["x", "y"], ["z"], name="add")],
               [("x", F32, ["N"]), ("y", F32, ["M"])], [("z", F32, None)])
    _run(m, np.ones(3, np.float32), np.ones(4, np.float32))


@case("InvalidInput", r"Reshape\(r\)")
def shape_reshape_constant_target():
    m = _model([helper.make_node("Reshape", ["x", "s"], ["y"], name="r")],
               [("x", F32, ["N"])], [("y", F32, None)], {"s": np.array([3, 4], np.int64)})
    _run(m, np.ones(10, np.float32))


@case("InvalidInput", r"Reshape\(r\)")
def shape_reshape_fed_target():
    m = _model([helper.make_node("Reshape", ["x", "s"], ["y"], name="r"),
                helper.make_node("Relu", ["y"], ["z"])],
               [("x", F32, ["N"]), ("s", I64, [2])], [("z", F32, None)])
    _run(m, np.ones(10, np.float32), np.array([-1, -1], np.int64))


@case("InvalidInput", r"Expand\(e\)")
def shape_expand_conflict():
    m = _model([helper.make_node("Expand", ["x", "s"], ["y"], name="e")],
               [("x", F32, ["N"]), ("s", I64, [1])], [("y", F32, None)])
    _run(m, np.ones(2, np.float32), np.array([3], np.int64))


@case("InvalidInput", r"Concat\(c\)")
def shape_concat_conflict():
    m = _model([helper.make_node("Concat", ["x", "y"], ["z"], axis=0, name="c")],
               [("x", F32, ["N", "A"]), ("y", F32, ["M", "B"])], [("z", F32, None)])
    _run(m, np.ones((2, 2), np.float32), np.ones((2, 3), np.float32))


def _conv_model():
    w = np.ones((4, 3, 3, 3), np.float32)
    return _model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")],
                  [("x", F32, ["B", "C", "H", "W"])], [("y", F32, None)], {"w": w})


@case("InvalidInput", r"node Conv\(conv\): input channels 2 != W channels 3")
def shape_conv_channels():
    _run(_conv_model(), np.ones((1, 2, 8, 8), np.float32))


@case("InvalidInput", r"node Conv\(conv\): window 3 is larger than padded input 2")
def shape_conv_window():
    _run(_conv_model(), np.ones((1, 3, 2, 8), np.float32))


@case("InvalidInput", r"Split\(s\)")
def shape_split_sizes():
    m = _model([helper.make_node("Split", ["x", "sp"], ["a", "b"], axis=0, name="s")],
               [("x", F32, ["N"])], [("a", F32, None), ("b", F32, None)],
               {"sp": np.array([2, 2], np.int64)})
    _run(m, np.ones(5, np.float32))


@case("InvalidInput", r"Transpose\(t\)")
def shape_transpose_perm_rank():
    m = _model([helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0], name="t")],
               [("x", F32, None)], [("y", F32, None)])
    _run(m, np.ones((2, 3, 4), np.float32))


# --- values that index out of range -------------------------------------------------------------
def _gather():
    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    return _compile(_model([helper.make_node("Gather", ["t", "i"], ["y"])], [("i", I64, ["K"])],
                           [("y", F32, None)], {"t": table}))


@case("InvalidInput", "out of range")
def index_gather_too_large():
    _gather()(np.array([0, 6], np.int64))


@case("InvalidInput", "out of range")
def index_gather_too_negative():
    _gather()(np.array([-7], np.int64))


@case("InvalidInput", "out of range")
def index_gather_huge():
    _gather()(np.array([2 ** 62], np.int64))


# --- huge shapes: refused before anything is allocated -----------------------------------------
@case("InvalidInput", r"exceeds available memory.*'x' \(1048576, 1\).*'y' \(1, 1048576\)")
def huge_outer_product():
    m = _model([helper.make_node("Mul", ["x", "y"], ["z"])],
               [("x", F32, ["N", 1]), ("y", F32, [1, "M"])], [("z", F32, None)])
    n = 1 << 20
    _run(m, np.ones((n, 1), np.float32), np.ones((1, n), np.float32))


@case("InvalidInput", r"exceeds available memory.*'s'")
def huge_expand():
    m = _model([helper.make_node("Expand", ["x", "s"], ["y"]),
                helper.make_node("Relu", ["y"], ["z"])],
               [("x", F32, [1]), ("s", I64, [2])], [("z", F32, None)])
    _run(m, np.ones(1, np.float32), np.array([1 << 19, 1 << 19], np.int64))


@case("InvalidInput", r"'x' \(shape \(1000000000000, 16\), a non-contiguous view\).*exceeds "
                      r"available memory")
def huge_broadcast_view_feed():
    # a zero-stride view of 10^12 rows would need a 58 TiB contiguous copy: refused, not a
    # MemoryError from numpy
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, ["N", 16])],
               [("y", F32, None)])
    _run(m, np.broadcast_to(np.ones((1, 16), np.float32), (10 ** 12, 16)))


# compiled since issue 20: the plan's memory check refuses the shape before any allocation
@case("JitortError", r"ConstantOfShape|exceeds available memory")
def huge_constant_of_shape():
    m = _model([helper.make_node("ConstantOfShape", ["s"], ["y"])],
               [("s", I64, [2])], [("y", F32, None)])
    _run(m, np.array([1 << 21, 1 << 21], np.int64))


@case("JitortError", r"ConstantOfShape")
def negative_constant_of_shape():
    m = _model([helper.make_node("ConstantOfShape", ["s"], ["y"])],
               [("s", I64, [2])], [("y", F32, None)])
    _run(m, np.array([-1, 3], np.int64))


# --- unreadable models ------------------------------------------------------------------------
def _good_bytes() -> bytes:
    w = np.arange(64, dtype=np.float32).reshape(8, 8)
    return _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F32, ["B", 8])],
                  [("y", F32, None)], {"w": w}).SerializeToString()


@case("InvalidModel", "cannot parse model bytes")
def model_truncated_bytes():
    _compile(_good_bytes()[:-7])


@case("InvalidModel", r"cannot parse model file .*cut\.onnx")
def model_truncated_file():
    d = Path(tempfile.mkdtemp())
    (d / "cut.onnx").write_bytes(_good_bytes()[:-7])
    _compile(d / "cut.onnx")


@case("InvalidModel", "cannot parse model bytes")
def model_random_bytes_0():
    _compile(np.random.default_rng(0).bytes(4096))


@case("InvalidModel", "cannot parse model bytes")
def model_random_bytes_1():
    _compile(np.random.default_rng(1).bytes(300))


@case("InvalidModel", r"cannot parse model file .*junk\.onnx")
def model_random_file():
    d = Path(tempfile.mkdtemp())
    (d / "junk.onnx").write_bytes(np.random.default_rng(2).bytes(1000))
    _compile(d / "junk.onnx")


@case("InvalidModel", "no opset_import")
def model_empty_bytes():
    _compile(b"")


@case("InvalidModel", "model file not found: /nonexistent/m.onnx")
def model_missing_file():
    _compile("/nonexistent/m.onnx")


@case("InvalidModel", "model path is a directory")
def model_directory():
    _compile(tempfile.mkdtemp())


@case("InvalidModel", "cannot load a model from GraphProto")
def model_wrong_object():
    _compile(onnx.load_from_string(_good_bytes()).graph)


# --- malformed graphs ---------------------------------------------------------------------------
@case("InvalidModel", r"graph has a cycle through node (Add\(a\)|Relu\(b\))")
def graph_cycle():
    m = _model([helper.make_node("Add", ["x", "q"], ["p"], name="a"),
                helper.make_node("Relu", ["p"], ["q"], name="b")],
               [("x", F32, [2])], [("q", F32, None)])
    _compile(m)


@case("InvalidModel", r"graph has a cycle through node Relu\(self\)")
def graph_self_loop():
    m = _model([helper.make_node("Relu", ["p"], ["p"], name="self")], [("x", F32, [2])],
               [("p", F32, None)])
    _compile(m)


@case("InvalidModel", r"node Add\(a\) reads undefined value 'w' \(missing initializer")
def graph_missing_initializer():
    m = _model([helper.make_node("Add", ["x", "w"], ["z"], name="a")], [("x", F32, [2])],
               [("z", F32, None)])
    _compile(m)


@case("InvalidModel", r"graph input 'x' has no tensor type")
def graph_untyped_input():
    m = _model([helper.make_node("Relu", ["x"], ["z"])], [], [("z", F32, None)])
    m.graph.input.append(onnx.ValueInfoProto(name="x"))
    _compile(m)


@case("InvalidModel", r"graph output 'q' is never produced")
def graph_output_never_produced():
    m = _model([helper.make_node("Relu", ["x"], ["z"])], [("x", F32, [2])], [("q", F32, None)])
    _compile(m)


@case("InvalidModel", r"value 'z' is defined twice")
def graph_value_defined_twice():
    m = _model([helper.make_node("Relu", ["x"], ["z"]), helper.make_node("Neg", ["x"], ["z"])],
               [("x", F32, [2])], [("z", F32, None)])
    _compile(m)


@case("InvalidModel", r"value 'x' is defined twice")
def graph_duplicate_input():
    m = _model([helper.make_node("Relu", ["x"], ["z"])], [("x", F32, [2]), ("x", F32, [2])],
               [("z", F32, None)])
    _compile(m)


@case("InvalidModel", r"node Constant\(k\): Constant needs exactly one value attribute")
def graph_empty_constant():
    m = _model([helper.make_node("Constant", [], ["c"], name="k"),
                helper.make_node("Add", ["x", "c"], ["z"])], [("x", F32, [2])], [("z", F32, None)])
    _compile(m)


@case("InvalidModel", r"cannot read initializer 'w'")
def graph_corrupt_initializer():
    m = _model([helper.make_node("Add", ["x", "w"], ["z"])], [("x", F32, [4])], [("z", F32, None)],
               {"w": np.ones(4, np.float32)})
    m.graph.initializer[0].raw_data = b"\x00" * 6
    _compile(m)


@case("InvalidModel", "model declares no opset_import")
def graph_no_opset_import():
    m = _model([helper.make_node("Relu", ["x"], ["z"])], [("x", F32, [2])], [("z", F32, None)])
    del m.opset_import[:]
    _compile(m)


@case("UnsupportedOp", r"node Frob\(f\) uses domain 'com\.acme', which the model does not import")
def graph_undeclared_domain():
    m = _model([helper.make_node("Frob", ["x"], ["z"], domain="com.acme", name="f")],
               [("x", F32, [2])], [("z", F32, None)])
    _compile(m)


@case("UnsupportedOp", r"node FrobnicateX\(f\): no implementation of op 'FrobnicateX' in domain "
                       r"'com\.example'")
def graph_unknown_op_custom_domain():
    m = _model([helper.make_node("FrobnicateX", ["x"], ["z"], domain="com.example", name="f")],
               [("x", F32, [2])], [("z", F32, None)])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    _compile(m)


@case("UnsupportedOp", r"node NotAnOp\(n\): no implementation of op 'NotAnOp' in domain 'ai\.onnx'")
def graph_unknown_op_default_domain():
    m = _model([helper.make_node("NotAnOp", ["x"], ["z"], name="n")], [("x", F32, [2])],
               [("z", F32, None)])
    _compile(m)


@case("UnsupportedOp", r"model imports opset 99 of domain 'ai\.onnx'; the newest")
def graph_future_opset():
    m = _model([helper.make_node("Relu", ["x"], ["z"], name="old")], [("x", F32, [2])],
               [("z", F32, None)], opset=99)
    _compile(m)(np.ones(2, np.float32))


# --- external data ----------------------------------------------------------------------------
def _external_model(location: str, length: int = 16) -> Path:
    t = numpy_helper.from_array(np.ones(4, np.float32), "w")
    t.data_location = TensorProto.EXTERNAL
    t.ClearField("raw_data")
    for k, v in (("location", location), ("offset", "0"), ("length", str(length))):
        e = t.external_data.add()
        e.key, e.value = k, v
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["z"])], "g",
                          [helper.make_tensor_value_info("x", F32, [4])],
                          [helper.make_tensor_value_info("z", F32, None)], [t])
    d = Path(tempfile.mkdtemp()) / "model"
    d.mkdir()
    path = d / "m.onnx"
    path.write_bytes(helper.make_model(g).SerializeToString())
    return path


@case("InvalidModel", r"external data of tensor 'w' escapes the model folder: '\.\./secret\.bin'")
def external_relative_escape():
    p = _external_model("../secret.bin")
    (p.parent.parent / "secret.bin").write_bytes(b"\x00" * 16)
    _compile(p)


@case("InvalidModel", r"external data of tensor 'w' escapes the model folder: '/etc/passwd'")
def external_absolute_path():
    _compile(_external_model("/etc/passwd"))


@case("InvalidModel", r"external data of tensor 'w' escapes the model folder: 'link\.bin'")
def external_symlink_escape():
    p = _external_model("link.bin")
    (p.parent.parent / "secret.bin").write_bytes(b"\x00" * 16)
    os.symlink(p.parent.parent / "secret.bin", p.parent / "link.bin")
    _compile(p)


@case("InvalidModel", r"external data file of tensor 'w' not found: .*weights\.bin")
def external_missing_file():
    _compile(_external_model("weights.bin"))


@case("InvalidModel", r"external data of tensor 'w' wants bytes \[0, 16\) of 'weights\.bin', "
                      r"which has 8 bytes")
def external_short_file():
    p = _external_model("weights.bin", length=16)
    (p.parent / "weights.bin").write_bytes(b"\x00" * 8)
    _compile(p)


@case("InvalidModel", r"external data of tensor 'w' escapes the model folder")
def external_escape_from_bytes_with_base_dir():
    p = _external_model("../../x.bin")
    import jitort
    jitort.compile(p.read_bytes(), base_dir=p.parent)


# --- debug mode: generated code is bounds-checked ------------------------------------------------
def _debug_kernel():
    """The fused Add+Relu kernel of a debug build (``jitort.compile(m, debug=True)``)."""
    import jitort
    m = _model([helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("Relu", ["s"], ["z"])],
               [("x", F32, ["N", 4]), ("y", F32, ["N", 4])], [("z", F32, None)])
    cm = jitort.compile(m, debug=True)
    cm(_ok(), _ok())
    (plan,) = cm.plans()
    assert "boundscheck=True" in Path(plan.source_path).read_text()
    (name,) = [k for k in plan.kernel_names if k.startswith("k_add_relu")]
    return getattr(sys.modules[f"jitort_gen.{name}_bc"], name)


@case("IndexError", "index is out of bounds")
def debug_mode_catches_out_of_bounds_read_x0():
    # what a shape bug that got past validation would do: an operand shorter than the output
    y = np.empty(8, np.float32)
    _debug_kernel()(y, np.ones(4, np.float32), np.ones(8, np.float32))


@case("IndexError", "index is out of bounds")
def debug_mode_catches_out_of_bounds_read_x1():
    y = np.empty(64, np.float32)
    _debug_kernel()(y, np.ones(64, np.float32), np.ones(63, np.float32))


# --- odd but valid inputs: these must work (in process; they run ordinary kernels) -----------------
def _ort(model, feeds):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)


SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0, 3e38, -1e-40, 7.0],
                    np.float32)


_REFERENCE_NOT_ORT = {("ReduceMax", repr({"keepdims": 0, "axes": [1]}))}


@pytest.mark.parametrize("op, attrs, extra", [
    ("Add", {}, "y"), ("Mul", {}, "y"), ("Div", {}, "y"), ("Sub", {}, "y"), ("Pow", {}, "y"),
    ("Max", {}, "y"), ("Min", {}, "y"), ("Relu", {}, None), ("Exp", {}, None), ("Log", {}, None),
    ("Sqrt", {}, None), ("Tanh", {}, None), ("Sigmoid", {}, None), ("Abs", {}, None),
    ("Neg", {}, None), ("Floor", {}, None), ("Erf", {}, None),
    ("Softmax", {"axis": -1}, None), ("ReduceSum", {"keepdims": 1}, None),
    ("ReduceMax", {"keepdims": 1}, None), ("ReduceMin", {"keepdims": 1}, None),
    # over one axis onnxruntime's result depends on where the NaN sits (max(a, nan) != max(nan, a)):
    # there jitort follows onnx.reference (NaN wherever one is reduced), see _REFERENCE_NOT_ORT
    ("ReduceMax", {"keepdims": 0, "axes": [1]}, None),
    ("ReduceMean", {"keepdims": 1}, None), ("ReduceLogSumExp", {"keepdims": 0, "axes": [1]}, None),
    ("MatMul", {}, "w"),  # (ArgMax over NaN: ORT and numpy/onnx.reference disagree; unspecified)
])
def test_nan_and_inf_propagate_like_onnxruntime(op, attrs, extra):
    import jitort
    x = np.stack([SPECIALS, SPECIALS[::-1], np.roll(SPECIALS, 3)])  # (3, 10)
    ins, feeds, init = ["x"], {"x": x}, {}
    if extra == "y":
        ins.append("y")
        feeds["y"] = np.roll(SPECIALS, 1)[None, :].repeat(3, 0)
    elif extra == "w":
        ins.append("w")
        init["w"] = np.linspace(-1, 1, 40, dtype=np.float32).reshape(10, 4)
    m = _model([helper.make_node(op, ins, ["z"], **attrs)],
               [(k, F32, list(v.shape)) for k, v in feeds.items()],
               [("z", I64 if op.startswith("Arg") else F32, None)], init)
    got = jitort.compile(m).run(None, feeds)[0]
    if (op, repr(attrs)) in _REFERENCE_NOT_ORT:
        from onnx.reference import ReferenceEvaluator
        want = ReferenceEvaluator(m).run(None, feeds)[0]
    else:
        want = _ort(m, feeds)[0]
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-37, equal_nan=True)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.parametrize("shape", [(0, 4), (3, 0), (0, 0)])
def test_empty_tensors(shape):
    import jitort
    m = _model([helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("Relu", ["s"], ["r"]),
                helper.make_node("ReduceSum", ["r"], ["z"], keepdims=0),
                helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0])],
               [("x", F32, ["N", "M"]), ("y", F32, ["N", "M"])],
               [("z", F32, None), ("t", F32, None)])
    from tests.helpers import assert_outputs_close
    x = np.zeros(shape, np.float32)
    got = jitort.compile(m)(x, x)
    want = _ort(m, {"x": x, "y": x})
    assert_outputs_close(got, want, exact=True)


def test_empty_matmul_and_conv():
    import jitort
    w = np.ones((5, 3), np.float32)
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F32, ["B", 5])],
               [("y", F32, None)], {"w": w})
    assert jitort.compile(m)(np.zeros((0, 5), np.float32))[0].shape == (0, 3)
    got = jitort.compile(_conv_model())(np.zeros((0, 3, 5, 5), np.float32))[0]
    assert got.shape == (0, 4, 3, 3)


I32 = TensorProto.INT32
#: graphs whose results the spec leaves open or onnx.reference gets wrong, where both tiers
#: follow onnxruntime: the mean of an empty set (0, not NaN), pools of an empty batch, integer
#: log-sums (which onnx.reference refuses)
_EDGE_CASES = {
    "mean-of-empty-axis": ("ReduceMean", {"keepdims": 0}, [0], (0, 4), np.float32),
    "mean-of-empty-tensor": ("ReduceMean", {"keepdims": 1}, None, (4, 0), np.float32),
    "int-mean-of-empty": ("ReduceMean", {"keepdims": 0}, [1], (3, 0), np.int32),
    "int-mean-truncates": ("ReduceMean", {"keepdims": 0}, [1], (3, 4), np.int32),
    "int-log-sum": ("ReduceLogSum", {"keepdims": 1}, [0], (3, 4), np.int32),
    "int-log-sum-exp": ("ReduceLogSumExp", {"keepdims": 0}, [1], (3, 4), np.int64),
    "int-log-sum-exp-of-empty": ("ReduceLogSumExp", {"keepdims": 0}, [0], (0, 4), np.int32),
    "global-average-pool-empty-batch": ("GlobalAveragePool", {}, None, (0, 3, 2, 6), np.float32),
    "max-pool-empty-batch": ("MaxPool", {"kernel_shape": [1, 3], "pads": [0, 1, 0, 1]}, None,
                             (0, 4, 3, 3), np.float32),
}


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("case", sorted(_EDGE_CASES))
def test_edge_cases_follow_onnxruntime_on_both_tiers(case, tier):
    op, attrs, axes, shape, dt = _EDGE_CASES[case]
    elem = {np.float32: F32, np.int32: I32, np.int64: I64}[dt]
    init = {} if axes is None else {"axes": np.array(axes, np.int64)}
    m = _model([helper.make_node(op, ["x"] + list(init), ["y"], **attrs)],
               [("x", elem, list(shape))], [("y", elem, None)], init,
               opset=18)
    x = np.random.default_rng(0).integers(-4, 9, shape).astype(dt)
    if op == "ReduceLogSum":
        x = np.abs(x)
    got, want = run_tier(m, {"x": x}, tier)[0], _ort(m, {"x": x})[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("op", ["QLinearMatMul", "QLinearConv"])
def test_requantization_ties_round_as_onnxruntime_on_both_tiers(op, tier):
    """acc * multiplier at exact halves with an odd output zero point: onnxruntime rounds
    before adding the zero point (1, 3, 3, 5), onnx.reference after it (2, 2, 4, 4)."""
    U8 = TensorProto.UINT8
    a = np.array([1, 3, 5, 7], np.uint8)
    one = np.array(1, np.uint8)
    params = {"as": np.float32(0.5), "az": np.array(0, np.uint8), "bs": np.float32(1.0),
              "ys": np.float32(1.0), "yz": one}
    if op == "QLinearMatMul":
        x, shape = a.reshape(4, 1), [4, 1]
        init = dict(params, b=np.ones((1, 1), np.uint8), bz=np.array(0, np.uint8))
        ins = ["x", "as", "az", "b", "bs", "bz", "ys", "yz"]
    else:
        x, shape = a.reshape(1, 1, 2, 2), [1, 1, 2, 2]
        init = dict(params, b=np.ones((1, 1, 1, 1), np.int8), bz=np.array(0, np.int8))
        ins = ["x", "as", "az", "b", "bs", "bz", "ys", "yz"]
    m = _model([helper.make_node(op, ins, ["y"])], [("x", U8, shape)], [("y", U8, None)], init)
    got, want = run_tier(m, {"x": x}, tier)[0], _ort(m, {"x": x})[0]
    np.testing.assert_array_equal(want.reshape(-1), [1, 3, 3, 5])
    np.testing.assert_array_equal(got, want)


_ROI = np.zeros(0, np.float32)
#: upsampling where onnx.reference departs from the spec and onnxruntime: (node, initializers,
#: input shape)
_UPSAMPLING = {
    "resize-align-corners-by-scales": (
        helper.make_node("Resize", ["x", "roi", "sc"], ["y"], mode="nearest",
                         coordinate_transformation_mode="align_corners",
                         nearest_mode="round_prefer_ceil"),
        {"roi": _ROI, "sc": np.array([1, 1, 0.5, 1.5], np.float32)}, (1, 2, 5, 5)),
    "resize-pytorch-half-pixel-to-one": (
        helper.make_node("Resize", ["x", "roi", "sc"], ["y"], mode="linear",
                         coordinate_transformation_mode="pytorch_half_pixel"),
        {"roi": _ROI, "sc": np.array([1, 1, 0.5, 0.5], np.float32)}, (1, 2, 2, 3)),
    "pad-constant-crops": (
        helper.make_node("Pad", ["x", "p", "v"], ["y"], mode="constant"),
        {"p": np.array([0, 0, -1, 1, 0, 0, 3, -2], np.int64), "v": np.float32(-1.5)},
        (2, 2, 6, 4)),
    "pad-reflect-crops": (
        helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect"),
        {"p": np.array([0, 0, -1, 1, 0, 0, 3, -1], np.int64)}, (2, 2, 6, 4)),
    "conv-transpose-empty-batch": (
        helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2],
                         output_padding=[1, 0], pads=[1, 0, 1, 0]),
        {"w": np.ones((2, 3, 3, 3), np.float32), "b": np.arange(3, dtype=np.float32)},
        (0, 2, 4, 5)),
}


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("case", sorted(_UPSAMPLING))
def test_upsampling_follows_onnxruntime_on_both_tiers(case, tier):
    node, init, shape = _UPSAMPLING[case]
    m = _model([node], [("x", F32, list(shape))], [("y", F32, None)], init)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got, want = run_tier(m, {"x": x}, tier)[0], _ort(m, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tier", TIERS)
def test_slice_clamps_as_onnx_says_on_both_tiers(tier):
    """Stepping backwards from before an axis's first element starts at that element (ONNX
    clamps the start to [0, dim-1]; Python's slices take nothing)."""
    cases = [(-4, -2 ** 62, -1), (-5, -100, -2), (9, -9, -1), (-1, 0, -1), (-4, 2, 1),
             (1, 2 ** 62, 2), (0, -1, 1)]
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    for start, end, step in cases:
        init = {"s": np.array([start]), "e": np.array([end]), "a": np.array([0]),
                "t": np.array([step])}
        m = _model([helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])],
                   [("x", F32, [3, 2])], [("y", F32, None)], init, opset=13)
        got, want = run_tier(m, {"x": x}, tier)[0], _ort(m, {"x": x})[0]
        assert got.shape == want.shape and np.array_equal(got, want), (start, end, step)


@pytest.mark.parametrize("tier", TIERS)
def test_gather_nd_without_indices_on_both_tiers(tier):
    """GatherND with no index rows (an empty batch with batch_dims=1 among them, which
    onnx.reference fails to reshape): the empty result of onnxruntime's shape."""
    cases = [([0, 2, 1, 0], [0, 2, 1], 1), ([0, 2, 1, 0], [0, 1], 1), ([3, 2], [0, 1], 0),
             ([2, 3, 4], [2, 0, 2], 1), ([2, 3], [0, 2, 1], 0)]
    for xs, ish, b in cases:
        m = _model([helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=b)],
                   [("x", F32, xs), ("i", TensorProto.INT64, ish)], [("y", F32, None)], {})
        feeds = {"x": np.ones(xs, np.float32), "i": np.zeros(ish, np.int64)}
        got, want = run_tier(m, feeds, tier)[0], _ort(m, feeds)[0]
        assert got.shape == want.shape and got.dtype == want.dtype, (xs, ish, b)


@pytest.mark.parametrize("tier", TIERS)
def test_einsum_over_empty_axes_on_both_tiers(tier):
    """Einsum with a size-0 contracted, batch or free axis: zeros or an empty result, as
    numpy's einsum. onnxruntime 1.32 kills the process (SIGFPE) on the first two cases
    (a 4-D batched product with an empty contraction or batch), so numpy is the reference."""
    cases = [("bhqd,bhkd->bhqk", [2, 3, 5, 0], [2, 3, 4, 0]),
             ("bhqd,bhkd->bhqk", [0, 3, 5, 2], [0, 3, 4, 2]),
             ("bhqd,bhkd->bhqk", [2, 3, 0, 2], [2, 3, 4, 2]), ("ij,jk->ik", [3, 0], [0, 4]),
             ("i,i->", [0], [0]), ("ij,ij->i", [3, 0], [3, 0]), ("bij->bj", [2, 0, 3], None),
             ("bii->bi", [2, 0, 0], None), ("bi,bj->bij", [2, 0], [2, 3])]
    rng = np.random.default_rng(0)
    for eq, xs, ys in cases:
        shapes = [xs] + ([ys] if ys else [])
        feeds = {f"x{k}": rng.standard_normal(sh).astype(np.float32)
                 for k, sh in enumerate(shapes)}
        m = _model([helper.make_node("Einsum", list(feeds), ["y"], equation=eq)],
                   [(n, F32, sh) for n, sh in zip(feeds, shapes)], [("y", F32, None)], {})
        got, want = run_tier(m, feeds, tier)[0], np.einsum(eq, *feeds.values())
        assert got.shape == want.shape and np.array_equal(got, want), (eq, xs, ys)


def test_non_contiguous_readonly_and_unaligned_feeds_give_the_same_result():
    import jitort
    cm = _add()
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 3, 4)).astype(np.float32)
    want = x + y
    xt = np.asfortranarray(x)                                    # F order
    ys = np.zeros((6, 8), np.float32)[::2, ::2]                  # strided view
    ys[...] = y
    ro = y.copy()
    ro.flags.writeable = False                                   # read-only
    raw = np.zeros(y.nbytes + 1, np.uint8)[1:].view(np.float32).reshape(3, 4)  # misaligned
    raw[...] = y
    for a, b in [(xt, ys), (x, ro), (x, raw), (x[:, ::-1][:, ::-1], y)]:
        np.testing.assert_array_equal(cm(a, b)[0], want)
    assert not ro.flags.writeable and np.array_equal(ro, y)      # feeds are never written


def test_debug_build_matches_and_keeps_its_own_modules():
    import jitort
    m = _model([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
               [("x", F32, ["B", 8])], [("y", F32, None)],
               {"w": np.linspace(-1, 1, 48, dtype=np.float32).reshape(8, 6)})
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    fast, checked = jitort.compile(m), jitort.compile(m, debug=True)
    np.testing.assert_array_equal(fast(x)[0], checked(x)[0])
    (p_fast,), (p_dbg,) = fast.plans(), checked.plans()
    assert "boundscheck" not in Path(p_fast.source_path).read_text()
    assert Path(p_dbg.source_path).read_text().count("boundscheck=True") >= 1
    assert p_fast.source_path != p_dbg.source_path


def test_unsorted_but_acyclic_graph_is_accepted():
    """ONNX asks for sorted nodes; exporters slip. Only a real cycle is an error."""
    import jitort
    m = _model([helper.make_node("Relu", ["t"], ["y"]), helper.make_node("Neg", ["x"], ["t"])],
               [("x", F32, [3])], [("y", F32, None)])
    x = np.array([-1, 0, 2], np.float32)
    np.testing.assert_array_equal(jitort.compile(m)(x)[0], np.maximum(-x, 0))


# --- the fork server -------------------------------------------------------------------------
def _run_case(name: str) -> dict:
    fn, _, _ = CASES[name]
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - report everything, KeyboardInterrupt included
        return {"status": "raised", "mro": [c.__name__ for c in type(e).__mro__],
                "message": str(e), "trace": traceback.format_exc()[-2000:]}
    return {"status": "returned"}


def _serve(names: list[str]) -> dict:
    """Run each case in a forked child; a signal, a hang or a silent exit is reported."""
    import numba
    numba.njit(lambda a: a + 1)(1)  # initialize Numba once, serially: the children inherit it
    results = {}
    for name in names:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            os.close(r)
            try:
                out = json.dumps(_run_case(name)).encode()
            except BaseException as e:  # noqa: BLE001
                out = json.dumps({"status": "child-error", "message": repr(e)}).encode()
            with os.fdopen(w, "wb") as f:
                f.write(out)
            os._exit(0)
        os.close(w)
        data, deadline = b"", time.monotonic() + CASE_TIMEOUT_S
        with os.fdopen(r, "rb") as f:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([f], [], [], left)[0]:
                    os.kill(pid, signal.SIGKILL)
                    break
                chunk = os.read(f.fileno(), 1 << 16)
                if not chunk:
                    break
                data += chunk
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            why = "hang (killed)" if sig == signal.SIGKILL else f"crash: signal {sig}"
            results[name] = {"status": why}
        elif not data:
            results[name] = {"status": f"exit {os.WEXITSTATUS(status)} without a result"}
        else:
            results[name] = json.loads(data)
    return results


@pytest.fixture(scope="module")
def results():
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tests.test_bad_inputs", *CASES], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, f"fork server failed:\n{proc.stderr[-3000:]}"
    print(f"{len(CASES)} cases in {time.monotonic() - t0:.1f} s")
    return json.loads(lines[-1])


def test_enough_cases():
    assert len(CASES) >= 50


@pytest.mark.parametrize("name", list(CASES))
def test_bad_case(results, name):
    _, exc, match = CASES[name]
    got = results[name]
    assert got["status"] == "raised", f"{name}: {got['status']}"
    import re
    assert exc in got["mro"] and ("JitortError" in got["mro"] or name in RAW_ERRORS), \
        f"{name}: raised {got['mro'][0]}: {got['message']}\n{got['trace']}"
    assert re.search(match, got["message"]), f"{name}: {got['message']!r} does not match {match!r}"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    import jitort  # noqa: F401  (environment defaults before numpy/numba load)
    print(json.dumps(_serve(sys.argv[1:] or list(CASES))))
