"""jitort.InferenceSession against onnxruntime.InferenceSession: the same calls on the same
models, everything they return compared (descriptions field by field, metadata, providers,
outputs, exception classes, and that jitort's messages name the culprit)."""
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import jitort
from jitort import session as js

from .helpers import F32, I64, assert_outputs_close, require_cases
from .models import SHARED, shared_feeds, shared_path

ort = pytest.importorskip("onnxruntime")
S = pytest.importorskip("onnxruntime.capi.onnxruntime_pybind11_state")


def _affine() -> onnx.ModelProto:
    """features [batch, 3] (+ bias_in [batch?, 3]) * scale -> summed, scaled; ``scale`` is an
    initializer that is also a graph input (overridable); metadata fields all set."""
    nodes = [helper.make_node("Add", ["features", "bias_in"], ["summed"]),
             helper.make_node("Mul", ["summed", "scale"], ["scaled"]),
             helper.make_node("ReduceSum", ["scaled"], ["total"], keepdims=0)]
    g = helper.make_graph(
        nodes, "affine",
        [helper.make_tensor_value_info("features", F32, ["batch", 3]),
         helper.make_tensor_value_info("bias_in", F32, [None, 3]),
         helper.make_tensor_value_info("scale", F32, [3])],
        [helper.make_tensor_value_info("summed", F32, None),
         helper.make_tensor_value_info("scaled", F32, ["batch", 3]),
         helper.make_tensor_value_info("total", F32, None)],
        [numpy_helper.from_array(np.array([1, 2, 3], np.float32), "scale")],
        doc_string="the graph's own doc")
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests",
                          producer_version="1.0", domain="ai.jitort.test", model_version=7,
                          doc_string="an affine map")
    m.ir_version = 8
    helper.set_model_props(m, {"author": "jitort", "license": "MIT"})
    return m


def _zipmap() -> onnx.ModelProto:
    """A linear classifier with ZipMap: int64 labels and seq(map(int64, tensor(float)))."""
    nodes = [helper.make_node("LinearClassifier", ["X"], ["label", "scores"], domain="ai.onnx.ml",
                              classlabels_ints=[0, 1, 2], coefficients=list(np.linspace(-1, 1, 12)),
                              intercepts=[0.1, -0.2, 0.3], post_transform="SOFTMAX"),
             helper.make_node("ZipMap", ["scores"], ["probabilities"], domain="ai.onnx.ml",
                              classlabels_int64s=[0, 1, 2])]
    seq_map = helper.make_sequence_type_proto(helper.make_map_type_proto(
        I64, helper.make_tensor_type_proto(F32, None)))
    g = helper.make_graph(nodes, "clf", [helper.make_tensor_value_info("X", F32, [None, 4])],
                          [helper.make_tensor_value_info("label", I64, [None]),
                           helper.make_value_info("probabilities", seq_map)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ai.onnx.ml", 1)])
    m.ir_version = 8
    return m


def _sessions(model, **kw):
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return (ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]),
            jitort.InferenceSession(data, so, providers=["CPUExecutionProvider"], **kw))


def _same_args(a, b):
    assert [(x.name, x.type, x.shape) for x in a] == [(x.name, x.type, x.shape) for x in b]


def _same_description(o, j):
    _same_args(o.get_inputs(), j.get_inputs())
    _same_args(o.get_outputs(), j.get_outputs())
    _same_args(o.get_overridable_initializers(), j.get_overridable_initializers())
    mo, mj = o.get_modelmeta(), j.get_modelmeta()
    for f in ("producer_name", "graph_name", "domain", "description", "graph_description",
              "version", "custom_metadata_map"):
        assert getattr(mo, f) == getattr(mj, f), f
    assert o.get_providers() == j.get_providers()
    assert o.get_provider_options() == j.get_provider_options()
    so_o, so_j = o.get_session_options(), j.get_session_options()
    for f in ("intra_op_num_threads", "graph_optimization_level", "enable_profiling"):
        assert getattr(so_o, f) == getattr(so_j, f), f


@pytest.fixture(scope="module")
def affine():
    return _sessions(_affine())


def _feeds(batch=2):
    rng = np.random.default_rng(0)
    return {"features": rng.standard_normal((batch, 3)).astype(np.float32),
            "bias_in": rng.standard_normal((batch, 3)).astype(np.float32)}


