"""The channels-last pass (jitort.passes.layout) and its NHWC kernels, against onnxruntime."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import jitort
from jitort.importer import import_model
from jitort.passes import CPU_PIPELINE, run_pipeline
from jitort.codegen.calls import Kernel

from .helpers import kernels_called, x_model

F32 = TensorProto.FLOAT
RNG = np.random.default_rng(7)


def _arr(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


_model = x_model


def _check(m, threads=1, rtol=1e-4, atol=1e-4):
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    feeds = {"x": _arr(*shape)}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    want = ort.InferenceSession(m.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    cm = jitort.compile(m, threads=threads, tiered=False)
    got = cm.run(None, feeds)
    assert cm.fallback_nodes() == []
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return cm


def _optimized(m):
    g = import_model(m)
    run_pipeline(g, CPU_PIPELINE)
    g.verify()
    return g


def _ops(g):
    return [n.op_type for n in g.nodes]


def _mobile_block(c=16, e=48, hw=14, k=3, stride=1, opset=17, se=True, residual=True):
    """An inverted residual block: pw expand + Relu, depthwise k x k + Relu, squeeze-excite
    (global pool, two pw convs, HardSigmoid, Mul), pw project, residual Add."""
    inits = {"w1": _arr(e, c, 1, 1) * 0.3, "b1": _arr(e), "wd": _arr(e, 1, k, k) * 0.3,
             "bd": _arr(e), "ws1": _arr(8, e, 1, 1) * 0.3, "bs1": _arr(8),
             "ws2": _arr(e, 8, 1, 1) * 0.3, "bs2": _arr(e), "w2": _arr(c, e, 1, 1) * 0.3,
             "b2": _arr(c)}
    p = k // 2
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "wd", "bd"], ["d"], group=e, pads=[p] * 4,
                              strides=[stride, stride]),
             helper.make_node("Relu", ["d"], ["dr"])]
    t = "dr"
    if se:
        if opset >= 18:
            inits["axes"] = np.array([2, 3], np.int64)
            nodes.append(helper.make_node("ReduceMean", ["dr", "axes"], ["s0"], keepdims=1))
        else:
            nodes.append(helper.make_node("GlobalAveragePool", ["dr"], ["s0"]))
        nodes += [helper.make_node("Conv", ["s0", "ws1", "bs1"], ["s1"]),
                  helper.make_node("Relu", ["s1"], ["s2"]),
                  helper.make_node("Conv", ["s2", "ws2", "bs2"], ["s3"]),
                  helper.make_node("HardSigmoid", ["s3"], ["s4"]),
                  helper.make_node("Mul", ["dr", "s4"], ["se"])]
        t = "se"
    nodes.append(helper.make_node("Conv", [t, "w2", "b2"], ["pj"]))
    if residual and stride == 1:
        nodes.append(helper.make_node("Add", ["pj", "x"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", ["pj"], ["y"]))
    return _model(nodes, (1, c, hw, hw), inits, opset=opset)


def test_block_runs_channels_last_with_two_transposes():
    g = _optimized(_mobile_block())
    ops = _ops(g)
    assert ops.count("Transpose") == 2, ops        # one in, one out
    assert ops.count("FusedConvNHWC") == 5, ops    # every conv of the block
    assert "Conv" not in ops and "FusedConv" not in ops
    assert "GlobalAveragePool" not in ops and "ReduceMean" in ops


@pytest.mark.parametrize("e,stride,hw,region,staged", [
    (32, 1, 28, True, True), (192, 1, 28, True, True),  # whole vectors of channels, 28x28
    (72, 1, 28, False, False),                          # a half vector left: NCHW kernels
    (96, 2, 56, True, True),                            # stride 2 onto 28x28: from 96
    (64, 2, 56, False, True),                           # NCHW, channels in whole groups
    (48, 1, 56, False, False),                          # ... but 3x3/1 onto 56x56: NCHW
    (40, 1, 56, False, False),                          # NCHW, a part-filled group
])
def test_depthwise_runs_staged_by_its_channels(e, stride, hw, region, staged):
    """Above MAX_PLANE outputs only the depthwise convolution can go channels-last, up to
    28x28 outputs with its channels a multiple of 16 (layout.DW_MAX_PLANE / DW_MIN_CHANNELS);
    the pointwise convolutions of its block stay NCHW. Alone in its region, it stays NCHW
    too (``layout.staged_depthwise``, ``region``). Either way, a depthwise convolution on
    NCHW tensors whose channels fill whole 16-channel groups runs as
    ``conv_nhwc.dwconv_staged`` (``layout.staged_nchw``: bands of rows transposed into
    16-channel blocks in scratch) unless it is 3x3 stride 1 onto more than 28x28 outputs,
    the others on the NCHW kernels. Results match onnxruntime
    either way."""
    from jitort.passes import layout
    m = _mobile_block(c=16, e=e, hw=hw, stride=stride, se=False)
    g = _optimized(m)
    ops = _ops(g)
    assert ops.count("FusedConvNHWC") == 0 and ops.count("Transpose") == 0, ops
    (dw,) = [n for n in g.nodes if n.op_type in ("Conv", "FusedConv")
             and n.attrs.get("group", 1) > 1]
    assert layout.staged_depthwise(dw) == (region and staged)
    assert layout.staged_nchw(dw) == staged
    for threads in (1, 2):
        cm = _check(m, threads=threads)
        assert (Kernel("conv_nhwc", "dwconv_staged") in kernels_called(cm)) == staged


def test_depthwise_alone_in_its_region_is_staged():
    """A region of one depthwise convolution (its neighbours cannot run channels-last) is
    left NCHW for dwconv_staged; one with a neighbour is converted."""
    from jitort.passes import layout
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[1, 1],
                              pads=[0, 0, 1, 1]),
             helper.make_node("Conv", ["p", "wd", "bd"], ["d"], group=64, pads=[1] * 4),
             helper.make_node("MaxPool", ["d"], ["y"], kernel_shape=[2, 2], strides=[1, 1],
                              pads=[0, 0, 1, 1])]
    m = _model(nodes, (1, 64, 14, 14), {"wd": _arr(64, 1, 3, 3), "bd": _arr(64)})
    g = _optimized(m)
    assert "FusedConvNHWC" not in _ops(g) and "Transpose" not in _ops(g)
    (dw,) = [n for n in g.nodes if n.op_type in ("Conv", "FusedConv")]
    assert layout.staged_depthwise(dw)
    for threads in (1, 2):
        _check(m, threads=threads)
    m2 = _mobile_block(c=16, e=64, hw=14, se=False)   # pointwise neighbours on 14x14
    assert _ops(_optimized(m2)).count("FusedConvNHWC") == 3


def test_no_depthwise_no_conversion():
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    g = _optimized(_model(nodes, (1, 8, 5, 5), {"w": _arr(8, 8, 1, 1), "b": _arr(8)}))
    assert "Transpose" not in _ops(g) and "FusedConvNHWC" not in _ops(g)


def test_env_turns_it_off(monkeypatch):
    monkeypatch.setenv("JITORT_LAYOUT", "nchw")
    g = _optimized(_mobile_block())
    assert "FusedConvNHWC" not in _ops(g)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("k,stride,hw", [(3, 1, 14), (3, 2, 14), (5, 1, 7), (5, 2, 9), (7, 1, 7),
                                         (3, 1, 1), (3, 2, 2)])
def test_block_matches_onnxruntime(k, stride, hw, threads):
    _check(_mobile_block(k=k, stride=stride, hw=hw), threads=threads)


@pytest.mark.parametrize("threads", [1, 2])
def test_wide_block_splits_pointwise_rows(threads):
    """Pointwise convolutions above ``conv_nhwc._PAR_MIN_FLOPS`` (64 -> 192 on 14x14, 4.8
    MFLOP) split their row blocks over the threads at 2 threads."""
    from jitort.kernels.cpu import conv_nhwc
    assert 2 * 64 * 192 * 14 * 14 >= conv_nhwc._PAR_MIN_FLOPS
    _check(_mobile_block(c=64, e=192, hw=14), threads=threads)


@pytest.mark.parametrize("opset", [13, 18])
def test_reduce_axes_forms(opset):
    _check(_mobile_block(opset=opset))


def test_concat_constant_operands_and_graph_outputs():
    """A GhostNet module: pw conv, depthwise on its output, channel Concat; a per-channel
    constant Mul and a scalar Add inside the region; an intermediate that is also a graph
    output (transposed back under its own name)."""
    inits = {"w1": _arr(6, 4, 1, 1), "wd": _arr(6, 1, 3, 3), "bd": _arr(6),
             "s": _arr(12, 1, 1), "one": np.array(1.5, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Conv", ["a", "wd", "bd"], ["d"], group=6, pads=[1, 1, 1, 1],
                              dilations=[1, 1]),
             helper.make_node("Concat", ["a", "d"], ["cat"], axis=1),
             helper.make_node("Mul", ["cat", "s"], ["m"]),
             helper.make_node("Add", ["m", "one"], ["y"])]
    m = _model(nodes, (2, 4, 6, 5), inits, outputs=("y", "a"))
    g = _optimized(m)
    assert _ops(g).count("FusedConvNHWC") == 2
    _check(m)


@pytest.mark.parametrize("pads,strides,dil", [([1, 2, 1, 0], [1, 1], [2, 2]),
                                              ([0, 0, 0, 0], [2, 1], [1, 1]),
                                              ([2, 2, 2, 2], [2, 2], [1, 2])])
def test_depthwise_attribute_edges(pads, strides, dil):
    inits = {"wd": _arr(5, 1, 3, 3), "bd": _arr(5)}
    nodes = [helper.make_node("Conv", ["x", "wd", "bd"], ["c"], group=5, pads=pads,
                              strides=strides, dilations=dil),
             helper.make_node("Clip", ["c"], ["y"])]
    _check(_model(nodes, (1, 5, 9, 8), inits))


def test_empty_batch():
    m = _mobile_block()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    cm = jitort.compile(m, tiered=False)
    y = cm.run(None, {"x": np.zeros((0, 16, 14, 14), np.float32)})[0]
    assert y.shape == (0, 16, 14, 14)


def test_interpreter_tier_matches():
    """Tier 0 (the interpreter) runs FusedConvNHWC through the NCHW conv, equal to the
    compiled program."""
    from jitort.tiering import Tiering
    cm = jitort.compile(_mobile_block(hw=9), tiered=False)
    assert "FusedConvNHWC" in _ops(cm.graph)
    x = _arr(1, 16, 9, 9)
    t = Tiering(cm)
    env = t.interpret({id(cm.graph.inputs[0]): x})
    got = env[id(cm.graph.outputs[0])]
    np.testing.assert_allclose(got, cm.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_convnext_block_transposes_cancel():
    """A ConvNeXt block as exported: depthwise 7x7, the model's own permute to NHWC,
    LayerNorm over channels, two MatMuls, permute back, residual Add. The region's Transpose
    back to NCHW and the model's permute to NHWC fold away (fold_transposes)."""
    c = 32
    inits = {"wd": _arr(c, 1, 7, 7) * 0.2, "bd": _arr(c), "g": _arr(c), "be": _arr(c),
             "w1": _arr(c, 4 * c) * 0.2, "b1": _arr(4 * c), "w2": _arr(4 * c, c) * 0.2,
             "b2": _arr(c)}
    nodes = [helper.make_node("Conv", ["x", "wd", "bd"], ["d"], group=c, pads=[3, 3, 3, 3]),
             helper.make_node("Transpose", ["d"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "g", "be"], ["ln"], axis=-1),
             helper.make_node("MatMul", ["ln", "w1"], ["m1"]),
             helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("MatMul", ["r1", "w2"], ["m2"]),
             helper.make_node("Add", ["m2", "b2"], ["a2"]),
             helper.make_node("Transpose", ["a2"], ["tb"], perm=[0, 3, 1, 2]),
             helper.make_node("Add", ["x", "tb"], ["y"])]
    m = _model(nodes, (1, c, 7, 7), inits)
    g = _optimized(m)
    # x in (read by the conv and, NCHW, by the residual Add); nothing between the conv and
    # the LayerNorm
    assert _ops(g).count("Transpose") == 2, _ops(g)
    ln = next(n for n in g.nodes if n.op_type == "LayerNormalization")
    assert ln.inputs[0].producer.op_type == "FusedConvNHWC"
    _check(m)


