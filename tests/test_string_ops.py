"""String tensors in classical ML (jitort/string_ops.py): classifiers with string class labels
and string-column pipelines converted by skl2onnx, and the ops on string tensors one by one,
against onnxruntime, every node compiled or on a string step (``strict=True``)."""
import warnings

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import jitort
from jitort.errors import InvalidInput
from jitort.partition import DYNAMIC, INTERP

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder, StandardScaler  # noqa: E402
from sklearn.svm import SVC, LinearSVC  # noqa: E402

_RNG = np.random.default_rng(0)
_X = _RNG.standard_normal((300, 4)).astype(np.float32)
_NAMES = np.array(["setosa", "versicolor", "virginica"])
_Y3 = _NAMES[(_X[:, 0] > 0).astype(int) + (_X[:, 1] > 0.7)]
_Y2 = _NAMES[(_X[:, 0] + _X[:, 2] > 0).astype(int)]


def _run_both(model, feeds):
    cm = jitort.compile(model, strict=True, tiered=False)
    got = cm.run(None, feeds)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):  # ZipMap
            assert [list(d) for d in g] == [list(d) for d in w]
            np.testing.assert_allclose([list(d.values()) for d in g],
                                       [list(d.values()) for d in w], atol=1e-5)
            continue
        same_tensor(g, w)
    return cm, got


def same_tensor(g, w, tol=1e-5):
    """``g`` equal to onnxruntime's ``w``: shape, dtype, str elements, values (floats within
    ``tol``)."""
    assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
    if w.dtype == object:
        assert all(type(v) is str for v in g.reshape(-1))
        assert g.tolist() == w.tolist()
    elif w.dtype.kind in "iub":
        np.testing.assert_array_equal(g, w)
    else:
        np.testing.assert_allclose(g, w, atol=tol, rtol=tol)


def _convert(est, y, zipmap=False, x=_X, initial_types=None):
    from skl2onnx import to_onnx
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(x, y)
        opts = {id(est): {"zipmap": False}} if zipmap is False else None
        if initial_types is not None:
            return to_onnx(est, initial_types=initial_types, options=opts,
                           target_opset={"": 17, "ai.onnx.ml": 3})
        return to_onnx(est, x[:1], options=opts, target_opset={"": 17, "ai.onnx.ml": 3})


_CLASSIFIERS = {
    "random_forest3": lambda: _convert(RandomForestClassifier(15, max_depth=5, random_state=0), _Y3),
    "gbm_binary": lambda: _convert(GradientBoostingClassifier(n_estimators=10, random_state=0), _Y2),
    "gbm3": lambda: _convert(GradientBoostingClassifier(n_estimators=10, random_state=0), _Y3),
    "logreg3_zipmap": lambda: _convert(LogisticRegression(), _Y3, zipmap=True),
    "logreg_binary": lambda: _convert(LogisticRegression(), _Y2),
    "linear_svc3": lambda: _convert(LinearSVC(random_state=0), _Y3, None),
    "svc3_proba": lambda: _convert(SVC(probability=True, random_state=0), _Y3),
}


@pytest.mark.parametrize("name", sorted(_CLASSIFIERS))
def test_string_label_classifiers_match_onnxruntime(name):
    model = _CLASSIFIERS[name]()
    assert any(a.name == "classlabels_strings" for n in model.graph.node for a in n.attribute)
    x = _RNG.standard_normal((65, 4)).astype(np.float32)
    cm, got = _run_both(model, {"X": x})
    assert got[0].dtype == object and set(got[0].tolist()) <= set(_NAMES)
    # the classifier computes class indices; a LabelEncoder step names them
    enc = [n for n in cm.graph.nodes if n.op_type == "LabelEncoder"]
    assert len(enc) == 1 and cm.placement[id(enc[0])] == DYNAMIC
    assert enc[0].inputs[0].producer.attrs.get("classlabels_strings") is None
    assert not [n for n in cm.graph.nodes if cm.placement[id(n)] == INTERP]
    _run_both(model, {"X": x[:1]})


