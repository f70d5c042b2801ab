"""Pass output graphs: before/expected op lists, and numerics unchanged."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import jitort
from jitort.importer import import_model
from jitort.passes import CUDA_PIPELINE, run_pipeline
from jitort.passes.patterns import fold_conv_batchnorm, fuse_matmul_add
from jitort.passes.simplify import (eliminate_common_subexpressions, eliminate_dead_code,
                                    eliminate_identities, fold_constants)

from jitort.codegen.calls import Kernel

from .helpers import F32, assert_outputs_close, kernels_called, make_model, run_reference


def ops(g):
    return [n.op_type for n in g.nodes]


def test_conv_bn_folding():
    rng = np.random.default_rng(0)
    init = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
            "b": rng.standard_normal(4).astype(np.float32),
            "s": rng.uniform(0.5, 2, 4).astype(np.float32), "bb": rng.standard_normal(4).astype(np.float32),
            "mu": rng.standard_normal(4).astype(np.float32), "var": rng.uniform(0.5, 2, 4).astype(np.float32)}
    m = make_model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                    helper.make_node("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["y"])],
                   [("x", F32, [1, 3, 8, 8])], [("y", F32, None)], init)
    g = import_model(m)
    assert ops(g) == ["Conv", "BatchNormalization"]
    assert fold_conv_batchnorm(g) == 1
    assert ops(g) == ["Conv"]
    g.verify()
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(jitort.compile(m)(x)[0], run_reference(m, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_conv_bn_not_folded_when_conv_output_is_shared():
    init = {"w": np.ones((2, 1, 1, 1), np.float32), "s": np.ones(2, np.float32),
            "bb": np.zeros(2, np.float32), "mu": np.zeros(2, np.float32), "var": np.ones(2, np.float32)}
    m = make_model([helper.make_node("Conv", ["x", "w"], ["c"]),
                    helper.make_node("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["y"])],
                   [("x", F32, [1, 1, 2, 2])], [("y", F32, None), ("c", F32, None)], init)
    g = import_model(m)
    assert fold_conv_batchnorm(g) == 0


def test_matmul_add_becomes_matmulbias():
    rng = np.random.default_rng(2)
    init = {"w": rng.standard_normal((8, 5)).astype(np.float32), "b": rng.standard_normal(5).astype(np.float32)}
    m = make_model([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
                   [("x", F32, ["B", "S", 8])], [("y", F32, None)], init)
    g = import_model(m)
    assert fuse_matmul_add(g) == 1
    assert [(n.domain, n.op_type) for n in g.nodes] == [("jitort", "MatMulBias")]
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    np.testing.assert_allclose(jitort.compile(m)(x)[0], x @ init["w"] + init["b"], rtol=1e-5, atol=1e-5)


def test_identity_cse_dce_and_folding():
    init = {"two": np.array([2.0], np.float32), "two_b": np.array([2.0], np.float32),
            "shape": np.array([4], np.int64)}
    m = make_model([
        helper.make_node("Identity", ["x"], ["xi"]),
        helper.make_node("Mul", ["xi", "two"], ["a"]),
        helper.make_node("Mul", ["xi", "two_b"], ["b"]),      # same as a after constant merging
        helper.make_node("Expand", ["two", "shape"], ["e"]),  # constant: folded
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Add", ["s", "e"], ["y"]),
        helper.make_node("Neg", ["x"], ["unused"]),           # dead
    ], [("x", F32, [4])], [("y", F32, None)], init)
    g = import_model(m)
    assert eliminate_identities(g) == 1
    assert fold_constants(g) == 1
    assert eliminate_common_subexpressions(g) >= 1
    assert eliminate_dead_code(g) == 1
    assert ops(g) == ["Mul", "Add", "Add"]
    g2 = import_model(m)
    report = run_pipeline(g2)
    assert ops(g2) == ops(g) and report.rewrites["eliminate_dead_code"] == 1
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(jitort.compile(m)(x)[0], run_reference(m, {"x": x})[0])


def test_printer_is_deterministic_and_verify_passes():
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, ["N"])], [("y", F32, None)])
    g = import_model(m)
    g.verify()
    assert str(g) == str(import_model(m))
    assert "Relu(%x)" in str(g)


# --- epilogue fusion (fuse_epilogues) ----------------------------------------------------------

F64 = TensorProto.DOUBLE
RNG = np.random.default_rng(11)


def _ort(model, feeds):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _arr(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _optimized(m):
    g = import_model(m)
    run_pipeline(g)
    g.verify()
    return g


def _fused(g):
    return [(n.domain, n.op_type, n.attrs.get("activation")) for n in g.nodes]


def _conv_model(tail, *, xs=(1, 3, 8, 8), ws=(4, 3, 3, 3), bias=True, res_shape=None, dtype=F32,
                conv_attrs=None, opset=17, extra_outputs=(), inits=None):
    """Conv(x, w[, b]) -> c, then ``tail`` (onnx nodes reading "c", writing "y"); ``res_shape``
    adds an input "r"."""
    npdt = helper.tensor_dtype_to_np_dtype(dtype)
    init = {"w": _arr(*ws, dtype=npdt)}
    ins = ["x", "w"]
    if bias:
        init["b"] = _arr(ws[0], dtype=npdt)
        ins.append("b")
    init.update(inits or {})
    inputs = [("x", dtype, list(xs))]
    if res_shape is not None:
        inputs.append(("r", dtype, list(res_shape)))
    nodes = [helper.make_node("Conv", ins, ["c"], **(conv_attrs or {}))] + tail
    outs = [("y", dtype, None)] + [(o, dtype, None) for o in extra_outputs]
    return make_model(nodes, inputs, outs, init, opset=opset)


def _feeds(m):
    feeds = {}
    for vi in m.graph.input:
        t = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 2 for d in t.shape.dim]
        feeds[vi.name] = _arr(*dims, dtype=helper.tensor_dtype_to_np_dtype(t.elem_type))
    return feeds


def _check_vs_ort(m, feeds=None, rtol=1e-4, atol=1e-5):
    """jitort vs onnxruntime (vs onnx.reference for float64 Conv, which onnxruntime's CPU
    provider does not implement)."""
    feeds = feeds or _feeds(m)
    cm = jitort.compile(m)
    got = cm.run(None, feeds)
    f64 = any(a.dtype == np.float64 for a in feeds.values())
    want = run_reference(m, feeds) if f64 else _ort(m, feeds)
    assert_outputs_close(got, want, rtol=rtol, atol=atol)
    return cm


def test_conv_relu_becomes_one_fused_conv():
    m = _conv_model([helper.make_node("Relu", ["c"], ["y"])])
    g = _optimized(m)
    assert _fused(g) == [("jitort", "FusedConv", "Relu")]
    (n,) = g.nodes
    assert len(n.inputs) == 3 and n.outputs[0].name == "y" and g.outputs[0] is n.outputs[0]
    assert n.attrs["activation_params"] == [0.0, 0.0]


def test_conv_add_relu_becomes_fused_conv_with_a_residual():
    m = _conv_model([helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
                    xs=("N", 3, 8, 8), res_shape=("N", 4, 6, 6))
    g = _optimized(m)
    assert _fused(g) == [("jitort", "FusedConv", "Relu")]
    (n,) = g.nodes
    assert [v.name for v in n.inputs[:2]] == ["x", "w"] and n.inputs[3].name == "r"
    assert len(n.inputs) == 4 and n.outputs[0].name == "y"
    # residual first (Add(r, c)), no bias, no activation: still one node
    m2 = _conv_model([helper.make_node("Add", ["r", "c"], ["y"])], bias=False, res_shape=(1, 4, 6, 6))
    g2 = _optimized(m2)
    assert _fused(g2) == [("jitort", "FusedConv", "")]
    assert g2.nodes[0].input(2) is None and g2.nodes[0].inputs[3].name == "r"


def test_conv_with_two_consumers_is_not_fused():
    m = _conv_model([helper.make_node("Relu", ["c"], ["y"])], extra_outputs=("c",))
    assert _fused(_optimized(m)) == [("", "Conv", None), ("", "Relu", None)]
    m2 = _conv_model([helper.make_node("Relu", ["c"], ["t"]), helper.make_node("Add", ["t", "c"], ["y"])])
    assert [n.op_type for n in _optimized(m2).nodes] == ["Conv", "Relu", "Add"]


def test_broadcast_or_unknown_residual_shape_is_not_fused():
    relu = helper.make_node("Relu", ["s"], ["y"])
    for res_shape in [(1, 4, 1, 1), (4, 1, 1), (1, 1, 6, 6)]:  # broadcasts over the conv output
        m = _conv_model([helper.make_node("Add", ["c", "r"], ["s"]), relu], res_shape=res_shape)
        assert [n.op_type for n in _optimized(m).nodes] == ["Conv", "Add", "Relu"], res_shape
    # symbolic dims must be the same symbol
    m = _conv_model([helper.make_node("Add", ["c", "r"], ["s"]), relu], xs=("N", 3, 8, 8),
                    res_shape=("M", 4, 6, 6))
    assert [n.op_type for n in _optimized(m).nodes] == ["Conv", "Add", "Relu"]
    # a residual that broadcasts the conv output up ([1,..] conv vs [2,..] residual)
    m = _conv_model([helper.make_node("Add", ["c", "r"], ["s"]), relu], res_shape=(2, 4, 6, 6))
    assert [n.op_type for n in _optimized(m).nodes] == ["Conv", "Add", "Relu"]


def test_two_convs_into_one_add_fuse_once():
    # resnet's downsampling block: Add(conv(a), conv_shortcut(x)) -> Relu; one conv takes the
    # Add and the Relu, the other's output is its residual
    init = {"w": _arr(4, 3, 3, 3), "w2": _arr(4, 3, 1, 1)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w2"], ["d"]),
             helper.make_node("Add", ["c", "d"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    m = make_model(nodes, [("x", F32, ["N", 3, 5, 5])], [("y", F32, None)], init)
    g = _optimized(m)
    assert _fused(g) == [("", "Conv", None), ("jitort", "FusedConv", "Relu")]
    assert g.nodes[1].inputs[3] is g.nodes[0].outputs[0]
    _check_vs_ort(m, {"x": _arr(2, 3, 5, 5)})


def test_two_input_sum_is_an_add_and_fuses_as_a_residual():
    # some exporters write a residual connection as Sum (light ResNet-50)
    m = _conv_model([helper.make_node("Sum", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
                    xs=("N", 3, 8, 8), res_shape=("N", 4, 6, 6))
    assert _fused(_optimized(m)) == [("jitort", "FusedConv", "Relu")]
    cm = _check_vs_ort(m, {"x": _arr(2, 3, 8, 8), "r": _arr(2, 4, 6, 6)})
    assert cm.graph.nodes[0].inputs[3].name == "r"
    # a one-input Sum is an identity; three inputs stay a Sum; a broadcasting Sum is an Add
    m = _conv_model([helper.make_node("Sum", ["c"], ["s"]), helper.make_node("Sum", ["s", "r", "s"], ["t"]),
                     helper.make_node("Sum", ["t", "b2"], ["y"])], res_shape=(1, 4, 6, 6),
                    inits={"b2": _arr(4, 1, 1)})
    assert [n.op_type for n in _optimized(m).nodes] == ["Conv", "Sum", "Add"]
    _check_vs_ort(m)


def test_strided_pointwise_conv_reads_a_subsampled_input():
    # resnet's downsampling shortcut: Conv 1x1 stride 2 -> residual of the main branch's conv;
    # odd planes (9x7 -> 5x4) and a stride per axis; the compiled graph slices the input and
    # runs the 1x1 conv at stride 1, one Slice for the two convolutions reading it (CSE)
    init = {"w": _arr(6, 4, 3, 3), "w2": _arr(6, 4, 1, 1), "w3": _arr(6, 4, 1, 1),
            "b": _arr(6)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Conv", ["x", "w2"], ["d"], strides=[2, 2]),
             helper.make_node("Add", ["c", "d"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"]),
             helper.make_node("Conv", ["x", "w3", "b"], ["z"], strides=[2, 2])]
    m = make_model(nodes, [("x", F32, ["N", 4, 9, 7])], [("y", F32, None), ("z", F32, None)],
                   init)
    cm = _check_vs_ort(m, {"x": _arr(2, 4, 9, 7)})
    ops = [n.op_type for n in cm.graph.nodes]
    assert ops.count("Slice") == 1, ops
    sl = next(n for n in cm.graph.nodes if n.op_type == "Slice")
    pw = [n for n in cm.graph.nodes if n.inputs[0] is sl.outputs[0]]
    assert len(pw) == 2 and all(n.attrs["strides"] == [1, 1] for n in pw)
    assert sl.outputs[0].shape == ("N", 4, 5, 4)
    # a 3x3 strided conv, a padded 1x1 and a stride-1 1x1 keep their input
    for attrs, ws in [(dict(strides=[2, 2], pads=[1, 1, 1, 1]), (4, 3, 3, 3)),
                      (dict(strides=[2, 2], pads=[1, 1, 1, 1]), (4, 3, 1, 1)),
                      (dict(strides=[1, 1]), (4, 3, 1, 1))]:
        m = _conv_model([helper.make_node("Relu", ["c"], ["y"])], xs=(1, 3, 9, 9), ws=ws,
                        conv_attrs=attrs)
        cm = _check_vs_ort(m)
        assert [n.op_type for n in cm.graph.nodes] == ["FusedConv"], (attrs, ws)
    # strides by axis (1, 3), auto_pad VALID
    m = _conv_model([helper.make_node("Relu", ["c"], ["y"])], xs=(2, 3, 5, 10), ws=(4, 3, 1, 1),
                    conv_attrs=dict(strides=[1, 3], auto_pad="VALID"))
    cm = _check_vs_ort(m)
    assert [n.op_type for n in cm.graph.nodes] == ["Slice", "FusedConv"]
    # an opset-9 model (Slice without steps there) gets the opset-13 Slice too, compiled and
    # in the interpreter
    m = _conv_model([helper.make_node("Relu", ["c"], ["y"])], xs=(1, 3, 6, 6), ws=(4, 3, 1, 1),
                    conv_attrs=dict(strides=[2, 2]), opset=9)
    cm = _check_vs_ort(m)
    assert [(n.op_type, n.since_version) for n in cm.graph.nodes][0] == ("Slice", 13)
    assert cm.fallback_nodes() == []
    from jitort.interpreter import make_runner, node_inputs
    feeds = _feeds(m)
    env = {id(v): feeds[v.name] for v in cm.graph.inputs}
    for n in cm.graph.nodes:  # each node as the interpreter tier runs it
        for o, a in zip(n.outputs, make_runner(n, cm.graph.opsets)(node_inputs(n, env)),
                        strict=True):
            env[id(o)] = a
    np.testing.assert_allclose(env[id(cm.graph.outputs[0])], _ort(m, feeds)[0], rtol=1e-4,
                               atol=1e-5)


def test_activation_after_a_non_fusable_add_stays():
    # Conv -> Sigmoid and Add on the side: the conv output has two readers, nothing fuses;
    # the Relu after Add(conv, conv) reads a value no conv produces alone
    m = _conv_model([helper.make_node("Add", ["c", "c"], ["s"]), helper.make_node("Relu", ["s"], ["y"])])
    assert [n.op_type for n in _optimized(m).nodes] == ["Conv", "Add", "Relu"]


CONV_CASES = {
    "2d_strides_pads_relu": dict(tail=[helper.make_node("Relu", ["c"], ["y"])], xs=(2, 3, 9, 7),
                                 conv_attrs=dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    "groups_residual_relu": dict(tail=[helper.make_node("Add", ["c", "r"], ["s"]),
                                       helper.make_node("Relu", ["s"], ["y"])],
                                 xs=(2, 4, 6, 6), ws=(6, 2, 3, 3), bias=False,
                                 res_shape=(2, 6, 6, 6), conv_attrs=dict(group=2, pads=[1, 1, 1, 1])),
    "depthwise_residual_clip": dict(tail=[helper.make_node("Add", ["r", "c"], ["s"]),
                                          helper.make_node("Clip", ["s", "lo", "hi"], ["y"])],
                                    xs=(1, 4, 7, 7), ws=(4, 1, 3, 3), res_shape=(1, 4, 7, 7),
                                    conv_attrs=dict(group=4, pads=[1, 1, 1, 1]),
                                    inits={"lo": np.float32(-0.5), "hi": np.float32(0.75)}),
    "clip_min_only": dict(tail=[helper.make_node("Clip", ["c", "lo"], ["y"])],
                          inits={"lo": np.float32(0.1)}),
    "clip_max_only": dict(tail=[helper.make_node("Clip", ["c", "", "hi"], ["y"])],
                          inits={"hi": np.float32(0.2)}),
    "clip6_attrs": dict(tail=[helper.make_node("Clip", ["c"], ["y"], min=-0.3, max=0.6)],
                        opset=10),
    "conv1d_leakyrelu": dict(tail=[helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.2)],
                             xs=(2, 3, 11), ws=(5, 3, 3), conv_attrs=dict(strides=[2], pads=[1, 0])),
    "conv1d_residual_tanh": dict(tail=[helper.make_node("Add", ["c", "r"], ["s"]),
                                       helper.make_node("Tanh", ["s"], ["y"])],
                                 xs=(1, 4, 10), ws=(4, 4, 1), res_shape=(1, 4, 10)),
    "sigmoid_dilated": dict(tail=[helper.make_node("Sigmoid", ["c"], ["y"])], xs=(1, 3, 9, 9),
                            conv_attrs=dict(dilations=[2, 2])),
    "gelu_op": dict(tail=[helper.make_node("Gelu", ["c"], ["y"])], opset=20),
    # SiLU as torch exports nn.SiLU (EfficientNet, YOLO, timm's resnext26ts, mobilevit)
    "silu": dict(tail=[helper.make_node("Sigmoid", ["c"], ["g"]),
                       helper.make_node("Mul", ["c", "g"], ["y"])]),
    "residual_silu_swapped": dict(tail=[helper.make_node("Add", ["c", "r"], ["s"]),
                                        helper.make_node("Sigmoid", ["s"], ["g"]),
                                        helper.make_node("Mul", ["g", "s"], ["y"])],
                                  res_shape=(1, 4, 6, 6)),
    # MobileNetV3's activations, GhostNet's squeeze-excitation gate
    "hardswish": dict(tail=[helper.make_node("HardSwish", ["c"], ["y"])], opset=14),
    "residual_hardsigmoid": dict(tail=[helper.make_node("Add", ["c", "r"], ["s"]),
                                       helper.make_node("HardSigmoid", ["s"], ["y"], alpha=0.3,
                                                        beta=0.4)],
                                 res_shape=(1, 4, 6, 6)),
    "depthwise_silu": dict(tail=[helper.make_node("Sigmoid", ["c"], ["g"]),
                                 helper.make_node("Mul", ["c", "g"], ["y"])],
                           xs=(1, 4, 7, 7), ws=(4, 1, 3, 3),
                           conv_attrs=dict(group=4, pads=[1, 1, 1, 1])),
    "residual_only": dict(tail=[helper.make_node("Add", ["c", "r"], ["y"])], res_shape=(1, 4, 6, 6)),
    "auto_pad_same_relu": dict(tail=[helper.make_node("Relu", ["c"], ["y"])], xs=(1, 3, 7, 7),
                               conv_attrs=dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    # float64: checked against onnx.reference (onnxruntime has no float64 Conv)
    "float64_residual_relu": dict(tail=[helper.make_node("Add", ["c", "r"], ["s"]),
                                        helper.make_node("Relu", ["s"], ["y"])],
                                  dtype=F64, res_shape=(1, 4, 6, 6)),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_fused_conv_matches_onnxruntime(case):
    m = _conv_model(**CONV_CASES[case])
    cm = _check_vs_ort(m)
    ops = [(n.domain, n.op_type) for n in cm.graph.nodes]
    assert ops == [("jitort", "FusedConv")]
    if case.startswith("depthwise"):
        # alone in its channels-last region (passes.layout): NCHW, through the staged kernel,
        # with the residual and the Clip (the SiLU) in its epilogue
        assert cm.graph.nodes[0].attrs["activation"] == ("Swish" if "silu" in case else "Clip")
        assert Kernel("conv_nhwc", "dwconv_staged") in kernels_called(cm)
    if "silu" in case:
        assert cm.graph.nodes[0].attrs["activation_params"][0] == 1.0  # Swish's alpha
    assert cm.fallback_nodes() == []


def test_fused_conv_residual_never_shares_the_output_buffer():
    # the residual (a workspace intermediate) dies at the fused conv, with the output's exact
    # size: in-place reuse would corrupt the result (the GEMM writes out before res is read)
    init = {"w": _arr(4, 4, 3, 3), "b": _arr(4)}
    nodes = [helper.make_node("Neg", ["x"], ["r"]),
             helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "r"], ["s"]),
             helper.make_node("Relu", ["s"], ["t"]),
             helper.make_node("Sigmoid", ["t"], ["y"])]
    m = make_model(nodes, [("x", F32, ["N", 4, 5, 5])], [("y", F32, None)], init)
    cm = _check_vs_ort(m, {"x": _arr(2, 4, 5, 5)})
    assert [n.op_type for n in cm.graph.nodes] == ["Neg", "FusedConv", "Sigmoid"]
    (plan,) = cm.plans()
    from jitort.planner import check_plan
    check_plan(plan.memory)
    size = 2 * 4 * 5 * 5 * 4
    assert plan.ws_bytes >= 2 * size  # r and the conv output are live together


def test_fused_nodes_run_in_the_interpreter_when_no_backend_takes_them(monkeypatch):
    from jitort.codegen import cpu
    monkeypatch.setitem(cpu.SUPPORT, ("jitort", "FusedConv"), lambda n: False)
    monkeypatch.setitem(cpu.SUPPORT, ("jitort", "MatMulBias"), lambda n: False)
    m = _conv_model([helper.make_node("Add", ["c", "r"], ["s"]),
                     helper.make_node("Clip", ["s", "lo"], ["y"])],
                    res_shape=(1, 4, 6, 6), inits={"lo": np.float32(0.0)})
    cm = _check_vs_ort(m)
    assert [n.op_type for n in cm.graph.nodes] == ["FusedConv"]
    assert cm.fallback_nodes() == ["FusedConv"]
    mm = _mlp_model("erf_div")
    cm = _check_vs_ort(mm, {"x": _arr(3, 16)})
    assert [n.op_type for n in cm.graph.nodes] == ["MatMulBias", "MatMul"]
    assert cm.graph.nodes[0].attrs["activation"] == "Gelu" and cm.fallback_nodes() == ["MatMulBias"]


def test_fused_conv_falls_back_when_its_lowering_declines(monkeypatch):
    from jitort.codegen import cpu
    from jitort.codegen.cpu import Unlowerable

    def decline(em, n):
        raise Unlowerable(n, "test: declined")
    monkeypatch.setitem(cpu.LOWER, ("jitort", "FusedConv"), decline)
    m = _conv_model([helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
                    xs=(1, 3, 7, 7), res_shape=(1, 4, 5, 5))
    cm = _check_vs_ort(m)
    assert cm.fallback_nodes() == ["FusedConv"] and "declined" in cm.fallback_reasons["FusedConv"]


# --- MatMulBias activations ----------------------------------------------------------------------

def _gelu_nodes(form: str, x: str, y: str) -> list:
    """GELU of ``x`` into ``y`` as exporters write it."""
    mk = helper.make_node
    if form == "erf_div":  # torch.onnx (TorchScript): bert, vit
        return [mk("Div", [x, "sqrt2"], ["g_d"]), mk("Erf", ["g_d"], ["g_e"]),
                mk("Add", ["g_e", "one"], ["g_a"]), mk("Mul", [x, "g_a"], ["g_m"]),
                mk("Mul", ["g_m", "half"], [y])]
    if form == "erf_mul_half_first":  # x * 0.5 first, 1/sqrt2 as a Mul, operands swapped
        return [mk("Mul", ["rsqrt2", x], ["g_d"]), mk("Erf", ["g_d"], ["g_e"]),
                mk("Add", ["one", "g_e"], ["g_a"]), mk("Mul", ["half", x], ["g_h"]),
                mk("Mul", ["g_a", "g_h"], [y])]
    if form == "erf_half_of_sum":  # x * ((1 + erf) * 0.5)
        return [mk("Div", [x, "sqrt2"], ["g_d"]), mk("Erf", ["g_d"], ["g_e"]),
                mk("Add", ["g_e", "one"], ["g_a"]), mk("Mul", ["g_a", "half"], ["g_h"]),
                mk("Mul", [x, "g_h"], [y])]
    if form == "gelu_op":
        return [mk("Gelu", [x], [y])]
    if form == "silu":  # not a GELU: x * sigmoid(x), the Mul's operands swapped
        return [mk("Sigmoid", [x], ["g_s"]), mk("Mul", ["g_s", x], [y])]
    if form == "gelu_op_tanh":
        return [mk("Gelu", [x], [y], approximate="tanh")]
    if form.startswith("tanh_formula"):  # gpt2: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        c044 = "c05" if form.endswith("wrong_constant") else "c044"
        head = [mk("Pow", [x, "three"], ["g_p"]), mk("Mul", [c044, "g_p"], ["g_c"]),
                mk("Add", ["g_c", x], ["g_s"]), mk("Mul", ["g_s", "s2pi"], ["g_t"]),
                mk("Tanh", ["g_t"], ["g_th"]), mk("Add", ["one", "g_th"], ["g_a"])]
        if form.endswith("half_last"):  # (x * t) * 0.5
            return head + [mk("Mul", ["g_a", x], ["g_h"]), mk("Mul", ["g_h", "half"], [y])]
        if form.endswith("half_of_sum"):  # x * (t * 0.5)
            return head + [mk("Mul", ["g_a", "half"], ["g_h"]), mk("Mul", [x, "g_h"], [y])]
        return head + [mk("Mul", [x, "half"], ["g_h"]), mk("Mul", ["g_h", "g_a"], [y])]
    return [mk(form, [x], [y])]  # a plain activation op


def _mlp_model(form: str, opset: int = 17):
    """x -> MatMul -> Add(bias) -> activation ``form`` -> MatMul -> y (an FFN block)."""
    f = np.float32
    init = {"w1": _arr(16, 32) / 4, "b1": _arr(32), "w2": _arr(32, 8) / 4,
            "sqrt2": f(np.sqrt(2)), "rsqrt2": f(1 / np.sqrt(2)), "one": f(1), "half": f(0.5),
            "three": f(3), "c044": f(0.044715), "c05": f(0.05), "s2pi": f(np.sqrt(2 / np.pi))}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"])]
    nodes += _gelu_nodes(form, "hb", "act")
    nodes.append(helper.make_node("MatMul", ["act", "w2"], ["y"]))
    used = {i for n in nodes for i in n.input}
    init = {k: v for k, v in init.items() if k in used}
    return make_model(nodes, [("x", F32, ["B", 16])], [("y", F32, None)], init, opset=opset)


@pytest.mark.parametrize("form,opset,fused", [
    ("Relu", 17, "Relu"), ("Sigmoid", 17, "Sigmoid"), ("Tanh", 17, "Tanh"),
    ("erf_div", 17, "Gelu"), ("erf_mul_half_first", 17, "Gelu"), ("erf_half_of_sum", 17, "Gelu"),
    ("gelu_op", 20, "Gelu"), ("gelu_op_tanh", 20, "GeluTanh"), ("tanh_formula", 17, "GeluTanh"),
    ("tanh_formula_half_last", 17, "GeluTanh"), ("tanh_formula_half_of_sum", 17, "GeluTanh"),
    ("tanh_formula_wrong_constant", 17, None),
    ("silu", 17, "Swish"), ("HardSigmoid", 17, "HardSigmoid"), ("HardSwish", 17, "HardSwish")])
def test_matmulbias_activation_fusion_matches_onnxruntime(form, opset, fused):
    m = _mlp_model(form, opset)
    g = _optimized(m)
    mmb = [n for n in g.nodes if n.op_type == "MatMulBias"]
    assert len(mmb) == 1
    if fused is None:  # not GELU's constant: another function, left to the elementwise fuser
        assert mmb[0].attrs["activation"] == ""
        assert len(g.nodes) > 2
    else:
        assert [(n.domain, n.op_type, n.attrs.get("activation")) for n in g.nodes] == [
            ("jitort", "MatMulBias", fused), ("", "MatMul", None)]
    cm = _check_vs_ort(m, {"x": _arr(5, 16)})
    assert cm.fallback_nodes() == []


def test_gelu_pattern_with_a_shared_intermediate_is_not_fused():
    m = _mlp_model("erf_div")
    m.graph.output.append(helper.make_tensor_value_info("g_e", F32, None))  # Erf result is an output
    g = _optimized(m)
    assert [n.attrs.get("activation") for n in g.nodes if n.op_type == "MatMulBias"] == [""]
    assert "Erf" in [n.op_type for n in g.nodes]
    # the MatMulBias output read by a third node: no fusion either
    m2 = _mlp_model("erf_div")
    m2.graph.node.append(helper.make_node("Neg", ["hb"], ["z"]))
    m2.graph.output.append(helper.make_tensor_value_info("z", F32, None))
    g2 = _optimized(m2)
    assert [n.attrs.get("activation") for n in g2.nodes if n.op_type == "MatMulBias"] == [""]


def _gemm_model(form: str = "tanh_formula", reshape: bool = True, c_shape=(32,), **attrs):
    """GPT-2's FFN: x (B*T, 16) -> Gemm [+ C] -> Reshape (B, T, 32) -> GELU ``form`` ->
    Reshape (B*T, 32) -> MatMul -> y."""
    f = np.float32
    trans = attrs.get("transB", 0)
    init = {"w1": _arr(32, 16) / 4 if trans else _arr(16, 32) / 4, "w2": _arr(32, 8) / 4,
            "one": f(1), "half": f(0.5), "three": f(3), "c044": f(0.044715),
            "sqrt2": f(np.sqrt(2)), "s2pi": f(np.sqrt(2 / np.pi)),
            "s3": np.array([2, -1, 32], np.int64),
            "s2": np.array([-1, 32], np.int64)}
    ins = ["x", "w1"]
    if c_shape is not None:
        init["c1"] = _arr(*c_shape)
        ins.append("c1")
    nodes = [helper.make_node("Gemm", ins, ["h"], **attrs)]
    pre = "h"
    if reshape:
        nodes.append(helper.make_node("Reshape", ["h", "s3"], ["h3"]))
        pre = "h3"
    nodes += _gelu_nodes(form, pre, "act")
    nodes += [helper.make_node("Reshape", ["act", "s2"], ["a2"]),
              helper.make_node("MatMul", ["a2", "w2"], ["y"])]
    used = {i for n in nodes for i in n.input}
    return make_model(nodes, [("x", F32, [6, 16])], [("y", F32, None)],
                      {k: v for k, v in init.items() if k in used})


@pytest.mark.parametrize("form,reshape,c_shape,attrs", [
    ("tanh_formula", True, None, {}),                # the shared gpt2: no C
    ("tanh_formula", True, (32,), {}),
    ("erf_div", True, (1, 32), {"transB": 1}),
    ("Relu", False, (), {"beta": 1.0}),              # a scalar C, no Reshape between
    ("silu", True, (1,), {}),
])
def test_gemm_reshape_activation_is_one_matmulbias(form, reshape, c_shape, attrs):
    """A Gemm that is a MatMulBias takes the activation after it, through a Reshape (which
    moves after the fused node, reading the same shape); same numbers as onnxruntime. One
    reading B transposed only on the CUDA pipeline (the CPU's keeps the Gemm: no weight
    copy)."""
    m = _gemm_model(form, reshape, c_shape, **attrs)
    cuda = import_model(m)
    run_pipeline(cuda, CUDA_PIPELINE)
    cuda.verify()
    cpu = _optimized(m)
    act = {"tanh_formula": "GeluTanh", "erf_div": "Gelu", "Relu": "Relu", "silu": "Swish"}[form]
    for g in [cuda] + ([] if attrs.get("transB") else [cpu]):
        ops = [(n.op_type, n.attrs.get("activation")) for n in g.nodes]
        assert ops[0] == ("MatMulBias", act)
        assert [o for o, _ in ops].count("Gemm") == 0 and len(ops) == 3 + reshape
        if reshape:  # the Reshape now reads the fused node's output
            assert ops[1][0] == "Reshape" and g.nodes[1].inputs[0] is g.nodes[0].outputs[0]
    if attrs.get("transB"):
        assert [n.op_type for n in cpu.nodes][0] == "Gemm"
    cm = _check_vs_ort(m, {"x": _arr(6, 16)})
    assert cm.fallback_nodes() == []


@pytest.mark.parametrize("case", ["alpha", "beta", "c_rows", "transA", "shared_reshape",
                                  "reshape_output", "no_activation"])
def test_gemms_that_are_not_a_matmulbias_with_activation_stay(case):
    attrs = {"alpha": {"alpha": 0.5}, "beta": {"beta": 2.0}, "transA": {"transA": 1}}.get(case, {})
    m = _gemm_model("Relu", True, (6, 32) if case == "c_rows" else (32,), **attrs)
    if case == "transA":
        m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 16
        m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 6
    if case == "shared_reshape":  # the Reshape's input read by another node too
        m.graph.node.append(helper.make_node("Neg", ["h"], ["z"]))
        m.graph.output.append(helper.make_tensor_value_info("z", F32, None))
    if case == "reshape_output":  # the Reshape's output is a graph output
        m.graph.output.append(helper.make_tensor_value_info("h3", F32, None))
    if case == "no_activation":
        for n in m.graph.node:
            if n.op_type == "Relu":
                n.op_type = "Neg"
    g = _optimized(m)
    assert "Gemm" in [n.op_type for n in g.nodes] and "MatMulBias" not in [
        n.op_type for n in g.nodes]
    x = _arr(16, 6) if case == "transA" else _arr(6, 16)
    _check_vs_ort(m, {"x": x})


@pytest.mark.parametrize("scale_shape,shift_shape", [((4, 1, 1), (1, 4, 1, 1)), ((), (1,)),
                                                     ((1, 4, 1, 1), (4, 1, 1))])
@pytest.mark.parametrize("bias", [True, False])
def test_per_channel_mul_add_fold_into_the_conv(scale_shape, shift_shape, bias):
    """inception_v2's Conv -> Mul(scale) -> Add(shift) -> Relu: the affine goes into the
    weights and bias, then the Relu into the conv's epilogue; same numbers as onnxruntime."""
    inits = {"s": _arr(*scale_shape), "t": _arr(*shift_shape)}
    tail = [helper.make_node("Mul", ["c", "s"], ["m"]), helper.make_node("Add", ["t", "m"], ["a"]),
            helper.make_node("Relu", ["a"], ["y"])]
    m = _conv_model(tail, bias=bias, inits=inits)
    g = _optimized(m)
    assert _fused(g) == [("jitort", "FusedConv", "Relu")]
    assert g.nodes[0].outputs[0].name == "y"
    _check_vs_ort(m)


