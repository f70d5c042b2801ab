"""ai.onnx.ml ops compiled (the ``ml`` family): scikit-learn models converted by skl2onnx and
op-level tree ensembles against onnxruntime at one thread (its own labels move with its thread
count where two classes tie exactly), every node compiled (``strict=True``)."""
import contextlib
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import jitort
from jitort import tuning

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.ensemble import (ExtraTreesClassifier, GradientBoostingClassifier,  # noqa: E402
                              GradientBoostingRegressor, HistGradientBoostingClassifier,
                              HistGradientBoostingRegressor, RandomForestClassifier,
                              RandomForestRegressor)
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

_RNG = np.random.default_rng(0)
_X = _RNG.standard_normal((300, 6)).astype(np.float32)
_Y2 = (_X[:, 0] + _X[:, 1] > 0).astype(np.int64)
_Y3 = _Y2 + (_X[:, 2] > 0.8)
_YR = _X[:, 0] * 2 + _X[:, 3]


def _ort(model: onnx.ModelProto):
    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), o)


def _check(model: onnx.ModelProto, feeds: dict):
    got = jitort.compile(model, strict=True, tiered=False).run(None, feeds)
    want = _ort(model).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):  # ZipMap: list of {label: probability}
            assert isinstance(g, list) and len(g) == len(w)
            for a, b in zip(g, w):
                assert a.keys() == b.keys()
                np.testing.assert_allclose(list(a.values()), list(b.values()), atol=1e-5)
        elif w.dtype.kind in "iu":
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)  # labels exactly
        else:
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5)
    return got


@contextlib.contextmanager
def _bool_lists_as_ints():
    """skl2onnx 1.20's HistGradientBoosting converter writes Python bools into the int list
    nodes_missing_value_tracks_true, which protobuf >= 7.34 refuses ("Expected an int, got a
    boolean"; onnx/ir-py#175): while converting, such lists go to onnx as the ints they
    mean. The model is the one older protobuf releases wrote."""
    orig = helper.make_attribute

    def make_attribute(key, value, *args, **kwargs):
        if isinstance(value, (list, tuple)) and any(isinstance(v, (bool, np.bool_)) for v in value):
            value = [int(v) for v in value]
        return orig(key, value, *args, **kwargs)

    helper.make_attribute = make_attribute
    try:
        yield
    finally:
        helper.make_attribute = orig


def _convert(est, y, zipmap=False, x=_X):
    from skl2onnx import to_onnx
    with warnings.catch_warnings(), _bool_lists_as_ints():
        warnings.simplefilter("ignore")
        est.fit(x, y)
        opts = {id(est): {"zipmap": False}} if zipmap is False else None
        return to_onnx(est, x[:1], options=opts, target_opset={"": 17, "ai.onnx.ml": 3})


_MODELS = {
    "random_forest3": lambda: _convert(RandomForestClassifier(20, max_depth=6, random_state=0), _Y3),
    "extra_trees2": lambda: _convert(ExtraTreesClassifier(15, random_state=0), _Y2),
    "gbm_classifier2": lambda: _convert(GradientBoostingClassifier(n_estimators=15, random_state=0), _Y2),
    "gbm_classifier3": lambda: _convert(GradientBoostingClassifier(n_estimators=10, random_state=0), _Y3),
    "gbm_regressor": lambda: _convert(GradientBoostingRegressor(n_estimators=15, random_state=0), _YR, None),
    "rf_regressor": lambda: _convert(RandomForestRegressor(10, max_depth=5, random_state=0), _YR, None),
    "histgb_classifier3": lambda: _convert(HistGradientBoostingClassifier(max_iter=15, random_state=0), _Y3),
    "histgb_classifier2": lambda: _convert(HistGradientBoostingClassifier(max_iter=15, random_state=0), _Y2),
    "histgb_regressor": lambda: _convert(HistGradientBoostingRegressor(max_iter=15, random_state=0), _YR, None),
    "logreg_zipmap": lambda: _convert(LogisticRegression(), _Y3, zipmap=True),
    "logreg_binary_zipmap": lambda: _convert(LogisticRegression(), _Y2, zipmap=True),
    "logreg": lambda: _convert(LogisticRegression(), _Y3),
    "scaler_forest": lambda: _convert(Pipeline([
        ("cols", ColumnTransformer([("s", StandardScaler(), [0, 1, 2])], remainder="passthrough")),
        ("rf", RandomForestClassifier(10, max_depth=5, random_state=0))]), _Y3),
}


