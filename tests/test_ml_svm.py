"""ai.onnx.ml support vector machines and preprocessing ops compiled (``strict=True``) against
onnxruntime at one thread: scikit-learn SVMs converted by skl2onnx, merged into one graph (one
compiled program), and op-level edge cases of every op; string forms left to the interpreter
with a clear UnsupportedOp under ``strict=True``. scikit-learn's preprocessing pipelines and
the binary tree classifiers: tests/test_ml_preprocess.py (they share the tree kernels)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import jitort

from .test_ml_ops import _X, _Y2, _Y3, _YR, _check, _convert, _ort

from sklearn.svm import SVC, SVR, LinearSVC  # noqa: E402

_ML = "ai.onnx.ml"
_Y4 = _Y3 + (_X[:, 3] > 0.5) * (3 - _Y3)  # four classes: one-vs-one votes can tie


def _merge(models: dict) -> onnx.ModelProto:
    """One graph running every model of ``models`` on their shared inputs (everything but the
    inputs renamed with the model's key), outputs side by side."""
    nodes, inits, outs, ins, opsets = [], [], [], {}, {}
    for tag, m in models.items():
        keep = {i.name for i in m.graph.input}

        def ren(s, tag=tag, keep=keep):
            return s if not s or s in keep else f"{tag}_{s}"
        for n in m.graph.node:
            c = onnx.NodeProto()
            c.CopyFrom(n)
            c.name = f"{tag}_{n.name}"
            c.input[:] = [ren(s) for s in n.input]
            c.output[:] = [ren(s) for s in n.output]
            nodes.append(c)
        for t in m.graph.initializer:
            c = onnx.TensorProto()
            c.CopyFrom(t)
            c.name = ren(t.name)
            inits.append(c)
        for o in m.graph.output:
            c = onnx.ValueInfoProto()
            c.CopyFrom(o)
            c.name = ren(o.name)
            outs.append(c)
        for i in m.graph.input:
            ins.setdefault(i.name, i)
        for o in m.opset_import:
            opsets[o.domain] = max(opsets.get(o.domain, 0), o.version)
    g = helper.make_graph(nodes, "merged", list(ins.values()), outs, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    model.ir_version = 8
    return model


_N = 120  # training rows: fewer support vectors, a quicker fit
_SVMS = {
    # "ovo": the raw one-vs-one scores (skl2onnx's "ovr" adds ~50 elementwise nodes)
    "rbf3": lambda: _convert(SVC(kernel="rbf", decision_function_shape="ovo"), _Y3[:_N], x=_X[:_N]),
    "poly3p": lambda: _convert(SVC(kernel="poly", degree=3, probability=True, random_state=0),
                               _Y3[:_N], x=_X[:_N]),
    "lin2p": lambda: _convert(SVC(kernel="linear", probability=True, random_state=0), _Y2[:_N],
                              x=_X[:_N]),
    "rbf2": lambda: _convert(SVC(kernel="rbf", C=0.5), _Y2[:_N], x=_X[:_N]),
    "sig4": lambda: _convert(SVC(kernel="sigmoid", gamma=0.05, decision_function_shape="ovo"),
                             _Y4[:_N], x=_X[:_N]),
    "rbf4p": lambda: _convert(SVC(kernel="rbf", probability=True, random_state=0), _Y4[:_N],
                              x=_X[:_N]),
    "svr": lambda: _convert(SVR(kernel="rbf", C=2.0), _YR[:_N], None, x=_X[:_N]),
    "svr_poly": lambda: _convert(SVR(kernel="poly", degree=2), _YR[:_N], None, x=_X[:_N]),
    "linsvc": lambda: _convert(LinearSVC(), _Y3[:_N], None, x=_X[:_N]),
}


def _svm_models():
    return _merge({k: make() for k, make in _SVMS.items()})


def test_sklearn_svms_match_onnxruntime():
    model = _svm_models()
    assert {n.op_type for n in model.graph.node} >= {"SVMClassifier", "SVMRegressor"}
    x = np.random.default_rng(1).standard_normal((257, 6)).astype(np.float32)
    got = _check(model, {"X": x})
    _check(model, {"X": x[:1]})
    assert len(got) == len(model.graph.output) == 16


def _node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, domain=_ML, **attrs)


def _edge_model():
    """Op-level forms skl2onnx does not write: default attributes, int / double inputs, tensor
    attributes (LabelEncoder 4), repeated keys and categories, FeatureVectorizer padding and
    truncation, liblinear SVMs (one on a double input), post transforms (over probabilities
    too)."""
    sv = np.random.default_rng(6).standard_normal((7, 3)).round(2)
    nodes = [
        _node("Binarizer", ["X"], ["bin"]),
        _node("Imputer", ["XI"], ["imp"], imputed_value_int64s=[7, 9], replaced_value_int64=2),
        _node("OneHotEncoder", ["XI"], ["ohe"], cats_int64s=[3, 1, 0, 3, 8], zeros=1),
        _node("LabelEncoder", ["XI"], ["le_ii"], keys_int64s=[0, 1, 2, 1], values_int64s=[10, 11, 12, 13]),
        _node("LabelEncoder", ["XI"], ["le_if"], keys_int64s=[3, 0], values_floats=[0.5, -2.0],
              default_float=9.0),
        _node("LabelEncoder", ["X"], ["le_fi"],
              keys_tensor=helper.make_tensor("k", TensorProto.FLOAT, [3], [0.5, float("nan"), -1.0]),
              values_tensor=helper.make_tensor("v", TensorProto.INT64, [3], [1, 2, 3]),
              default_tensor=helper.make_tensor("d", TensorProto.INT64, [1], [-7])),
        _node("FeatureVectorizer", ["X", "X"], ["fv"], inputdimensions=[2, 5]),
        _node("FeatureVectorizer", ["XI", "XI"], ["fvi"], inputdimensions=[3, 1]),
        _node("SVMClassifier", ["X"], ["ll_label", "ll_scores"], classlabels_ints=[4, 7],
              coefficients=[0.3, -0.2, 0.5, -0.1, 0.4, 0.2], rho=[0.1], kernel_type="LINEAR"),
        _node("SVMClassifier", ["X"], ["ll3_label", "ll3_scores"], classlabels_ints=[1, 2, 3],
              coefficients=[0.3, -0.2, 0.5, -0.1, 0.4, 0.2, 0.0, 0.7, -0.6], rho=[0.1],
              post_transform="SOFTMAX"),
        _node("SVMClassifier", ["X"], ["sv3_label", "sv3_scores"], classlabels_ints=[0, 1, 2],
              vectors_per_class=[2, 3, 2], support_vectors=sv.reshape(-1).tolist(),
              coefficients=np.random.default_rng(7).standard_normal(14).round(2).tolist(),
              rho=[0.1, -0.2, 0.05], kernel_type="RBF", kernel_params=[0.3, 0.0, 3.0],
              post_transform="SOFTMAX_ZERO"),
        _node("SVMClassifier", ["X"], ["sv2_label", "sv2_scores"], classlabels_ints=[5, 6],
              vectors_per_class=[3, 4], support_vectors=sv.reshape(-1).tolist(),
              coefficients=np.random.default_rng(8).standard_normal(7).round(2).tolist(),
              rho=[0.2], kernel_type="POLY", kernel_params=[0.5, 1.0, 2.5],
              post_transform="LOGISTIC"),
        _node("SVMClassifier", ["X"], ["sv3p_label", "sv3p_scores"], classlabels_ints=[0, 1, 2],
              vectors_per_class=[2, 3, 2], support_vectors=sv.reshape(-1).tolist(),
              coefficients=np.random.default_rng(11).standard_normal(14).round(2).tolist(),
              rho=[0.1, -0.2, 0.05], prob_a=[-1.5, -0.7, -2.0], prob_b=[0.1, -0.2, 0.3],
              kernel_type="LINEAR", post_transform="SOFTMAX"),
        _node("SVMClassifier", ["XD"], ["lld_label", "lld_scores"], classlabels_ints=[0, 1],
              coefficients=[0.3, 0.8], rho=[-0.1], kernel_type="LINEAR"),
        _node("SVMRegressor", ["X"], ["svr_lin"], coefficients=[0.3, -0.2, 0.5], rho=[0.1],
              n_supports=0),
        _node("SVMRegressor", ["X"], ["svr_one"], n_supports=7, support_vectors=sv.reshape(-1).tolist(),
              coefficients=np.random.default_rng(9).standard_normal(7).round(2).tolist(), rho=[-0.1],
              kernel_type="SIGMOID", kernel_params=[0.2, 0.1, 0.0], one_class=1),
    ]
    for n in nodes:
        if n.op_type.startswith("SVM") and not any(a.name == "kernel_params" for a in n.attribute):
            n.attribute.append(helper.make_attribute("kernel_params", [0.0, 0.0, 0.0]))
    f, i = TensorProto.FLOAT, TensorProto.INT64
    types = dict(imp=i, le_ii=i, le_fi=i, ll_label=i, ll3_label=i, sv3_label=i, sv2_label=i,
                 sv3p_label=i, lld_label=i)
    outs = [helper.make_tensor_value_info(o, types.get(o, f), None) for n in nodes for o in n.output]
    g = helper.make_graph(nodes, "edges", [
        helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 3]),
        helper.make_tensor_value_info("XI", TensorProto.INT64, [None, 2]),
        helper.make_tensor_value_info("XD", TensorProto.DOUBLE, [None, 1])],
        outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(_ML, 4)])
    m.ir_version = 8
    return m


