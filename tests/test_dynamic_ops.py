"""Ops whose output shape depends on the input values (jitort/dynamic_ops.py): NonZero, Compress,
Unique and NonMaxSuppression run as dynamic steps, compiled kernels between compiled segments,
in strict mode. Results against onnxruntime and onnx.reference on random inputs (fixed seeds);
the structure of the program (a dynamic step, no interpreter runner) and a new output size
re-planning the next segment without compiling anything; element types the kernels do not
take left to the interpreter with the reason; bad inputs refused with a jitort exception."""
import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

import jitort
from jitort.partition import DYNAMIC, DynamicStep

from .helpers import F32, I64, make_model, run_onnxruntime, run_reference

B = TensorProto.BOOL


def _strict(m):
    cm = jitort.compile(m, strict=True, tiered=False, threads=1)
    assert cm.fallback_nodes() == []
    return cm


def _same(got, want):
    """Exact equality, output by output (indices, counts, selected values)."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)


# --- NonZero between two compiled parts: structure and re-planning -----------------------------

def _nonzero_model():
    """a = x * x - 1 (compiled); idx = NonZero(Relu(a)); y = GatherND(x, idx^T) + 1 (compiled)."""
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"]),
             helper.make_node("Sub", ["sq", "one"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("NonZero", ["r"], ["idx"]),
             helper.make_node("Transpose", ["idx"], ["t"]),
             helper.make_node("GatherND", ["x", "t"], ["g"]),
             helper.make_node("Add", ["g", "one"], ["y"])]
    return make_model(nodes, [("x", F32, [3, 4])], [("y", F32, None), ("idx", I64, None)],
                      {"one": np.float32(1)})


def test_nonzero_between_compiled_segments_replans_without_recompiling():
    m = _nonzero_model()
    cm = _strict(m)
    (node,) = [n for n in cm.graph.nodes if n.op_type == "NonZero"]
    assert cm.placement[id(node)] == DYNAMIC
    dyn = [st for st in cm.steps if isinstance(st, DynamicStep)]
    assert len(dyn) == 1 and dyn[0].node is node and id(node) not in cm._runners
    assert len(cm.compiled_segments()) == 2, "NonZero splits the program in two segments"
    assert "dynamic (output shape from values) 1, interpreted 0" in cm.summary()

    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, (3, 4)).astype(np.float32)
    feeds = [{"x": x},                                   # some rows
             {"x": np.zeros((3, 4), np.float32)},        # none: (2, 0)
             {"x": np.full((3, 4), 3, np.float32)},      # all twelve
             {"x": np.where(np.arange(12).reshape(3, 4) % 5 == 0, 2, 0).astype(np.float32)}]
    counts = []
    for f in feeds:
        got = cm.run(None, f)
        _same(got, run_onnxruntime(m, f))
        counts.append(got[1].shape[1])
    assert 0 in counts and 12 in counts and len(set(counts)) == 4, counts

    # a new count: the segment after NonZero is planned again (replayed), nothing compiles
    seg, after = cm.compiled_segments()[1]
    before, replays, records = jitort.compile_count(), after.replays, len(after.records)
    x5 = np.where(np.arange(12).reshape(3, 4) < 5, 2, 0).astype(np.float32)
    assert 5 not in counts
    _same(cm.run(None, {"x": x5}), run_onnxruntime(m, {"x": x5}))
    assert jitort.compile_count() == before, "a new nonzero count recompiled something"
    assert after.replays == replays + 1 and len(after.records) == records
    assert len(seg.plans) == 5  # one plan per count, the segment before NonZero keeps one
    assert len(cm.compiled_segments()[0][0].plans) == 1


def test_a_probe_stops_at_dynamic_kernels_not_in_the_cache(monkeypatch):
    # a tiered model probes the cache on its first call: a dynamic step must not compile there
    from jitort import executor
    m = _nonzero_model()
    cm = _strict(m)
    x = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    cm.run(None, {"x": x})  # compiled in this process: the probe runs it
    _same(cm.execute_compiled({"x": x}, only_cached=True), run_onnxruntime(m, {"x": x}))
    (node,) = [n for n in cm.graph.nodes if n.op_type == "NonZero"]
    flow = cm._flows[id(node)]
    assert {k.py_func.__name__ for k in flow.kernels()} == {"count_nonzero", "nonzero_fill"}

    class Cold:  # a kernel neither compiled in this process nor in the on-disk cache
        overloads = {}
    monkeypatch.setattr(flow, "kernels", lambda: [Cold()])
    monkeypatch.setattr(executor, "_dispatcher_cached", lambda disp: False)
    with pytest.raises(executor.NotCached, match="dynamic step .*NonZero"):
        cm.execute_compiled({"x": x}, only_cached=True)


# --- NonZero, Compress: element types and axes -------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_, np.float16, ml_dtypes.bfloat16])
def test_nonzero_element_types(dtype):
    rng = np.random.default_rng(1)
    x = (rng.integers(-2, 3, (2, 3, 5)) * rng.integers(0, 2, (2, 3, 5))).astype(dtype)
    if np.dtype(dtype).kind == "f" or dtype is ml_dtypes.bfloat16:
        x[0, 0, :2] = np.array([-0.0, np.nan], np.float32).astype(dtype)  # -0 is zero, NaN not
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    m = make_model([helper.make_node("NonZero", ["x"], ["y"])], [("x", elem, [2, 3, 5])],
                   [("y", I64, None)], opset=13)
    cm = _strict(m)
    _same(cm.run(None, {"x": x}), run_reference(m, {"x": x}))
    z = np.zeros_like(x)
    _same(cm.run(None, {"x": z}), [np.zeros((3, 0), np.int64)])


def test_nonzero_of_a_scalar_has_no_index_rows_as_the_reference():
    # (rank 0, nnz) as onnx.reference and the spec's shape inference (onnxruntime 1.32 gives
    # (1, nnz), the warnings it prints say its own shape inference expected 0 rows)
    m = make_model([helper.make_node("NonZero", ["x"], ["y"])], [("x", F32, [])],
                   [("y", I64, None)], opset=13)
    cm = _strict(m)
    for v in (0.0, 2.5):
        x = np.array(v, np.float32)
        _same(cm.run(None, {"x": x}), run_reference(m, {"x": x}))


def _compress_model(axis, elem=F32, xs=(3, 4, 2)):
    attrs = {} if axis is None else {"axis": axis}
    return make_model([helper.make_node("Compress", ["x", "c"], ["y"], **attrs)],
                      [("x", elem, list(xs)), ("c", B, ["n"])], [("y", elem, None)])


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress_axes_and_short_conditions(axis):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4, 2)).astype(np.float32)
    m = _compress_model(axis)
    cm = _strict(m)
    length = x.size if axis is None else x.shape[axis]
    for n in (length, max(length - 2, 1), 1):   # the full axis, then shorter conditions
        for c in (rng.integers(0, 2, n).astype(bool), np.zeros(n, bool), np.ones(n, bool)):
            f = {"x": x, "c": c}
            _same(cm.run(None, f), run_onnxruntime(m, f))


def test_compress_16_bit_and_integer_elements_move_exactly():
    rng = np.random.default_rng(3)
    for dtype in (ml_dtypes.bfloat16, np.float16, np.int64):
        x = rng.standard_normal((3, 4, 2)).astype(np.float32).astype(dtype)
        m = _compress_model(1, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
        f = {"x": x, "c": np.array([True, False, True], bool)}
        _same(_strict(m).run(None, f), run_reference(m, f))


def test_compress_condition_past_the_axis_is_refused():
    cm = _strict(_compress_model(0))
    x = np.ones((3, 4, 2), np.float32)
    with pytest.raises(jitort.InvalidInput, match="condition selects past the axis 0"):
        cm.run(None, {"x": x, "c": np.array([1, 0, 0, 1], bool)})
    # a longer condition whose extra entries are false selects within the axis (as numpy)
    f = {"x": x, "c": np.array([1, 0, 1, 0], bool)}
    _same(cm.run(None, f), [x[[0, 2]]])


# --- Unique ------------------------------------------------------------------------------------

def _unique_model(elem, xs, **attrs):
    outs = ["y", "indices", "inverse", "counts"]
    return make_model([helper.make_node("Unique", ["x"], outs, **attrs)], [("x", elem, xs)],
                      [("y", elem, None)] + [(o, I64, None) for o in outs[1:]], opset=11)


@pytest.mark.parametrize("sort", [1, 0])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_unique_integers_against_onnxruntime(axis, sort):
    rng = np.random.default_rng(4)
    attrs = {"sorted": sort} | ({} if axis is None else {"axis": axis})
    m = _unique_model(I64, [4, 5], **attrs)
    cm = _strict(m)
    for x in (rng.integers(0, 3, (4, 5)), rng.integers(-2, 2, (4, 5)) // 2 * 3,
              np.repeat(rng.integers(0, 9, (2, 5)), 2, axis=0)):
        f = {"x": x.astype(np.int64)}
        _same(cm.run(None, f), run_onnxruntime(m, f))


@pytest.mark.parametrize("sort", [1, 0])
def test_unique_floats_with_nan_and_signed_zero_as_the_reference(sort):
    rng = np.random.default_rng(5)
    x = rng.integers(-2, 3, 40).astype(np.float32) / 2
    x[[3, 17, 30]] = np.nan  # without an axis the NaNs are one value, counted together
    x[[5, 9]] = [-0.0, 0.0]
    m = _unique_model(F32, [40], sorted=sort)
    got = _strict(m).run(None, {"x": x})
    _same(got, run_reference(m, {"x": x}))
    assert np.isnan(got[0]).sum() == 1 and got[3][np.isnan(got[0])][0] == 3


def test_unique_rows_along_an_axis_and_16_bit_values():
    rng = np.random.default_rng(6)
    x = rng.integers(0, 2, (3, 6, 2)).astype(np.float32)
    x[:, 4] = x[:, 1]
    for axis in (1, -2, 0):
        m = _unique_model(F32, [3, 6, 2], axis=axis, sorted=1)
        _same(_strict(m).run(None, {"x": x}), run_reference(m, {"x": x}))
    xb = (rng.integers(-4, 4, 30) / 4).astype(ml_dtypes.bfloat16)
    m = _unique_model(TensorProto.BFLOAT16, [30])
    _same(_strict(m).run(None, {"x": xb}), run_reference(m, {"x": xb}))


def test_unique_of_strings_stays_interpreted_with_the_reason():
    m = _unique_model(TensorProto.STRING, [5])
    with pytest.raises(jitort.UnsupportedOp, match="Unique kernels take bool, integer and float"):
        jitort.compile(m, strict=True)
    cm = jitort.compile(m, tiered=False)
    assert "not object" in " ".join(cm.fallback_reasons.values())


# --- NonMaxSuppression -------------------------------------------------------------------------

def _nms_model(center, n_inputs):
    names = ["boxes", "scores", "max_out", "iou", "score"][:n_inputs]
    inputs = [("boxes", F32, ["b", "n", 4]), ("scores", F32, ["b", "c", "n"]),
              ("max_out", I64, [1]), ("iou", F32, [1]), ("score", F32, [1])][:n_inputs]
    node = helper.make_node("NonMaxSuppression", names, ["sel"], center_point_box=center)
    return make_model([node], inputs, [("sel", I64, None)], opset=11)


def _boxes(rng, b, n, center):
    if center:
        xy = rng.uniform(0, 10, (b, n, 2))
        wh = rng.uniform(0.5, 4, (b, n, 2))
        return np.concatenate([xy, wh], axis=2).astype(np.float32)
    p, q = rng.uniform(0, 10, (b, n, 2)), rng.uniform(0, 10, (b, n, 2))
    return np.concatenate([p, q], axis=2).astype(np.float32)  # corners in either order


@pytest.mark.parametrize("center", [0, 1])
def test_nms_against_onnxruntime_and_the_reference(center):
    rng = np.random.default_rng(7 + center)
    m5, m4 = _nms_model(center, 5), _nms_model(center, 4)
    cm5, cm4 = _strict(m5), _strict(m4)
    for b, c, n, max_out, iou, score in [(2, 3, 20, 4, 0.3, 0.4), (1, 2, 30, 100, 0.5, 0.0),
                                         (2, 1, 12, 0, 0.5, 0.2), (1, 1, 25, 25, 0.0, 0.9)]:
        boxes = _boxes(rng, b, n, center)
        scores = rng.integers(0, 20, (b, c, n)).astype(np.float32) / 20  # ties on purpose
        f = {"boxes": boxes, "scores": scores, "max_out": np.array([max_out], np.int64),
             "iou": np.array([iou], np.float32), "score": np.array([score], np.float32)}
        got = cm5.run(None, f)
        _same(got, run_onnxruntime(m5, f))
        _same(got, run_reference(m5, f))
        f.pop("score")  # no score threshold: every box is a candidate
        _same(cm4.run(None, f), run_onnxruntime(m4, f))


def test_nms_without_max_output_selects_nothing_and_bad_shapes_are_refused():
    m = _nms_model(0, 2)
    cm = _strict(m)
    f = {"boxes": np.zeros((1, 3, 4), np.float32), "scores": np.ones((1, 1, 3), np.float32)}
    _same(cm.run(None, f), run_onnxruntime(m, f))
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["sel"])
    loose = make_model([node], [("boxes", F32, [None, None, 4]), ("scores", F32, [None] * 3)],
                       [("sel", I64, None)], opset=11)  # nothing ties the box counts
    with pytest.raises(jitort.InvalidInput, match="NonMaxSuppression node .* boxes .1, 3, 4."):
        _strict(loose).run(None, {"boxes": np.zeros((1, 3, 4), np.float32),
                                  "scores": np.ones((1, 1, 4), np.float32)})