def test_fold_transposes_composes_and_cancels():
    from jitort.passes.simplify import eliminate_identities, fold_transposes
    nodes = [helper.make_node("Transpose", ["x"], ["a"], perm=[0, 2, 3, 1]),
             helper.make_node("Transpose", ["a"], ["b"], perm=[0, 3, 1, 2]),
             helper.make_node("Transpose", ["a"], ["c"], perm=[2, 0, 1, 3]),
             helper.make_node("Add", ["b", "c"], ["y"])]
    m = _model(nodes, (3, 3, 3, 3), {})
    g = import_model(m)
    assert fold_transposes(g) == 1          # c = Transpose(x, [3, 0, 2, 1])
    assert eliminate_identities(g) == 1     # b is x
    add = g.nodes[-1]
    assert add.inputs[0] is g.inputs[0]
    assert add.inputs[1].producer.attrs["perm"] == [3, 0, 2, 1]
    assert add.inputs[1].producer.inputs[0] is g.inputs[0]
    _check(m)


def test_profiling_counts_channels_last_convs():
    from jitort.profiling import node_flops, op_label
    g = _optimized(_mobile_block())
    shapes = {id(v): v.shape for v in g.values()}
    dw = next(n for n in g.nodes if n.op_type == "FusedConvNHWC" and n.attrs.get("group", 1) > 1)
    assert op_label(dw) == "FusedConvNHWC+Relu"
    # 48 channels x 14 x 14 outputs x 9 taps x 2, plus the Relu per output
    assert node_flops(dw, shapes) == 2 * 48 * 14 * 14 * 9 + 48 * 14 * 14