def test_affine_description_and_outputs(affine):
    o, j = affine
    _same_description(o, j)
    assert j.get_modelmeta().custom_metadata_map == {"author": "jitort", "license": "MIT"}
    assert [a.shape for a in j.get_outputs()] == [[None, 3], ["batch", 3], []]
    feeds = _feeds()
    for names in (None, [], ["total"], ["scaled", "summed"]):
        assert_outputs_close(j.run(names, feeds), o.run(names, feeds))
    lists = {k: v.tolist() for k, v in feeds.items()}  # onnxruntime converts lists
    assert_outputs_close(j.run(None, lists), o.run(None, lists))


def test_affine_overridden_initializer(affine):
    o, j = affine
    feeds = {**_feeds(), "scale": np.array([5, -1, 0.5], np.float32)}
    assert_outputs_close(j.run(None, feeds), o.run(None, feeds))
    assert_outputs_close(j.run(None, _feeds()), o.run(None, _feeds()))  # default again


def test_initializers_before_ir4_are_constants():
    """Before IR version 4 an initializer listed as a graph input is a constant in onnxruntime:
    neither an input nor overridable, and feeding it is an unknown input name."""
    m = _affine()
    m.ir_version, m.opset_import[0].version = 3, 8
    o, j = _sessions(m)
    _same_description(o, j)
    assert j.get_overridable_initializers() == []
    feeds = {**_feeds(), "scale": np.ones(3, np.float32)}
    with pytest.raises(S.InvalidArgument):
        o.run(None, feeds)
    with pytest.raises(S.InvalidArgument, match="scale"):
        j.run(None, feeds)


def _bad_calls():
    f = _feeds()
    return [
        ("missing feed", None, {"features": f["features"]}, "bias_in"),
        ("wrong dtype", None, {**f, "bias_in": f["bias_in"].astype(np.float64)}, "bias_in"),
        ("wrong rank", None, {**f, "bias_in": f["bias_in"][None]}, "bias_in"),
        ("wrong dim", None, {**f, "features": np.zeros((2, 4), np.float32)}, "features"),
        ("unknown output", ["nope_out"], f, "nope_out"),
        ("unknown input", None, {**f, "extra_in": f["features"]}, "extra_in"),
    ]


@pytest.mark.parametrize("case", require_cases(_bad_calls(), 6, "_bad_calls"),
                         ids=lambda c: c[0])
def test_errors_match_onnxruntime(affine, case):
    o, j = affine
    _, names, feeds, culprit = case
    with pytest.raises(Exception) as want:
        o.run(names, feeds)
    with pytest.raises(Exception) as got:
        j.run(names, feeds)
    # the exception class onnxruntime raises catches ours (an onnxruntime class when it
    # raises one, a builtin otherwise), and ours is a jitort error naming the input or output
    assert isinstance(got.value, want.type), (got.type.__mro__, want.type)
    assert isinstance(got.value, jitort.InvalidInput)
    assert culprit in str(got.value)
    if want.type is S.InvalidArgument:
        assert isinstance(got.value, js.InvalidArgument)


def test_load_errors_match_onnxruntime(tmp_path):
    for source, ours in ((b"not an onnx model", js.InvalidProtobuf),
                         (str(tmp_path / "absent.onnx"), js.NoSuchFile)):
        with pytest.raises(Exception) as want:
            ort.InferenceSession(source, providers=["CPUExecutionProvider"])
        with pytest.raises(ours) as got:
            jitort.InferenceSession(source)
        assert isinstance(got.value, want.type)
    assert "absent.onnx" in str(got.value)


def test_zipmap_types_and_outputs():
    o, j = _sessions(_zipmap())
    _same_description(o, j)
    assert j.get_outputs()[1].type == "seq(map(int64,tensor(float)))"
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    (lo, po), (lj, pj) = o.run(None, {"X": x}), j.run(None, {"X": x})
    np.testing.assert_array_equal(lj, lo)
    assert len(pj) == len(po) == 5
    for a, b in zip(pj, po):
        assert sorted(a) == sorted(b)
        np.testing.assert_allclose([a[k] for k in sorted(a)], [b[k] for k in sorted(b)],
                                   rtol=1e-5)