def _string_columns(rows, seed, unknown=False):
    rng = np.random.default_rng(seed)
    cols = [np.array(["red", "green", "blue"]), np.array(["s", "m", "l", "xl"])]
    x = np.stack([c[rng.integers(0, len(c), rows)] for c in cols], 1).astype(object)
    if unknown:
        x[::5, 0] = "purple"  # a category never seen in training
    return x


def test_onehot_pipeline_on_string_columns():
    from skl2onnx.common.data_types import StringTensorType
    x = _string_columns(80, 0)
    y = (x[:, 0] == "red").astype(np.int64) + (x[:, 1] == "xl")
    pipe = Pipeline([("oh", OneHotEncoder(handle_unknown="ignore")), ("lr", LogisticRegression())])
    model = _convert(pipe, y, x=x, initial_types=[("X", StringTensorType([None, 2]))])
    cm, _ = _run_both(model, {"X": _string_columns(33, 1, unknown=True)})
    steps = {n.op_type for n in cm.graph.nodes if cm.placement[id(n)] == DYNAMIC}
    assert steps == {"Gather", "OneHotEncoder"}


def test_ordinal_encoder_and_mixed_columns():
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    xs = _string_columns(90, 2)
    xf = _RNG.standard_normal((90, 2)).astype(np.float32)
    y = (xs[:, 1] == "l").astype(np.int64) + (xf[:, 0] > 0)
    pre = ColumnTransformer([("ord", OrdinalEncoder(), [0, 1])])
    model = _convert(Pipeline([("pre", pre), ("lr", LogisticRegression())]), y, x=xs,
                     initial_types=[("X", StringTensorType([None, 2]))])
    _run_both(model, {"X": _string_columns(17, 3)})
    # a string and a float input side by side
    import pandas as pd
    df = pd.DataFrame({"c": xs[:, 0], "f": xf[:, 0]})
    pre = ColumnTransformer([("oh", OneHotEncoder(), ["c"]), ("sc", StandardScaler(), ["f"])])
    model = _convert(Pipeline([("pre", pre), ("rf", RandomForestClassifier(5, random_state=0))]),
                     _NAMES[y], x=df, initial_types=[("c", StringTensorType([None, 1])),
                                                      ("f", FloatTensorType([None, 1]))])
    _run_both(model, {"c": xs[:9, :1], "f": xf[:9, :1]})


# --- op level ------------------------------------------------------------------------------------

def _model(op, inputs, outputs, domain="", ml=3, consts=(), **attrs):
    node = helper.make_node(op, [i[0] for i in inputs] + [c.name for c in consts],
                            [o[0] for o in outputs], domain=domain, **attrs)
    g = helper.make_graph([node], "s", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(*o) for o in outputs],
                          initializer=list(consts))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ai.onnx.ml", ml)])
    m.ir_version = 9
    return m


_S, _I, _F = TensorProto.STRING, TensorProto.INT64, TensorProto.FLOAT
_WORDS = np.array([["a", "b", "zz"], ["b", "", "a"]], object)


@pytest.mark.parametrize("case", [
    # opset 1: class names <-> their positions
    ("s2i_v1", 1, _S, _I, dict(classes_strings=["b", "a", "b"], default_int64=-7)),
    ("i2s_v1", 1, _I, _S, dict(classes_strings=["x", "y"], default_string="?")),
    # opset 2: keys -> values, the first of repeated keys
    ("s2i", 2, _S, _I, dict(keys_strings=["a", "b", "a"], values_int64s=[1, 2, 3])),
    ("s2f", 2, _S, _F, dict(keys_strings=["a", "zz"], values_floats=[0.5, -2.0], default_float=9.0)),
    ("s2s", 2, _S, _S, dict(keys_strings=["a", "b"], values_strings=["A", "B"])),
    ("i2s", 2, _I, _S, dict(keys_int64s=[3, -1], values_strings=["three", "minus"])),
    # a NaN key matches nothing before LabelEncoder-4 (onnxruntime), numeric values included
    ("f2s", 2, _F, _S, dict(keys_floats=[0.5, float("nan")], values_strings=["half", "nan"])),
    ("f2i", 2, _F, _I, dict(keys_floats=[0.5, float("nan")], values_int64s=[1, 2])),
])
def test_label_encoder_string_forms(case):
    name, ml, xt, yt, attrs = case
    feeds = {"s": _WORDS, "i": np.array([[3, -1, 0], [5, 1, 3]], np.int64),
             "f": np.array([0.5, np.nan, 1.0], np.float32)}
    key = {_S: "s", _I: "i", _F: "f"}[xt]
    if name.endswith("_v1") and xt == _I:
        feeds["i"] = np.array([[0, 1, 2], [-1, 1, 0]], np.int64)
    model = _model("LabelEncoder", [(key, xt, None)], [("y", yt, None)], "ai.onnx.ml", ml=ml, **attrs)
    _run_both(model, {key: feeds[key]})