def test_op_edge_cases_match_onnxruntime():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((40, 3)).astype(np.float32)
    x[:4, 0], x[4:8, 1], x[8:10, 2] = 0.5, -1.0, np.nan
    feeds = {"X": x[10:], "XI": rng.integers(0, 9, (30, 2)), "XD": rng.standard_normal((30, 1))}
    got = _check(_edge_model(), feeds)
    assert len(got) == 22
    # LabelEncoder 4 matches a NaN key; Binarizer refuses a NaN as onnxruntime does
    m = _edge_model()
    del m.graph.node[0]
    del m.graph.output[0]
    feeds["X"] = x[:30]
    _check(m, feeds)


def _string_model(node, out_type, out_shape):
    g = helper.make_graph([node], "s", [helper.make_tensor_value_info("S", TensorProto.STRING, [None])],
                          [helper.make_tensor_value_info(node.output[0], out_type, out_shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(_ML, 3)])
    m.ir_version = 8
    return m


def test_string_forms_run_as_string_steps():
    """String categories are not compiled code but string steps (jitort/string_ops.py), which
    strict mode accepts; more in tests/test_string_ops.py."""
    oh = _string_model(_node("OneHotEncoder", ["S"], ["oh"], cats_strings=["b", "a", "c"]),
                       TensorProto.FLOAT, [None, 3])
    feeds = {"S": np.array(["a", "c", "b", "zz"], dtype=object)}
    got = jitort.compile(oh, strict=True, tiered=False).run(None, feeds)
    np.testing.assert_array_equal(got[0], _ort(oh).run(None, feeds)[0])
    cm = _string_model(_node("CategoryMapper", ["S"], ["ids"], cats_strings=["a", "b"],
                             cats_int64s=[4, 5]), TensorProto.INT64, [None])
    got = jitort.compile(cm, strict=True, tiered=False).run(None, feeds)
    np.testing.assert_array_equal(got[0], _ort(cm).run(None, feeds)[0])


def test_bad_values_raise_like_onnxruntime():
    """Binarizer refuses a NaN, OneHotEncoder (zeros=0) an unknown category, as onnxruntime."""
    nodes = [_node("Binarizer", ["X"], ["b"], threshold=0.5),
             _node("OneHotEncoder", ["XI"], ["oh"], cats_int64s=[1, 2], zeros=0)]
    g = helper.make_graph(nodes, "bad", [
        helper.make_tensor_value_info("X", TensorProto.FLOAT, [None]),
        helper.make_tensor_value_info("XI", TensorProto.INT64, [None])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [None]),
         helper.make_tensor_value_info("oh", TensorProto.FLOAT, [None, 2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(_ML, 3)])
    m.ir_version = 8
    run = jitort.compile(m, strict=True, tiered=False)
    ok = {"X": np.array([0.2, 0.7], np.float32), "XI": np.array([2, 1])}
    np.testing.assert_array_equal(run.run(None, ok)[1], [[0, 1], [1, 0]])
    for bad, what in (({"X": np.array([np.nan], np.float32)}, "NaN"), ({"XI": np.array([3])}, "categor")):
        with pytest.raises(Exception) as want:
            _ort(m).run(None, {**ok, **bad})
        with pytest.raises(jitort.ExecutionError, match=what):
            run.run(None, {**ok, **bad})
        assert what.lower() in str(want.value).lower()  # onnxruntime names the same problem
