"""Expand, GatherElements and CumSum on the CUDA backend (simulator in CI) against onnxruntime:
each lands on "cuda" (no device-host round trip in the middle of a GPU model) and matches.

Tensors stay tiny: the simulator runs one Python thread per CUDA thread.
"""
import numpy as np
import pytest
from onnx import TensorProto, helper

import jitort
from jitort.errors import InvalidInput
from tests.helpers import F32, I64, called_names, make_model

I32 = TensorProto.INT32
RNG = np.random.default_rng(11)
NP = {F32: np.float32, I64: np.int64, I32: np.int32}


def _ort(model, feeds):
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _data(shape, t):
    if t == F32:
        return RNG.standard_normal(shape).astype(np.float32)
    return RNG.integers(-50, 50, shape).astype(NP[t])


def _on_cuda(cm):
    counts = cm.placement_counts()
    assert counts["cuda"] == len(cm.graph.nodes) and not counts.get("cpu"), cm.summary()


def _check(m, feeds, cm=None):
    cm = cm or jitort.compile(m, device="cuda")
    _on_cuda(cm)
    got = cm(*feeds.values())
    for g, w in zip(got, _ort(m, feeds)):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    return cm


# --- Expand -------------------------------------------------------------------------------------

#: (input shape, target shape): broadcast in several dims, rank increases, a target dim of 1
#: under a wider input dim, a zero-size output
EXPANDS = [((3, 1), (2, 3, 4)), ((1, 4, 1), (2, 1, 4, 3)), ((5,), (2, 1, 5)),
           ((2, 1, 3), (1, 4, 1)), ((1,), (0, 3))]


def _expand_model(t):
    nodes, inputs, outputs, inits = [], [], [], {}
    for k, (xs, target) in enumerate(EXPANDS):
        nodes.append(helper.make_node("Expand", [f"x{k}", f"s{k}"], [f"y{k}"]))
        inputs.append((f"x{k}", t, list(xs)))
        outputs.append((f"y{k}", t, None))
        inits[f"s{k}"] = np.array(target, np.int64)
    return make_model(nodes, inputs, outputs, inits)


@pytest.mark.parametrize("t", [F32, I64], ids=["float32", "int64"])
def test_expand_matches_onnxruntime(cuda, t):
    m = _expand_model(t)
    _check(m, {f"x{k}": _data(xs, t) for k, (xs, _) in enumerate(EXPANDS)})


# --- GatherElements -----------------------------------------------------------------------------

#: (data shape, index shape, axis); indices may be narrower than the data off the axis
GATHERS = [((4, 3), (5, 3), 0), ((3, 4), (2, 6), 1), ((2, 3, 4), (2, 2, 5), -1),
           ((2, 3, 4), (1, 4, 2), 1)]


@pytest.mark.parametrize("it", [I64, I32], ids=["int64", "int32"])
def test_gather_elements_matches_onnxruntime(cuda, it):
    nodes, inputs, outputs, feeds = [], [], [], {}
    for k, (ds, ishape, axis) in enumerate(GATHERS):
        nodes.append(helper.make_node("GatherElements", [f"x{k}", f"i{k}"], [f"y{k}"],
                                      axis=axis))
        inputs += [(f"x{k}", F32, list(ds)), (f"i{k}", it, list(ishape))]
        outputs.append((f"y{k}", F32, None))
        a = ds[axis]
        feeds[f"x{k}"] = _data(ds, F32)
        feeds[f"i{k}"] = RNG.integers(-a, a, ishape).astype(NP[it])  # negatives wrap
        assert (feeds[f"i{k}"] < 0).any()
    m = make_model(nodes, inputs, outputs)
    cm = _check(m, feeds)
    assert "cuda.gather_scatter.gather_elements" in called_names(cm)


def test_gather_elements_of_int64_data(cuda):
    m = make_model([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=0)],
                   [("x", I64, [3, 2]), ("i", I64, [2, 2])], [("y", I64, None)])
    _check(m, {"x": _data((3, 2), I64), "i": np.array([[2, -3], [-1, 0]], np.int64)})


def test_gather_elements_index_out_of_range_raises(cuda):
    m = make_model([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)],
                   [("x", F32, [2, 3]), ("i", I32, [2, 2])], [("y", F32, None)])
    cm = jitort.compile(m, device="cuda")
    _on_cuda(cm)
    x = _data((2, 3), F32)
    good = np.array([[0, -3], [2, 1]], np.int32)
    for bad in (np.array([[0, 3], [1, 1]], np.int32), np.array([[0, 1], [-4, 1]], np.int32)):
        with pytest.raises(InvalidInput, match="out of range"):
            cm(x, bad)
        # the flag is cleared by the next call: a good call runs clean
        np.testing.assert_array_equal(cm(x, good)[0], _ort(m, {"x": x, "i": good})[0])


# --- CumSum -------------------------------------------------------------------------------------

FLAGS = [(0, 0), (1, 0), (0, 1), (1, 1)]  # (exclusive, reverse)


@pytest.mark.parametrize("t", [F32, I64], ids=["float32", "int64"])
@pytest.mark.parametrize("axis", [0, 1])
def test_cumsum_matches_onnxruntime(cuda, t, axis):
    """Every exclusive / reverse combination, on axis 0 (inner lines) and 1 (the middle of a
    rank-3 input), with the axis a constant initializer."""
    shape = (3, 4, 2)
    nodes = [helper.make_node("CumSum", ["x", "axis"], [f"y{k}"], exclusive=ex, reverse=rv)
             for k, (ex, rv) in enumerate(FLAGS)]
    m = make_model(nodes, [("x", t, list(shape))], [(f"y{k}", t, None) for k in range(4)],
                   {"axis": np.array(axis, np.int64)})
    cm = _check(m, {"x": _data(shape, t)})
    assert called_names(cm) == ["cuda.scan.cumsum3"] * 4


def test_cumsum_last_axis_int32_and_negative_axis(cuda):
    m = make_model([helper.make_node("CumSum", ["x", "axis"], ["y"], reverse=1)],
                   [("x", I32, [2, 5])], [("y", I32, None)], {"axis": np.array(-1, np.int32)})
    _check(m, {"x": _data((2, 5), I32)})


def test_cumsum_of_an_unhandled_dtype_stays_on_the_cpu(cuda):
    m = make_model([helper.make_node("CumSum", ["x", "axis"], ["y"])],
                   [("x", TensorProto.UINT32, [2, 3])], [("y", TensorProto.UINT32, None)],
                   {"axis": np.array(1, np.int64)})
    cm = jitort.compile(m, device="cuda")
    assert cm.placement_counts()["cpu"] == 1, cm.summary()
    x = np.arange(6, dtype=np.uint32).reshape(2, 3)
    np.testing.assert_array_equal(cm(x)[0], np.cumsum(x, axis=1))