def test_nan_in_an_object_array_reads_nan():
    """scikit-learn's OrdinalEncoder(encoded_missing_value=...) maps "nan": a float NaN in the
    object array fed reads as that text (onnxruntime's conversion)."""
    model = _model("LabelEncoder", [("s", _S, None)], [("y", _F, None)], "ai.onnx.ml", ml=2,
                   keys_strings=["a", "nan"], values_floats=[1.0, 42.0])
    _run_both(model, {"s": np.array([["a"], [np.nan], ["b"]], object)})


def test_category_mapper_both_ways():
    attrs = dict(cats_strings=["a", "b", "zz"], cats_int64s=[10, 20, 30])
    _run_both(_model("CategoryMapper", [("s", _S, None)], [("y", _I, None)], "ai.onnx.ml",
                     default_int64=-5, **attrs), {"s": _WORDS})
    _run_both(_model("CategoryMapper", [("i", _I, None)], [("y", _S, None)], "ai.onnx.ml",
                     default_string="none", **attrs),
              {"i": np.array([[10, 0], [30, 20]], np.int64)})


def test_one_hot_encoder_strings_and_unknowns():
    model = _model("OneHotEncoder", [("s", _S, None)], [("y", _F, None)], "ai.onnx.ml",
                   cats_strings=["a", "b", "zz", "a"])
    _run_both(model, {"s": _WORDS})
    strict = _model("OneHotEncoder", [("s", _S, None)], [("y", _F, None)], "ai.onnx.ml",
                    cats_strings=["a", "b"], zeros=0)
    cm = jitort.compile(strict, strict=True, tiered=False)
    np.testing.assert_array_equal(cm.run(None, {"s": np.array(["b", "a"], object)})[0],
                                  [[0, 1], [1, 0]])
    with pytest.raises(InvalidInput, match="'zz' is not among cats_strings"):
        cm.run(None, {"s": _WORDS})


def _i64(name, values):
    return helper.make_tensor(name, _I, [len(values)], values)


@pytest.mark.parametrize("op,consts,attrs,domain", [
    ("Gather", [_i64("idx", [2, -3])], dict(axis=1), ""),
    ("ArrayFeatureExtractor", [_i64("idx", [0, 2])], {}, "ai.onnx.ml"),
    ("Reshape", [_i64("shape", [0, 3, 1])], {}, ""),
    ("Reshape", [_i64("shape", [-1])], {}, ""),
    ("Flatten", [], dict(axis=0), ""),
    ("Unsqueeze", [_i64("axes", [0, -1])], {}, ""),
    ("Transpose", [], dict(perm=[1, 0]), ""),
    ("Identity", [], {}, ""),
])
def test_data_movement_on_strings(op, consts, attrs, domain):
    model = _model(op, [("s", _S, None)], [("y", _S, None)], domain, consts=consts, **attrs)
    _run_both(model, {"s": _WORDS})


def test_gather_rows_of_strings_against_onnx_reference():
    """onnxruntime 1.32 returns ['b', '', ''] for row 1 of [['a', 'b', 'zz'], ['b', 'c', 'a']]
    (its string Gather along axis 0 loses elements); onnx.reference is the reference here."""
    from onnx.reference import ReferenceEvaluator
    model = _model("Gather", [("s", _S, None)], [("y", _S, None)], consts=[_i64("idx", [1, 0])])
    got = jitort.compile(model, strict=True, tiered=False).run(None, {"s": _WORDS})[0]
    want = ReferenceEvaluator(model).run(None, {"s": _WORDS})[0]
    assert got.dtype == object and got.tolist() == want.tolist() == _WORDS[[1, 0]].tolist()


