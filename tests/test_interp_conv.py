"""The interpreter's numpy Conv / ConvTranspose / MaxPool / AveragePool (jitort.interpreter.
numpy_conv, the first tier of tiered models) against onnxruntime, over attribute forms."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from jitort.interpreter import make_runner
from jitort.interpreter.registry import lookup
from jitort.importer import import_model

ort = pytest.importorskip("onnxruntime")


def _model(op, x_shape, w_shape=None, bias=False, **attrs):
    rng = np.random.default_rng(0)
    inits, names = [], ["x"]
    if w_shape is not None:
        w = rng.standard_normal(w_shape).astype(np.float32)
        inits.append(helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()))
        names.append("w")
        if bias:
            m = w_shape[0] if op == "Conv" else w_shape[1] * attrs.get("group", 1)
            b = rng.standard_normal(m).astype(np.float32)
            inits.append(helper.make_tensor("b", TensorProto.FLOAT, b.shape, b))
            names.append("b")
    node = helper.make_node(op, names, ["y"], **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


CASES = [
    ("Conv", (1, 4, 9, 9), (6, 4, 3, 3), dict(pads=[1, 1, 1, 1])),
    ("Conv", (2, 8, 10, 7), (8, 2, 3, 2), dict(group=4, strides=[2, 1], dilations=[1, 2],
                                              pads=[0, 1, 2, 0])),
    ("Conv", (1, 6, 8, 8), (6, 1, 5, 5), dict(group=6, pads=[2, 2, 2, 2])),  # depthwise
    ("Conv", (1, 3, 11, 11), (4, 3, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    ("Conv", (1, 3, 11, 11), (4, 3, 4, 4), dict(auto_pad="SAME_LOWER", strides=[2, 2])),
    ("Conv", (1, 2, 20), (3, 2, 4), dict(strides=[3], pads=[1, 2])),  # 1-D
    ("Conv", (1, 2, 5, 6, 7), (4, 2, 3, 2, 3), dict(pads=[1, 0, 1, 1, 1, 0])),  # 3-D
    ("ConvTranspose", (1, 4, 5, 5), (4, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1],
                                                       output_padding=[1, 1])),
    ("ConvTranspose", (2, 4, 4, 6), (4, 2, 2, 3), dict(group=2, strides=[2, 3],
                                                       dilations=[2, 1])),
    ("ConvTranspose", (1, 2, 3, 4, 3), (2, 3, 2, 2, 2), dict(strides=[2, 2, 2])),
    ("ConvTranspose", (1, 3, 7), (3, 2, 3), dict(auto_pad="VALID", strides=[2])),
    ("MaxPool", (1, 3, 9, 9), None, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", (1, 2, 10, 11), None, dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", (1, 2, 10, 11), None, dict(kernel_shape=[2, 2], dilations=[2, 2])),
    ("MaxPool", (1, 2, 4, 5, 6), None, dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2])),
    ("MaxPool", (1, 2, 9, 9), None, dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER",
                                         strides=[2, 2])),
    ("AveragePool", (1, 3, 9, 9), None, dict(kernel_shape=[3, 3], strides=[2, 2],
                                             pads=[1, 1, 1, 1])),
    ("AveragePool", (1, 3, 9, 9), None, dict(kernel_shape=[3, 3], strides=[2, 2],
                                             pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", (1, 2, 10, 11), None, dict(kernel_shape=[3, 2], strides=[2, 2],
                                               ceil_mode=1)),
    ("AveragePool", (1, 2, 10, 11), None, dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1,
                                               pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", (1, 4, 8, 8), None, dict(kernel_shape=[2, 2], strides=[2, 2])),
]


PARAMS = [(*c, bias) for c in CASES for bias in ((False, True) if c[2] else (False,))]


@pytest.mark.parametrize("op,x_shape,w_shape,attrs,bias", PARAMS,
                         ids=[f"{p[0]}-{k}{'-bias' if p[4] else ''}" for k, p in enumerate(PARAMS)])
def test_numpy_conv_paths_match_onnxruntime(op, x_shape, w_shape, attrs, bias):
    m = _model(op, x_shape, w_shape, bias, **attrs)
    x = np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    g = import_model(m)
    node = g.nodes[0]
    fast = lookup(node.domain, node.op_type, node.since_version)
    assert fast is not None and fast(node) is not None  # the numpy path, not the reference
    args = [x] + [v.const for v in node.inputs[1:]]
    got = fast(node)(args)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # and through the interpreter's runner (what tier 0 and fallbacks call)
    np.testing.assert_allclose(make_runner(node, g.opsets)(args)[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("opset", [9, 14])
def test_inference_batchnorm_uses_running_statistics(opset):
    """onnx.reference's opset-9 BatchNormalization takes batch statistics (its momentum default
    switches it to training); jitort's interpreter runs it as onnxruntime does."""
    rng = np.random.default_rng(2)
    c = 5
    params = {n: (rng.standard_normal(c) * s + o).astype(np.float32)
              for n, s, o in (("s", 1, 0), ("b", 1, 0), ("m", 1, 0), ("v", 0.5, 2))}
    params["v"] = np.abs(params["v"])
    inits = [helper.make_tensor(n, TensorProto.FLOAT, [c], a) for n, a in params.items()]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [2, c, 3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    x = rng.standard_normal((2, c, 3, 4)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    gi = import_model(m)
    n = gi.nodes[0]
    got = make_runner(n, gi.opsets)([x] + [v.const for v in n.inputs[1:]])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