def test_session_options_mapped():
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    j = jitort.InferenceSession(_affine().SerializeToString(), so)
    assert j.get_session_options() is so
    assert j.compiled.threads == 1
    assert not j.compiled.pass_report.seconds  # no pass ran
    ours = js.SessionOptions()
    ours.intra_op_num_threads = 1
    assert jitort.InferenceSession(_affine().SerializeToString(), ours).compiled.threads == 1


def test_cuda_provider_falls_back_with_a_warning():
    data = _affine().SerializeToString()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        j = jitort.InferenceSession(data, providers=["CUDAExecutionProvider",
                                                     "CPUExecutionProvider"])
    if js._cuda_available():
        assert j.get_providers() == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    else:
        assert j.get_providers() == ["CPUExecutionProvider"]
        assert any(issubclass(w.category, js.ProviderWarning) for w in caught)


def test_no_onnxruntime_import_without_its_options():
    code = textwrap.dedent("""
        import sys, numpy as np, jitort
        from onnx import helper, TensorProto
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        s = jitort.InferenceSession(m.SerializeToString())
        try:
            s.run(None, {"x": np.zeros((2, 2), np.float32)})
        except jitort.InvalidInput as e:
            print(type(e).__name__, e)
        print([(a.name, a.type, a.shape) for a in s.get_inputs()])
        assert "onnxruntime" not in sys.modules
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "InvalidArgument [jitort] : 2 : INVALID_ARGUMENT : Invalid rank for input: x Got: 2 "
        "Expected: 1 Please fix either the inputs/outputs or the model.",
        "[('x', 'tensor(float)', [2])]"]


def test_string_outputs_are_object_arrays():
    """onnxruntime returns ``tensor(string)`` outputs as numpy object arrays of ``str``."""
    node = helper.make_node("LabelEncoder", ["ids"], ["words"], domain="ai.onnx.ml",
                            keys_int64s=[1, 2, 3], values_strings=["a", "bb", "ccc"],
                            default_string="?")
    g = helper.make_graph([node], "dec", [helper.make_tensor_value_info("ids", I64, [None])],
                          [helper.make_tensor_value_info("words", 8, [None])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ai.onnx.ml", 2)])
    m.ir_version = 8
    o, j = _sessions(m)
    feeds = {"ids": np.array([2, 7, 1], np.int64)}
    got, want = j.run(None, feeds), o.run(None, feeds)
    assert got[0].dtype == want[0].dtype == object
    assert got[0].tolist() == want[0].tolist() == ["bb", "?", "a"]


def test_string_inputs_take_numpy_str_arrays():
    """onnxruntime takes numpy ``str`` arrays (dtype ``<U``) for ``tensor(string)`` inputs."""
    node = helper.make_node("LabelEncoder", ["words"], ["ids"], domain="ai.onnx.ml",
                            keys_strings=["a", "bb", "ccc"], values_int64s=[1, 2, 3],
                            default_int64=-1)
    g = helper.make_graph([node], "enc", [helper.make_tensor_value_info("words", 8, [None])],
                          [helper.make_tensor_value_info("ids", I64, [None])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ai.onnx.ml", 2)])
    m.ir_version = 8
    o, j = _sessions(m)
    _same_description(o, j)
    feeds = {"words": np.array(["bb", "zz", "a", "ccc"])}
    assert_outputs_close(j.run(None, feeds), o.run(None, feeds), exact=True)


@pytest.mark.parametrize("name", ["gpt2"])
def test_shared_model(name):
    """A real model (external data, symbolic dims): descriptions and feed errors, which need
    no compilation (outputs are compared on the small models above: compiling gpt2 cold would
    take a minute of the suite)."""
    if not shared_path(name).exists():
        pytest.skip(f"{SHARED} not present (the shared model corpus is optional)")
    o, j = _sessions(shared_path(name))
    _same_description(o, j)
    assert [a.shape for a in j.get_inputs()] == [["s77", "s27"]]  # the exporter's symbols
    feeds = shared_feeds(name, seq=8)
    key = next(iter(feeds))
    for bad in ({key: feeds[key].astype(np.int32)}, {key: feeds[key][None]}, {}):
        with pytest.raises(Exception) as want:
            o.run(None, bad)
        with pytest.raises(want.type) as got:
            j.run(None, bad)
        assert key in str(got.value)