def test_affine_that_is_not_per_channel_is_not_folded():
    for shape in [(1, 1, 6, 6), (4, 6, 1), (2, 4, 1, 1)]:  # spatial, wrong axis, batch
        m = _conv_model([helper.make_node("Mul", ["c", "s"], ["y"])], inits={"s": _arr(*shape)})
        assert [n.op_type for n in _optimized(m).nodes] == ["Conv", "Mul"], shape
    # a scale from an input (not a constant) stays too
    m = _conv_model([helper.make_node("Mul", ["c", "r"], ["y"])], res_shape=(4, 1, 1))
    assert [n.op_type for n in _optimized(m).nodes] == ["Conv", "Mul"]


def test_channel_prelu_slope():
    """PRelu-6 with a (C,) slope on X (N, C, H): the slope moves to X's channel dim, (C, 1),
    and the node compiles; a slope that broadcasts from the right is left as it is."""
    from jitort.passes.simplify import channel_prelu_slope
    slope = np.array([0.1, -0.5, 2.0], np.float32)
    m = make_model([helper.make_node("PRelu", ["x", "s"], ["y"])], [("x", F32, [2, 3, 4])],
                   [("y", F32, None)], {"s": slope}, opset=6)
    g = import_model(m)
    assert channel_prelu_slope(g) == 1 and channel_prelu_slope(g) == 0
    assert g.nodes[0].inputs[1].shape == (3, 1)
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    cm = jitort.compile(m, strict=True)
    np.testing.assert_array_equal(cm(x=x)[0], np.where(x >= 0, x, x * slope[:, None]))
    assert cm.fallback_nodes() == []
    m2 = make_model([helper.make_node("PRelu", ["x", "s"], ["y"])], [("x", F32, [2, 4, 3])],
                    [("y", F32, None)], {"s": slope}, opset=6)
    assert channel_prelu_slope(import_model(m2)) == 0


