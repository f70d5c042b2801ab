"""scikit-learn preprocessing converted by skl2onnx (Binarizer, SimpleImputer, a
ColumnTransformer of OneHotEncoder and StandardScaler before a random forest) and the binary
TreeEnsembleClassifier rules, compiled (``strict=True``) against onnxruntime at one thread:
each test one merged graph, one compiled program, the tree kernels shared.

The binary rules are onnxruntime 1.32's: a class no leaf scored is written as 0 whatever its
base value, one-column scores widen to ``[1 - s, s]`` / ``[-s, s]`` or the logistic of both,
and scores add up in float32, so that a 5-of-10-trees tie stays at 0.5 (labels exact)."""
import itertools

import numpy as np
import onnx
import pytest

import jitort

from .test_ml_ops import _X, _Y2, _Y3, _check, _convert, _feeds, _ort, _tree_model, _two_trees
from .test_ml_svm import _merge

from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.ensemble import RandomForestClassifier  # noqa: E402
from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from sklearn.preprocessing import Binarizer, OneHotEncoder, StandardScaler  # noqa: E402
from lightgbm import LGBMClassifier  # noqa: E402
from onnxmltools import convert_lightgbm, convert_xgboost  # noqa: E402
from onnxmltools.convert.common.data_types import FloatTensorType  # noqa: E402
from xgboost import XGBClassifier  # noqa: E402


def _input_renamed(m: onnx.ModelProto, old: str, new: str) -> onnx.ModelProto:
    for v in m.graph.input:
        v.name = new if v.name == old else v.name
    for n in m.graph.node:
        n.input[:] = [new if s == old else s for s in n.input]
    return m


def test_sklearn_preprocessing_match_onnxruntime():
    xi = np.random.default_rng(3).integers(0, 4, (300, 6)).astype(np.float32)
    xi[:, 2:] = _X[:, 2:]
    pipe = Pipeline([
        ("cols", ColumnTransformer([("oh", OneHotEncoder(handle_unknown="ignore"), [0, 1]),
                                    ("s", StandardScaler(), [2, 3, 4, 5])])),
        ("rf", RandomForestClassifier(10, max_depth=5, random_state=0))])
    xn = _X.copy()
    xn[::7, 3] = np.nan
    model = _merge({
        "bin": _input_renamed(_convert(Binarizer(threshold=0.3), None, None), "X", "XB"),
        "imp": _convert(SimpleImputer(strategy="mean"), None, None, x=xn),
        "pipe": _convert(pipe, _Y3, x=xi),
    })
    ops = {n.op_type for n in model.graph.node}
    assert ops >= {"Binarizer", "Imputer", "OneHotEncoder", "TreeEnsembleClassifier"}, ops
    rng = np.random.default_rng(4)
    x = rng.integers(-1, 5, (131, 6)).astype(np.float32)  # -1 and 4: unknown categories
    x[:, 2:] = rng.standard_normal((131, 4))
    x[::5, 3] = np.nan  # imputed; the forest's NaN takes the false branch
    got = _check(model, {"X": x, "XB": rng.standard_normal((131, 6)).astype(np.float32)})
    assert len(got) == 4


def _binary_trees():
    """Two-class TreeEnsembleClassifiers over every binary rule: leaf weights for class 0
    only or class 1 only, all positive or mixed, no / one / two base values, post NONE or
    LOGISTIC (the other transforms take NONE's branches); plus a converted binary random
    forest (vote-count ties)."""
    models = {}
    grid = itertools.product([0, 1], [None, [0.1], [0.2, 0.3]], ["NONE", "LOGISTIC"],
                             [[0.6, 0.4, 0.3, 0.3], [0.6, -0.4, 0.3, -0.3]])
    for k, (cls, base, post, w) in enumerate(grid):
        a = dict(_two_trees("BRANCH_LEQ", "BRANCH_GT"), class_treeids=[0, 0, 1, 1],
                 class_nodeids=[1, 2, 1, 2], class_ids=[cls] * 4, class_weights=w,
                 classlabels_int64s=[3, 5], post_transform=post)
        if base is not None:
            a["base_values"] = base
        models[f"t{k}"] = _input_renamed(_tree_model("TreeEnsembleClassifier", a, 2), "X", "XT")
    models["rf2"] = _convert(RandomForestClassifier(10, max_depth=5, random_state=0), _Y2)
    x6 = [("X", FloatTensorType([None, 6]))]
    models["xgb3"] = convert_xgboost(XGBClassifier(n_estimators=10, max_depth=3).fit(_X, _Y3),
                                     initial_types=x6, target_opset=15)
    models["lgb2"] = convert_lightgbm(  # with its ZipMap
        LGBMClassifier(n_estimators=10, num_leaves=8, verbose=-1).fit(_X, _Y2),
        initial_types=x6, target_opset=15)
    return _merge(models)


def test_binary_tree_classifiers_match_onnxruntime():
    """With an XGBoost and a LightGBM classifier converted by onnxmltools."""
    model = _binary_trees()
    assert sum(n.op_type == "TreeEnsembleClassifier" for n in model.graph.node) == 27
    x = np.random.default_rng(1).standard_normal((257, 6)).astype(np.float32)
    x[::17, 2] = np.nan
    got = _check(model, {"X": x, "XT": _feeds()["X"]})
    assert len(got) == 54 and isinstance(got[-1], list)


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_normalizer_rows_as_onnxruntime(norm, dtype):
    """onnxruntime's Normalizer: MAX divides by the row's maximum (a negative one included),
    L2 is sign(x) * sqrt(x * x / sum), a row of norm 0 stays as it is; compiled and in the
    interpreter tier, bit for bit."""
    from onnx import TensorProto, helper
    x = np.array([[1, 2, 3], [4, -5, 6], [0, 0, 0], [-3, -1, -2], [-1, 0, 0], [7, 1, 2]], dtype)
    if dtype == np.float32:
        x = x * np.float32(0.37)
    node = helper.make_node("Normalizer", ["x"], ["y"], domain="ai.onnx.ml", norm=norm)
    g = helper.make_graph([node], "n", [helper.make_tensor_value_info(
        "x", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), [None, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ai.onnx.ml", 3)])
    m.ir_version = 9
    want = _ort(m).run(None, {"x": x})[0]
    compiled = jitort.compile(m, strict=True, tiered=False).run(None, {"x": x})[0]
    interpreted = jitort.compile(m, backends=(), tiered=False).run(None, {"x": x})[0]
    assert want.dtype == compiled.dtype == interpreted.dtype == np.float32
    np.testing.assert_array_equal(compiled, want)
    np.testing.assert_array_equal(interpreted, want)
