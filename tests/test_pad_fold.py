"""fold_pad_into_conv: a constant zero Pad on spatial axes folds into the pads of the Conv /
FusedConv / AveragePool(count_include_pad=1) reading it (a -inf Pad into a MaxPool); anything
else keeps its Pad. The optimized graph is checked, then the compiled model against
onnxruntime."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import jitort
from jitort.importer import import_model
from jitort.passes import run_pipeline
from jitort.passes.patterns import fold_pad_into_conv
from .helpers import assert_outputs_close, x_model

F32 = TensorProto.FLOAT
RNG = np.random.default_rng(5)


def _arr(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


_model = x_model


def _pad_conv(pads, *, value=None, conv_pads=None, xs=(1, 3, 9, 9), tail=None, opset=17,
              mode="constant", strides=(2, 2), outputs=("y",), axes=None):
    """x -> Pad -> Conv(3x3, stride 2) [-> tail] -> y."""
    inits = {"p": np.array(pads, np.int64), "w": _arr(4, xs[1], 3, 3), "b": _arr(4)}
    ins = ["x", "p"]
    if value is not None or axes is not None:
        ins.append("" if value is None else "v")
        if value is not None:
            inits["v"] = np.array(value, np.float32)
    if axes is not None:
        ins.append("a")
        inits["a"] = np.array(axes, np.int64)
    attrs = {"strides": list(strides)}
    if conv_pads is not None:
        attrs["pads"] = conv_pads
    nodes = [helper.make_node("Pad", ins, ["t"], mode=mode),
             helper.make_node("Conv", ["t", "w", "b"], ["c" if tail else "y"], **attrs)]
    return _model(nodes + (tail or []), xs, inits, outputs, opset)


def _check(m, feeds=None):
    feeds = feeds or {"x": _arr(*[d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim])}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    want = ort.InferenceSession(m.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    cm = jitort.compile(m)
    got = cm.run(None, feeds)
    assert cm.fallback_nodes() == []
    assert_outputs_close(got, want, rtol=1e-4, atol=1e-5)


def _optimized(m):
    g = import_model(m)
    run_pipeline(g)
    g.verify()
    return g


def _ops(g):
    return [n.op_type for n in g.nodes]


def _conv(g):
    return next(n for n in g.nodes if n.op_type in ("Conv", "FusedConv"))


def test_zero_pad_folds_into_conv():
    """The TF-export pattern: Pad [0, 0, 0, 0, 0, 0, 1, 1] before a stride-2 conv."""
    m = _pad_conv([0, 0, 0, 0, 0, 0, 1, 1])
    g = import_model(m)
    assert fold_pad_into_conv(g) == 1
    assert _ops(g) == ["Conv"]
    conv = g.nodes[0]
    assert conv.inputs[0] is g.inputs[0] and conv.attrs["pads"] == [0, 0, 1, 1]
    _check(m)


def test_pads_add_to_the_conv_pads_and_value_input_zero():
    m = _pad_conv([0, 0, 2, 1, 0, 0, 0, 3], value=0.0, conv_pads=[1, 0, 1, 1])
    g = _optimized(m)
    assert "Pad" not in _ops(g)
    assert _conv(g).attrs["pads"] == [3, 1, 1, 4]
    _check(m)


def test_folds_into_fused_conv_with_activation():
    m = _pad_conv([0, 0, 1, 1, 0, 0, 1, 1], tail=[helper.make_node("Relu", ["c"], ["y"])])
    g = _optimized(m)
    assert _ops(g) == ["FusedConv"] and _conv(g).attrs["pads"] == [1, 1, 1, 1]
    _check(m)


def test_axes_input_and_opset2_attribute():
    m = _pad_conv([1, 2, 1, 0], axes=[2, -1], opset=18)
    g = _optimized(m)
    assert "Pad" not in _ops(g) and _conv(g).attrs["pads"] == [1, 2, 1, 0]
    _check(m)
    inits = {"w": _arr(4, 3, 3, 3), "b": _arr(4)}
    nodes = [helper.make_node("Pad", ["x"], ["t"], pads=[0, 0, 1, 1, 0, 0, 1, 1]),
             helper.make_node("Conv", ["t", "w", "b"], ["y"])]
    m = _model(nodes, (1, 3, 6, 6), inits, opset=9)
    g = _optimized(m)
    assert "Pad" not in _ops(g) and _conv(g).attrs["pads"] == [1, 1, 1, 1]
    _check(m)


def test_average_pool_count_include_pad():
    inits = {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)}
    for cip, folded in ((1, True), (0, False)):
        nodes = [helper.make_node("Pad", ["x", "p"], ["t"]),
                 helper.make_node("AveragePool", ["t"], ["y"], kernel_shape=[3, 3],
                                  count_include_pad=cip)]
        m = _model(nodes, (1, 2, 7, 7), inits)
        g = _optimized(m)
        assert ("Pad" not in _ops(g)) is folded
        if folded:
            assert g.nodes[0].attrs["pads"] == [1, 1, 1, 1]
        _check(m)


def test_max_pool_only_with_minus_inf():
    for value, folded in ((-np.inf, True), (0.0, False)):
        inits = {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
                 "v": np.array(value, np.float32)}
        nodes = [helper.make_node("Pad", ["x", "p", "v"], ["t"]),
                 helper.make_node("MaxPool", ["t"], ["y"], kernel_shape=[3, 3], strides=[2, 2])]
        m = _model(nodes, (1, 2, 9, 9), inits)
        g = _optimized(m)
        assert ("Pad" not in _ops(g)) is folded
        _check(m)


@pytest.mark.parametrize("case", ["value", "mode", "batch", "negative", "shared", "output",
                                  "auto_pad"])
def test_not_folded(case):
    """Non-zero pad values, other modes, batch or negative pads, a Pad output read twice or
    returned, a Conv with auto_pad: the Pad stays (and the result still matches)."""
    pads = [0, 0, 1, 1, 0, 0, 1, 1]
    kw = {}
    if case == "value":
        kw["value"] = 0.5
    elif case == "mode":
        kw["mode"] = "reflect"
    elif case == "batch":
        pads = [1, 0, 1, 1, 0, 0, 1, 1]
    elif case == "negative":
        pads = [0, 0, -1, 1, 0, 0, 1, 1]
    elif case == "shared":
        kw["tail"] = [helper.make_node("Add", ["c", "c"], ["y"]),
                      helper.make_node("ReduceSum", ["t"], ["z"], keepdims=0)]
        kw["outputs"] = ("y", "z")
    elif case == "output":
        kw["tail"] = [helper.make_node("Relu", ["c"], ["y"])]
        kw["outputs"] = ("y", "t")
    m = _pad_conv(pads, **kw)
    if case == "auto_pad":
        m.graph.node[1].attribute.append(helper.make_attribute("auto_pad", "SAME_UPPER"))
        del m.graph.node[1].attribute[:1]  # strides: keep the default 1 for SAME
    g = import_model(m)
    assert fold_pad_into_conv(g) == 0
    assert "Pad" in _ops(g)
    _check(m)


def test_pad_output_read_by_conv_weights_is_not_folded():
    """Only the data input of the consumer may be the Pad output."""
    m = _pad_conv([0, 0, 0, 0, 0, 0, 0, 0], xs=(4, 3, 3, 3))
    m.graph.node[1].input[1] = "t"
    g = import_model(m)
    assert fold_pad_into_conv(g) == 0