def test_concat_squeeze_and_array_feature_extractor_of_a_vector():
    cat = helper.make_node("Concat", ["a", "b"], ["c"], axis=0)
    sq = helper.make_node("Squeeze", ["c", "ax"], ["y"])
    g = helper.make_graph([cat, sq], "s", [helper.make_tensor_value_info("a", _S, [1, 3]),
                                           helper.make_tensor_value_info("b", _S, [1, 3])],
                          [helper.make_tensor_value_info("y", _S, None)],
                          initializer=[_i64("ax", [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    with pytest.raises(Exception):  # onnxruntime refuses a non-1 axis too
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"a": _WORDS[:1], "b": _WORDS[1:]})
    with pytest.raises(InvalidInput, match="Squeeze node"):
        jitort.compile(m, strict=True, tiered=False).run(None, {"a": _WORDS[:1], "b": _WORDS[1:]})
    m.graph.node[0].attribute[0].i = 1  # (1, 6), then squeezed to (6,)
    m.graph.node[1].input[1] = "ax0"
    m.graph.initializer.append(_i64("ax0", [0]))
    _run_both(m, {"a": _WORDS[:1], "b": _WORDS[1:]})
    afe = _model("ArrayFeatureExtractor", [("s", _S, None)], [("y", _S, None)], "ai.onnx.ml",
                 consts=[_i64("idx", [2, 0])])
    _run_both(afe, {"s": np.array(["p", "q", "r"], object)})


def test_gather_out_of_range_is_a_clear_error():
    model = _model("Gather", [("s", _S, None)], [("y", _S, None)], consts=[_i64("idx", [5])])
    with pytest.raises(InvalidInput, match="Gather node .* out of range"):
        jitort.compile(model, strict=True, tiered=False).run(None, {"s": _WORDS})


def _model20(nodes, inputs, outputs, consts=()):
    g = helper.make_graph(nodes, "s", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(*o) for o in outputs],
                          initializer=list(consts))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20),
                                            helper.make_opsetid("ai.onnx.ml", 3)])
    m.ir_version = 9
    return m


_PHRASES = np.array([["to be or", " not  to be "], ["", "ünïcode wörds_1"]], object)


@pytest.mark.parametrize("b", [_PHRASES, np.array(["to be or", ""], object),
                               np.array("", object)])
def test_equal_and_concat_of_strings_broadcast(b):
    nodes = [helper.make_node("Equal", ["a", "b"], ["eq"]),
             helper.make_node("StringConcat", ["a", "b"], ["cat"])]
    m = _model20(nodes, [("a", _S, None), ("b", _S, None)],
                 [("eq", TensorProto.BOOL, None), ("cat", _S, None)])
    _run_both(m, {"a": _PHRASES, "b": b})


@pytest.mark.parametrize("attrs", [{}, dict(delimiter=" "), dict(delimiter="o", maxsplit=1),
                                   dict(maxsplit=1), dict(delimiter="be")])
def test_string_split(attrs):
    """Python's str.split, as onnx.reference and the conformance cases. onnxruntime 1.32
    differs on two edges, checked against onnx.reference here: an empty string split on a
    delimiter gives it no piece (Python: one empty piece), and whitespace splitting with
    maxsplit strips the remainder's trailing whitespace."""
    from onnx.reference import ReferenceEvaluator
    m = _model20([helper.make_node("StringSplit", ["x"], ["y", "z"], **attrs)],
                 [("x", _S, None)], [("y", _S, None), ("z", _I, None)])
    plain = np.array([["to be or", "not  to be"], ["x", "ünïcode wörds_1 o"]], object)
    _run_both(m, {"x": plain})
    _run_both(m, {"x": np.zeros((0, 2), object)})
    got = jitort.compile(m, strict=True, tiered=False).run(None, {"x": _PHRASES})
    want = ReferenceEvaluator(m).run(None, {"x": _PHRASES})
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