@pytest.mark.parametrize("name", sorted(_MODELS))
def test_sklearn_models_match_onnxruntime(name):
    x = np.random.default_rng(1).standard_normal((257, 6)).astype(np.float32)
    x[::17, 2] = np.nan  # NaN features follow the false branch (or the tracked one)
    got = _check(_MODELS[name](), {"X": x})
    _check(_MODELS[name](), {"X": x[:1]})  # one row: the trees-major walk
    assert got


def test_zipmap_outputs_dicts_like_onnxruntime():
    model = _MODELS["logreg_zipmap"]()
    assert any(n.op_type == "ZipMap" for n in model.graph.node)
    out = jitort.compile(model, strict=True, tiered=False).run(None, {"X": _X[:3]})
    assert isinstance(out[1], list) and set(out[1][0]) == {0, 1, 2}
    assert abs(sum(out[1][0].values()) - 1) < 1e-5


def _tree_model(op, attrs, nout, version=3, xdtype=TensorProto.FLOAT):
    outs = ([helper.make_tensor_value_info("label", TensorProto.INT64, None),
             helper.make_tensor_value_info("scores", xdtype, None)] if nout == 2
            else [helper.make_tensor_value_info("y", xdtype, None)])
    node = helper.make_node(op, ["X"], [o.name for o in outs], domain="ai.onnx.ml", **attrs)
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info("X", xdtype, [None, 3])], outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ai.onnx.ml", version)])
    m.ir_version = 9
    return m


# two trees over 3 features: a stump per tree with every comparison mode
def _two_trees(mode0, mode1, miss=(0, 0, 0, 0, 0, 0)):
    return dict(nodes_treeids=[0, 0, 0, 1, 1, 1], nodes_nodeids=[0, 1, 2, 0, 1, 2],
                nodes_featureids=[0, 0, 0, 2, 0, 0], nodes_values=[0.1, 0, 0, -0.2, 0, 0],
                nodes_modes=[mode0, "LEAF", "LEAF", mode1, "LEAF", "LEAF"],
                nodes_truenodeids=[1, 0, 0, 1, 0, 0], nodes_falsenodeids=[2, 0, 0, 2, 0, 0],
                nodes_missing_value_tracks_true=list(miss))


_MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


def _feeds():
    x = np.random.default_rng(2).standard_normal((40, 3)).astype(np.float32)
    x[:5, 0], x[5:10, 2], x[10:13, 0] = 0.1, -0.2, np.nan
    return {"X": x}


@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
def test_tree_regressor_aggregates_and_transforms(agg, post):
    a = _two_trees(_MODES[0], _MODES[3], miss=(1, 0, 0, 0, 0, 0))
    a.update(target_treeids=[0, 0, 0, 1, 1, 1], target_nodeids=[1, 2, 2, 1, 2, 2],
             target_ids=[0, 0, 1, 1, 0, 1], target_weights=[0.5, -0.25, 0.3, 0.2, 0.1, -0.4],
             n_targets=2, aggregate_function=agg, post_transform=post, base_values=[0.05, -0.1])
    if post == "PROBIT":  # onnxruntime's probit of an out-of-(0, 1) value is NaN either way
        a["target_weights"] = [0.2, 0.1, 0.15, 0.1, 0.05, 0.2]
        a["base_values"] = [0.1, 0.1]
    _check(_tree_model("TreeEnsembleRegressor", a, 1), _feeds())


