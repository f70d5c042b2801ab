"""Bad feeds and bad models raise jitort exceptions that name the culprit."""
import numpy as np
import onnx
import pytest
from onnx import helper

import jitort
from jitort import InvalidInput, InvalidModel, UnsupportedOp

from .helpers import F32, I64, make_model


@pytest.fixture(scope="module")
def add_model():
    m = make_model([helper.make_node("Add", ["x", "y"], ["z"])],
                   [("x", F32, ["N", 4]), ("y", F32, ["N", 4])], [("z", F32, None)])
    return jitort.compile(m)


def ok(n=2):
    return np.ones((n, 4), np.float32)


@pytest.mark.parametrize("feeds, match", [
    ({"x": ok()}, "missing input 'y'"),
    ({"x": ok(), "y": ok(), "w": ok()}, "unknown input name"),
    ({"x": ok(), "y": ok().astype(np.float64)}, "input 'y' has dtype float64, expected float32"),
    ({"x": ok(), "y": np.ones(4, np.float32)}, "input 'y' has rank 1"),
    ({"x": ok(), "y": np.ones((2, 5), np.float32)}, "dim 1 must be 4"),
    ({"x": ok(2), "y": ok(3)}, r"dim 0 \(N\) is 3"),
    ({"x": ok(), "y": "not an array"}, "must be a numpy array"),
])
def test_bad_feeds(add_model, feeds, match):
    with pytest.raises(InvalidInput, match=match):
        add_model.run(None, feeds)


def test_too_many_positional(add_model):
    with pytest.raises(InvalidInput, match="takes 2 inputs"):
        add_model(ok(), ok(), ok())


def test_unknown_output_name(add_model):
    with pytest.raises(InvalidInput, match="unknown output"):
        add_model.run(["nope"], {"x": ok(), "y": ok()})


def test_non_contiguous_and_readonly_inputs_work(add_model):
    x = np.ones((4, 2), np.float32).T
    y = ok()
    y.flags.writeable = False
    np.testing.assert_array_equal(add_model(x, y)[0], np.full((2, 4), 2, np.float32))


def test_outputs_are_owned_by_the_caller(add_model):
    a = add_model(ok(), ok())[0]
    b = add_model(ok() * 3, ok())[0]
    assert a[0, 0] == 2 and b[0, 0] == 4 and a.flags.owndata


def test_gather_index_out_of_range_is_an_input_error():
    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    m = make_model([helper.make_node("Gather", ["t", "i"], ["y"])],
                   [("i", I64, ["K"])], [("y", F32, None)], {"t": table})
    cm = jitort.compile(m)
    np.testing.assert_array_equal(cm(np.array([5, -1], np.int64))[0], table[[5, -1]])
    with pytest.raises(InvalidInput, match="out of range"):
        cm(np.array([0, 6], np.int64))


@pytest.mark.parametrize("model, match", [
    (b"\x00garbage\xff" * 10, "cannot parse model bytes"),
    ("/nonexistent/model.onnx", "model file not found"),
    (3.5, "cannot load a model from float"),
])
def test_unreadable_models(model, match):
    with pytest.raises(InvalidModel, match=match):
        jitort.compile(model)


def test_undefined_value_is_named():
    m = make_model([helper.make_node("Add", ["x", "ghost"], ["z"])], [("x", F32, [2])], [("z", F32, None)])
    with pytest.raises(InvalidModel, match="undefined value 'ghost'"):
        jitort.compile(m)


def test_unknown_op_is_named():
    m = make_model([helper.make_node("FrobnicateX", ["x"], ["z"], domain="com.example")],
                   [("x", F32, [2])], [("z", F32, None)])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(UnsupportedOp, match="FrobnicateX"):
        jitort.compile(m)


def test_external_data_escaping_the_folder_is_refused(tmp_path):
    t = onnx.numpy_helper.from_array(np.ones(4, np.float32), "w")
    t.data_location = onnx.TensorProto.EXTERNAL
    t.ClearField("raw_data")
    for k, v in (("location", "../../etc/passwd"), ("offset", "0"), ("length", "16")):
        e = t.external_data.add()
        e.key, e.value = k, v
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["z"])], "g",
                          [helper.make_tensor_value_info("x", F32, [4])],
                          [helper.make_tensor_value_info("z", F32, None)], [t])
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(g).SerializeToString())
    with pytest.raises(InvalidModel, match="escapes the model folder"):
        jitort.compile(path)