@pytest.mark.parametrize("pattern", [r"\w+ \w+", r"[a-z ]+", r".*o.*", r"\S+\s+\S+", ""])
def test_regex_full_match(pattern):
    m = _model20([helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern)],
                 [("x", _S, None)], [("y", TensorProto.BOOL, None)])
    _run_both(m, {"x": _PHRASES})


def test_array_feature_extractor_with_indices_computed_at_run_time():
    """Numeric ArrayFeatureExtractor whose indices are an input: a numpy step, not the
    interpreter (the compiled lowering takes constant indices)."""
    m = _model20([helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"],
                                   domain="ai.onnx.ml")],
                 [("x", _F, None), ("i", _I, None)], [("y", _F, None)])
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    cm, _ = _run_both(m, {"x": x, "i": np.array([3, 0, 3], np.int64)})
    (node,) = cm.graph.nodes
    assert cm.placement[id(node)] == DYNAMIC


def _dict_model(key_type, value_type, vocab_attr, vocab):
    node = helper.make_node("DictVectorizer", ["m"], ["y"], domain="ai.onnx.ml",
                            **{vocab_attr: vocab})
    mt = helper.make_map_type_proto(key_type, helper.make_tensor_type_proto(value_type, [1]))
    g = helper.make_graph([node], "d", [helper.make_value_info("m", mt)],
                          [helper.make_tensor_value_info("y", value_type, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ai.onnx.ml", 3)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize("case", [
    (_S, _F, "string_vocabulary", ["b", "a", "zz"], {"a": 1.5, "zz": -2.0, "unknown": 7.0}),
    (_I, _F, "int64_vocabulary", [4, 1, 9], {9: 0.25, 1: -1.0, 3: 5.0}),
])
def test_dict_vectorizer_map_input(case):
    """A map graph input, fed as a dict: one row over the vocabulary, unknown keys dropped
    (onnxruntime's Python binding makes float-valued maps only: the cases compared)."""
    kt, vt, attr, vocab, feed = case
    model = _dict_model(kt, vt, attr, vocab)
    cm, _ = _run_both(model, {"m": feed})
    (node,) = cm.graph.nodes
    assert cm.placement[id(node)] == DYNAMIC
    with pytest.raises(InvalidInput, match="DictVectorizer node .* is a map"):
        cm.run(None, {"m": np.zeros(3, np.float32)})


def test_dict_vectorizer_refuses_a_map_type_outside_its_schema():
    """map(string, bool) is not a DictVectorizer input: onnxruntime refuses the model
    (InvalidGraph), so does jitort."""
    model = _dict_model(_S, TensorProto.BOOL, "string_vocabulary", ["a"])
    with pytest.raises(Exception, match="INVALID_GRAPH|invalid"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(jitort.InvalidModel, match=r"map\(string, tensor\(bool\)\)"):
        jitort.compile(model, tiered=False)
    from jitort.session import InvalidGraph
    with pytest.raises(InvalidGraph):
        jitort.InferenceSession(model.SerializeToString())


def test_dict_vectorizer_pipeline_and_session_types():
    from sklearn.feature_extraction import DictVectorizer
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import DictionaryType, FloatTensorType, StringTensorType
    data = [{"a": 1.0, "b": 2.0}, {"b": 3.0, "c": -1.0}, {"a": 0.5}, {"c": 2.0}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = Pipeline([("dv", DictVectorizer(sparse=False)),
                         ("lr", LogisticRegression())]).fit(data, [0, 1, 0, 1])
        model = convert_sklearn(pipe, "dv", [("input", DictionaryType(
            StringTensorType([1]), FloatTensorType([1])))], options={"zipmap": False})
    for feed in ({"a": 1.0, "c": 2.0}, {"b": -1.0, "new": 3.0}):
        _run_both(model, {"input": feed})
    # an empty dict (onnxruntime refuses it: "Size of dictionary is empty") is a zero row
    cm = jitort.compile(model, strict=True, tiered=False)
    for g, w in zip(cm.run(None, {"input": {}}), cm.run(None, {"input": {"new": 1.0}})):
        np.testing.assert_array_equal(g, w)
    sess = jitort.InferenceSession(model.SerializeToString())
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [i.type for i in sess.get_inputs()] == [i.type for i in want.get_inputs()]