@pytest.mark.parametrize("m0,m1", [(a, b) for a, b in zip(_MODES, _MODES[::-1])])
def test_tree_classifier_modes_multiclass(m0, m1):
    base = _two_trees(m0, m1, miss=(0, 0, 0, 1, 0, 0))
    multi = dict(base, class_treeids=[0, 0, 1, 1], class_nodeids=[1, 2, 1, 2], class_ids=[0, 2, 1, 2],
                 class_weights=[0.6, 0.4, 0.3, 0.3], classlabels_int64s=[3, 5, 7])
    _check(_tree_model("TreeEnsembleClassifier", multi, 2), _feeds())


def test_tree_ensemble_v5_member_and_leaves():
    # tree 0: x0 in {0.1, 0.5} -> leaf 0 else (x2 <= -0.2 -> leaf 1 else leaf 2); tree 1: leaf 3
    a = dict(nodes_featureids=[0, 2, 1], nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [3], [6, 0, 3]),
             nodes_splits=helper.make_tensor("s", TensorProto.FLOAT, [3], [0.0, -0.2, 0.3]),
             nodes_truenodeids=[0, 1, 3], nodes_trueleafs=[1, 1, 1],
             nodes_falsenodeids=[1, 2, 4], nodes_falseleafs=[0, 1, 1],
             membership_values=helper.make_tensor("v", TensorProto.FLOAT, [2], [0.1, 0.5]),
             tree_roots=[0, 2], leaf_targetids=[0, 1, 0, 1, 0],
             leaf_weights=helper.make_tensor("w", TensorProto.FLOAT, [5], [1.0, 2.0, 3.0, 4.0, 5.0]),
             n_targets=2, aggregate_function=1, post_transform=0)
    _check(_tree_model("TreeEnsemble", a, 1, version=5), _feeds())


# --------------------------------------------------------------------------------------------
# float32 linear models: the row-blocked and the tile kernels (jitort.kernels.cpu.ml:
# linear_rows_f32, linear_tiles_f32)
# --------------------------------------------------------------------------------------------
_POSTS = ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"]


def _linear_model(op, attrs, ncols, pre=None, post=None):
    """One LinearClassifier / LinearRegressor over 4 float32 features, a Scaler (``pre``)
    before and a Normalizer (``post``) after if given."""
    nodes, x = [], "X"
    if pre:
        nodes.append(helper.make_node("Scaler", ["X"], ["Xs"], domain="ai.onnx.ml", **pre))
        x = "Xs"
    scores = "scores" if post is None else "raw"
    outs = ["label", scores] if op == "LinearClassifier" else [scores]
    nodes.append(helper.make_node(op, [x], outs, domain="ai.onnx.ml", **attrs))
    if post:
        nodes.append(helper.make_node("Normalizer", ["raw"], ["scores"], domain="ai.onnx.ml", norm=post))
    vi = [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, ncols])]
    if op == "LinearClassifier":
        vi.insert(0, helper.make_tensor_value_info("label", TensorProto.INT64, [None]))
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 4])], vi)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])
    m.ir_version = 9
    return m


_LIN_RNG = np.random.default_rng(5)
_COEF = (_LIN_RNG.standard_normal(24) * 0.3).tolist()  # up to 6 classes x 4 features
_X4 = {r: {"X": _LIN_RNG.standard_normal((r, 4)).astype(np.float32)} for r in (1, 10_000)}
# classlabels, coefficient rows: multiclass, one column for two labels (onnxruntime's
# [1 - s, s]; onnxruntime refuses one column with other label counts)
_SHAPES = {"multiclass": ([4, 8, 15], 3), "binary": ([3, 9], 1),
           "six_classes": ([0, 1, 2, 3, 4, 5], 6)}  # past the kernel's 4-class groups


def _probit_safe(post, intercepts):
    """Coefficients and intercepts; for PROBIT, scores in (0.6, 0.9): onnxruntime's float32
    ErfInv cancels near 0.5, where a one-ulp change of a score (another summation order)
    moves the result by more than 1e-5."""
    if post != "PROBIT":
        return _COEF, intercepts
    return [0.02 * c for c in _COEF], [0.75, 0.7, 0.8, 0.65, 0.85, 0.7]