@pytest.mark.parametrize("shape", [(6, 3), (2, 3, 4, 2, 3)])
def test_batchnorm_training_mode_expanded(shape):
    """BatchNormalization-15 with training_mode=1 (Y, running_mean, running_var): expanded into
    the batch statistics and compiled, vs onnx.reference, at ranks 2 and 5 (BackendTest has
    rank 4); an inference-mode BatchNormalization is not expanded."""
    rng = np.random.default_rng(3)
    init = {"s": rng.uniform(0.5, 2, 3).astype(np.float32),
            "b": rng.standard_normal(3).astype(np.float32),
            "mu": rng.standard_normal(3).astype(np.float32),
            "var": rng.uniform(0.5, 2, 3).astype(np.float32)}
    m = make_model([helper.make_node("BatchNormalization", ["x", "s", "b", "mu", "var"],
                                     ["y", "rm", "rv"], training_mode=1, momentum=0.8,
                                     epsilon=1e-3)],
                   [("x", F32, list(shape))], [("y", F32, None), ("rm", F32, None),
                                               ("rv", F32, None)], init, opset=15)
    x = rng.standard_normal(shape).astype(np.float32)
    cm = jitort.compile(m, strict=True)
    assert "BatchNormalization" not in ops(cm.graph)
    assert_outputs_close(cm(x=x), run_reference(m, {"x": x}), rtol=1e-5, atol=1e-5)
    inf = make_model([helper.make_node("BatchNormalization", ["x", "s", "b", "mu", "var"], ["y"])],
                     [("x", F32, list(shape))], [("y", F32, None)], init, opset=15)
    g = import_model(inf)
    run_pipeline(g)
    assert ops(g) == ["BatchNormalization"]
