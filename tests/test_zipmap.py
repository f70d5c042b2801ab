"""ZipMap's dicts built in compiled code (kernels/cpu/pydicts.py): the same objects as
onnxruntime's (label keys, Python floats of the float32 values), reference counts balanced."""
import gc
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import jitort
from jitort import zipmap
from jitort.kernels.cpu.pydicts import fill_label_dicts


def _zipmap_model(labels):
    key = "classlabels_strings" if isinstance(labels[0], str) else "classlabels_int64s"
    node = helper.make_node("ZipMap", ["X"], ["Z"], domain="ai.onnx.ml", **{key: labels})
    kt = TensorProto.STRING if isinstance(labels[0], str) else TensorProto.INT64
    out = helper.make_value_info("Z", helper.make_sequence_type_proto(
        helper.make_map_type_proto(kt, helper.make_tensor_type_proto(TensorProto.FLOAT, None))))
    g = helper.make_graph([node], "z", [helper.make_tensor_value_info(
        "X", TensorProto.FLOAT, [None, len(labels)])], [out])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ai.onnx.ml", 3)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize("labels", [[0, 1, 2], [7, -3], ["cat", "dog", "emu", "yak"]])
@pytest.mark.parametrize("rows", [1, zipmap._NATIVE_MIN_ROWS, zipmap._NATIVE_MIN_ROWS + 1, 1000])
def test_zipmap_dicts_equal_onnxruntime(labels, rows):
    model = _zipmap_model(labels)
    x = np.random.default_rng(rows).standard_normal((rows, len(labels))).astype(np.float32)
    x[0, 0] = np.nan
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    got = jitort.compile(model, strict=True, tiered=False).run(None, {"X": x})[0]
    assert type(got) is list and len(got) == rows
    for g, w in zip(got, want):
        assert type(g) is dict and list(g) == list(w) == sorted(labels)  # as onnxruntime's
        assert all(type(k) is type(labels[0]) for k in g)
        assert all(type(v) is float for v in g.values())
    assert np.isnan(got[0][labels[0]]) and np.isnan(want[0][labels[0]])
    assert [g[k] for g in got[1:] for k in labels] == x[1:].ravel().tolist()
    np.testing.assert_array_equal([list(d.values()) for d in got[1:]],
                                  [list(d.values()) for d in want[1:]])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fill_label_dicts_references_balanced(dtype):
    labels = [10**30, "".join(["b", "ee"]), (1, 2)]  # objects no interning or cache shares
    a = np.arange(60, dtype=dtype).reshape(20, 3)[::-1]  # negative strides
    before = [sys.getrefcount(v) for v in labels]
    out = [None] * a.shape[0]
    cols = np.array([2, 0, 1], np.intp)
    assert fill_label_dicts(a, cols, np.array([id(v) for v in labels], np.intp), id(out)) == 20
    ref = [dict(zip(labels, row)) for row in a[:, cols].tolist()]
    assert out == ref and [list(d) for d in out] == [labels] * 20
    assert [sys.getrefcount(v) for v in labels] == [b + 40 for b in before]
    counts = [[sys.getrefcount(d)] + [sys.getrefcount(v) for v in d.values()] for d in out]
    assert counts == [[sys.getrefcount(d)] + [sys.getrefcount(v) for v in d.values()] for d in ref]
    del out, ref
    gc.collect()
    assert [sys.getrefcount(v) for v in labels] == before