def _kernel_names(model, feeds):
    """The kernels the compiled ``model`` calls (after one call on ``feeds``)."""
    from tests.helpers import called_names
    cm = jitort.compile(model, strict=True, tiered=False)
    cm.run(None, feeds)
    return called_names(cm)


#: calibration's ``linear.scores`` candidates, each forced in turn: a row or a tile at a time
_SCORES = ["rows", "tiles"]


@pytest.mark.parametrize("scores", _SCORES)
@pytest.mark.parametrize("post,shape", [(p, s) for p in _POSTS for s in _SHAPES
                                        if (p, s) != ("PROBIT", "binary")])  # half written
def test_linear_classifier_posts_match_onnxruntime(post, shape, scores):
    labels, nt = _SHAPES[shape]
    coef, b = _probit_safe(post, [0.3, -0.1, 0.0, 0.2, -0.2, 0.1])
    a = dict(coefficients=coef[:4 * nt], intercepts=b[:nt], classlabels_ints=labels,
             post_transform=post)
    m = _linear_model("LinearClassifier", a, 2 if shape == "binary" else nt)
    with tuning.force("linear.scores", scores):
        for rows in (1, 10_000):
            _check(m, _X4[rows])
        assert _kernel_names(m, _X4[1]) == [f"ml.linear_{scores}_f32"]


@pytest.mark.parametrize("scores", _SCORES)
@pytest.mark.parametrize("targets", [1, 3])
@pytest.mark.parametrize("post", _POSTS)
def test_linear_regressor_posts_match_onnxruntime(post, targets, scores):
    coef, b = _probit_safe(post, [0.2, 0.3, 0.1])
    a = dict(coefficients=coef[:4 * targets], intercepts=b[:targets], targets=targets,
             post_transform=post)
    m = _linear_model("LinearRegressor", a, targets)
    with tuning.force("linear.scores", scores):
        for rows in (1, 10_000):
            _check(m, _X4[rows])
        assert _kernel_names(m, _X4[1]) == [f"ml.linear_{scores}_f32"]


@pytest.mark.parametrize("scores", _SCORES)
@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_scaler_linear_normalizer_fold_into_one_kernel(norm, scores):
    # onnxruntime's Scaler takes one offset / scale for all features or one per feature
    for off, scale in (([0.5], [2.0]), ([0.1, -0.2, 0.3, 0.0], [1.5, 0.5, 2.0, 1.0])):
        m = _linear_model("LinearClassifier", dict(coefficients=_COEF[:12], intercepts=[0.1, 0.2, 0.3],
                                                   classlabels_ints=[0, 1, 2], post_transform="SOFTMAX"),
                          3, pre=dict(offset=off, scale=scale), post=norm)
        with tuning.force("linear.scores", scores):
            for rows in (1, 10_000):
                _check(m, _X4[rows])
            assert _kernel_names(m, _X4[1]) == [f"ml.linear_{scores}_f32"]


@pytest.mark.parametrize("scores", _SCORES)
@pytest.mark.parametrize("y", ["binary", "multiclass"])
def test_sklearn_scaled_logreg_is_one_kernel(y, scores):
    # StandardScaler + LogisticRegression (ZipMap on: its input is the folded Normalizer's)
    x = np.random.default_rng(3).standard_normal((10_000, 6)).astype(np.float32) * 3 + 1
    for zipmap in (False, True):
        m = _convert(Pipeline([("s", StandardScaler()), ("lr", LogisticRegression())]),
                     _Y2 if y == "binary" else _Y3, zipmap=zipmap)
        with tuning.force("linear.scores", scores):
            if not zipmap:  # the whole graph is one kernel call (ZipMap: built at the boundary)
                assert _kernel_names(m, {"X": x[:1]}) == [f"ml.linear_{scores}_f32"]
            _check(m, {"X": x})
            _check(m, {"X": x[:1]})
