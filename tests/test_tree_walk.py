"""Which step the tree-ensemble kernels take (``Flat.leq``, jitort.kernels.cpu.trees): the
branch-free BRANCH_LEQ step with missing-value tracking (a NaN feature compares as -inf on a
tracked node, NaN elsewhere) against onnxruntime, on both walks (rows- and trees-major), the
trees-major walk's deepest-first order (``Flat.order``), and the complete-tree walk
(``walk_complete``, gradient boosting's shallow trees) and the rule that picks it, and the
trees-major walk over the packed node table (``walk_trees_packed``). The bitvector walk is
forced off here (tests/test_tree_bits.py tests it)."""
import numpy as np
import pytest
from onnx import TensorProto

import jitort

from jitort.codegen.lowerings.trees import TREES_MAJOR_BELOW, _takes_complete, _takes_packed
from jitort.codegen.tree_tables import Complete, flatten_v3, packed_nodes
from jitort.importer import import_model
from jitort.kernels.cpu.trees import _one_weight_sum
from tests.test_ml_ops import (_MODELS, _X, _YR, _Y3, _check, _convert, _kernel_names,
                               _tree_model, _two_trees)

pytest.importorskip("sklearn")


@pytest.fixture(autouse=True)
def tree_walks():
    """This module tests the walks: the bitvector walk (tests/test_tree_bits.py), which
    calibration may pick for deep trees, is kept out."""
    from jitort import tuning
    with tuning.force("trees.bitvector", "walk"):
        yield


def _flat(model):
    nodes = [n for n in import_model(model).nodes if n.op_type.startswith("TreeEnsemble")]
    assert len(nodes) == 1
    prefix = "class" if nodes[0].op_type.endswith("Classifier") else "target"
    return flatten_v3(nodes[0], prefix)


def _regressor(values, miss, modes=("BRANCH_LEQ", "BRANCH_LEQ")):
    a = _two_trees(*modes, miss=miss)
    a.update(nodes_values=values, target_treeids=[0, 0, 1, 1], target_nodeids=[1, 2, 1, 2],
             target_ids=[0, 0, 0, 0], target_weights=[0.5, -0.25, 0.3, 0.125],
             n_targets=1)
    return _tree_model("TreeEnsembleRegressor", a, 1)


@pytest.mark.parametrize("name,leq", [("histgb_regressor", 2), ("histgb_classifier3", 2),
                                      ("random_forest3", 1), ("gbm_classifier2", 1)])
def test_sklearn_ensembles_take_the_leq_step(name, leq):
    flat = _flat(_MODELS[name]())
    assert flat.leq == leq
    # the NaN substitute: -inf exactly where missing values are tracked, NaN elsewhere
    assert np.array_equal(np.isneginf(flat.nanv), flat.miss != 0)
    assert np.isnan(flat.nanv[flat.miss == 0]).all()
    # the trees-major walk's order: every tree once, deepest first
    assert sorted(flat.order) == list(range(len(flat.roots)))
    assert (np.diff(flat.depth[flat.order]) <= 0).all()


@pytest.fixture
def node_walks(monkeypatch):
    """Shallow ensembles walk the node arrays (``walk``), not the complete layout."""
    import jitort.codegen.lowerings.trees as ml
    monkeypatch.setattr(ml, "COMPLETE_MAX_DEPTH", -1)


def test_trees_major_walk_stops_each_tree_at_its_depth(node_walks):
    # histgb trees differ in depth: a row walks each tree only to its own depth (stopping a
    # step early somewhere changes labels and scores against onnxruntime)
    model = _MODELS["histgb_classifier3"]()
    flat = _flat(model)
    assert flat.depth.min() < flat.depth.max()
    x = np.random.default_rng(4).standard_normal((7, 6)).astype(np.float32)
    x[::3, 2] = np.nan
    assert "trees.walk" in _kernel_names(model, {"X": x})
    for r in range(7):
        _check(model, {"X": x[r:r + 1]})
    _check(model, {"X": x})  # 7 rows: still trees-major (below TREES_MAJOR_BELOW)


@pytest.mark.parametrize("values,miss,modes,leq", [
    ([0.1, 0, 0, -0.2, 0, 0], (1, 0, 0, 0, 0, 0), ("BRANCH_LEQ", "BRANCH_LEQ"), 2),
    ([0.1, 0, 0, -0.2, 0, 0], (0, 0, 0, 1, 0, 0), ("BRANCH_LEQ", "BRANCH_LEQ"), 2),
    ([0.1, 0, 0, -0.2, 0, 0], (0, 0, 0, 0, 0, 0), ("BRANCH_LEQ", "BRANCH_LEQ"), 1),
    # a NaN threshold on a tracked node would compare -inf <= NaN (false): the general step
    ([np.nan, 0, 0, -0.2, 0, 0], (1, 0, 0, 1, 0, 0), ("BRANCH_LEQ", "BRANCH_LEQ"), 0),
    ([0.1, 0, 0, -0.2, 0, 0], (1, 0, 0, 1, 0, 0), ("BRANCH_LEQ", "BRANCH_GT"), 0),
    # BRANCH_LT (XGBoost's) as BRANCH_LEQ against the next float32 below the threshold
    ([0.1, 0, 0, -0.2, 0, 0], (0, 0, 0, 0, 0, 0), ("BRANCH_LT", "BRANCH_LT"), 1),
    ([0.1, 0, 0, -0.2, 0, 0], (1, 0, 0, 0, 0, 0), ("BRANCH_LT", "BRANCH_LEQ"), 2),
    ([-np.inf, 0, 0, -0.2, 0, 0], (0, 0, 0, 0, 0, 0), ("BRANCH_LT", "BRANCH_LT"), 0),
])
@pytest.mark.parametrize("walk", ["nodes", "complete"])
def test_leq_step_with_missing_values_matches_onnxruntime(values, miss, modes, leq, walk,
                                                          monkeypatch):
    if walk == "nodes":
        import jitort.codegen.lowerings.trees as ml
        monkeypatch.setattr(ml, "COMPLETE_MAX_DEPTH", -1)
    model = _regressor(values, miss, modes)
    assert _flat(model).leq == leq
    x = np.random.default_rng(3).standard_normal((40, 3)).astype(np.float32)
    # ties with both thresholds, NaN on both split features, -inf and +inf
    x[:5, 0], x[5:10, 2], x[10:13, 0], x[13:16, 2] = 0.1, -0.2, np.nan, np.nan
    x[16, 0], x[17, 2], x[18, 0] = -np.inf, np.inf, np.inf
    x[19, 0] = np.nextafter(np.float32(0.1), np.float32(-np.inf))  # just below a threshold
    names = _kernel_names(model, {"X": x})
    assert ("trees.walk_complete" in names) == (walk == "complete" and leq != 0), names
    _check(model, {"X": x})  # rows-major
    for r in (10, 13, 16, 0):  # one row: trees-major
        _check(model, {"X": x[r:r + 1]})


@pytest.mark.parametrize("name,agg,one", [("gbm_regressor", 0, True), ("gbm_classifier3", 0, True),
                                          ("gbm_regressor", 2, False), ("random_forest3", 0, False)])
def test_one_weight_leaves_take_the_plain_add(name, agg, one):
    # gradient boosting's leaves hold one weight each (the rows-major walk adds it directly);
    # a forest's leaves hold one per class, and MIN / MAX need _add_leaf's first-score rule
    flat = _flat(_MODELS[name]())
    assert _one_weight_sum(flat.tch, flat.lstart, agg) == one


def _with_nan_rows(n, seed=5):
    x = np.random.default_rng(seed).standard_normal((n, 6)).astype(np.float32)
    x[::3, 2] = np.nan
    x[1::5, 0] = np.nan
    return x


def _histgb_shallow(kind):
    # trained on NaN features: nodes track missing values (the leq 2 step), trees up to 3 deep
    # and unbalanced (leaves above the last level fill their subtree)
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    x = _X.copy()
    x[::4, 2] = np.nan
    x[1::7, 0] = np.nan
    if kind == "regressor":
        return _convert(HistGradientBoostingRegressor(max_iter=12, max_depth=3, random_state=0),
                        _YR, None, x=x)
    return _convert(HistGradientBoostingClassifier(max_iter=8, max_depth=3, random_state=0),
                    _Y3, x=x)


def _two_target_average(xdtype=TensorProto.FLOAT):
    # tree 0 (target 0): a depth-2 branch on the true side, a leaf on the false side, NaN
    # tracked at its root; tree 1 (target 1): a stump. AVERAGE over the two trees.
    a = dict(nodes_treeids=[0, 0, 0, 0, 0, 1, 1, 1], nodes_nodeids=[0, 1, 2, 3, 4, 0, 1, 2],
             nodes_featureids=[0, 1, 0, 0, 0, 2, 0, 0],
             nodes_values=[0.1, -0.3, 0, 0, 0, -0.2, 0, 0],
             nodes_modes=["BRANCH_LEQ", "BRANCH_LEQ", "LEAF", "LEAF", "LEAF", "BRANCH_LEQ",
                          "LEAF", "LEAF"],
             nodes_truenodeids=[1, 3, 0, 0, 0, 1, 0, 0], nodes_falsenodeids=[2, 4, 0, 0, 0, 2, 0, 0],
             nodes_missing_value_tracks_true=[1, 0, 0, 0, 0, 0, 0, 0],
             target_treeids=[0, 0, 0, 1, 1], target_nodeids=[2, 3, 4, 1, 2],
             target_ids=[0, 0, 0, 1, 1], target_weights=[0.5, -0.25, 0.75, 0.3, 0.125],
             n_targets=2, aggregate_function="AVERAGE", base_values=[0.05, -0.1])
    m = _tree_model("TreeEnsembleRegressor", a, 1, xdtype=xdtype)
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT  # float32 out of doubles
    return m


_COMPLETE = {"gbm_regressor": _MODELS["gbm_regressor"], "gbm_classifier2": _MODELS["gbm_classifier2"],
             "gbm_classifier3": _MODELS["gbm_classifier3"],
             "histgb_shallow_regressor": lambda: _histgb_shallow("regressor"),
             "histgb_shallow_classifier": lambda: _histgb_shallow("classifier"),
             "two_target_average": _two_target_average,
             "two_target_average_f64": lambda: _two_target_average(TensorProto.DOUBLE)}


@pytest.mark.parametrize("name,agg,complete", [
    ("gbm_regressor", 0, True), ("gbm_classifier3", 0, True), ("gbm_classifier2", 0, True),
    ("histgb_shallow_regressor", 0, True), ("histgb_shallow_classifier", 0, True),
    ("gbm_regressor", 2, False),  # MIN: first-score rule, not a plain add
    ("histgb_classifier3", 0, True),  # trees 3 to 8 deep
    ("rf_regressor_deep", 0, False),  # trees deeper than COMPLETE_MAX_DEPTH
    ("random_forest3", 0, False)])  # a leaf holds one weight per class
def test_complete_walk_rule(name, agg, complete):
    from sklearn.ensemble import RandomForestRegressor
    models = {**_MODELS, **_COMPLETE, "rf_regressor_deep": lambda: _convert(
        RandomForestRegressor(3, random_state=0), _YR, None)}
    model = models[name]()
    flat = _flat(model)
    assert _takes_complete(flat, agg) == complete
    if agg == 0:
        names = _kernel_names(model, {"X": _with_nan_rows(20)})
        assert ("trees.walk_complete" in names) == complete, names
        assert ("trees.walk" in names) != complete, names


def test_complete_walk_rule_steps(monkeypatch):
    # histgb_classifier3's trees are 3 to 8 deep: padded to 8 they take more steps than
    # walked to their own depths, within COMPLETE_MAX_STEPS but not within 1
    import jitort.codegen.lowerings.trees as ml
    flat = _flat(_MODELS["histgb_classifier3"]())
    steps = len(flat.roots) * flat.depth.max() / flat.depth.sum()
    assert 1 < steps <= ml.COMPLETE_MAX_STEPS and _takes_complete(flat, 0)
    monkeypatch.setattr(ml, "COMPLETE_MAX_STEPS", 1.0)
    assert not _takes_complete(flat, 0)


def test_complete_layout_children_and_padding():
    flat = _flat(_two_target_average())
    cp = Complete(flat)
    assert cp.dmax == 2 and cp.feat.shape == (2, 3) and cp.leaf.shape == (2, 4)
    # tree 0: root f0 <= 0.1, its true child f1 <= -0.3; the false leaf (0.5) fills 5 and 6
    assert cp.feat[0].tolist() == [0, 1, 0] and np.allclose(cp.thr[0, :2], [0.1, -0.3])
    assert np.allclose(cp.leaf[0], [-0.25, 0.75, 0.5, 0.5])
    assert np.isneginf(cp.nanv[0, 0]) and np.isnan(cp.nanv[0, 1])
    # tree 1: a stump, padded a level down
    assert cp.feat[1, 0] == 2 and np.allclose(cp.leaf[1], [0.3, 0.3, 0.125, 0.125])
    assert cp.target.tolist() == [0, 1]


@pytest.mark.parametrize("rows", [1, 7, TREES_MAJOR_BELOW, 17, 1000])
@pytest.mark.parametrize("name", sorted(_COMPLETE))
def test_complete_walk_matches_onnxruntime(name, rows):
    model = _COMPLETE[name]()
    x = _with_nan_rows(rows)
    if name.startswith("two_target_average"):
        x = x[:, :3].astype(np.float64 if name.endswith("f64") else np.float32)
        x[::4, 0], x[2::9, 1] = np.float32(0.1), np.float32(-0.3)  # ties with the thresholds
    one = _check(model, {"X": x})
    if rows == 1000:  # row blocks over two threads (where rows x trees reach the split)
        cm = jitort.compile(model, threads=2, strict=True, tiered=False)
        for g, w in zip(cm.run(None, {"X": x}), one):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("name,agg,packed", [
    ("histgb_classifier3", 0, True), ("histgb_regressor", 0, True), ("gbm_regressor", 1, True),
    ("gbm_regressor", 3, False),  # MAX: first-score rule
    ("random_forest3", 0, False)])  # a leaf holds one weight per class
def test_packed_walk_rule(name, agg, packed):
    assert _takes_packed(_flat(_MODELS[name]()), agg) == packed


def test_packed_table_rows():
    flat = _flat(_two_target_average())
    for dt, it in ((np.float32, np.int32), (np.float64, np.int64)):
        pk = packed_nodes(flat, dt).reshape(-1, 4)
        assert pk.dtype == it
        # node 0: feature 0 with missing values tracked (bit 31), threshold 0.1
        assert int(pk[0, 0]) & 0xFFFFFFFF == 0x80000000 and pk[0, 1:2].view(dt)[0] == dt(np.float32(0.1))
        assert pk[1, 0] == 1 and pk[1, 2:].tolist() == [3, 4]
        # leaf 2 of tree 0: target 0, weight 0.5, itself twice; leaf 7 of tree 1: target 1
        assert pk[2].tolist()[::2] == [0, 2] and pk[2, 3] == 2 and pk[2, 1:2].view(dt)[0] == 0.5
        assert pk[7, 0] == 1 and pk[7, 1:2].view(dt)[0] == 0.125


@pytest.mark.parametrize("rows", [1, 7, 17])
@pytest.mark.parametrize("name", ["histgb_classifier3", "histgb_classifier2", "histgb_regressor",
                                  "gbm_classifier3", "two_target_average",
                                  "two_target_average_f64"])
def test_packed_walk_matches_onnxruntime(name, rows, node_walks):
    # trees of differing depths, 8 at a time (45 histgb_classifier3 trees: a short last group)
    model = {**_MODELS, **_COMPLETE}[name]()
    x = _with_nan_rows(rows, seed=rows)
    if name.startswith("two_target_average"):
        x = x[:, :3].astype(np.float64 if name.endswith("f64") else np.float32)
        x[::4, 0] = np.float32(0.1)
    if rows < TREES_MAJOR_BELOW:
        assert "trees.walk" in _kernel_names(model, {"X": x})
    _check(model, {"X": x})


def test_xgboost_trees_take_the_leq_step_and_complete_walk():
    """onnxmltools writes XGBoost's splits as BRANCH_LT: flattened as BRANCH_LEQ (the next
    float32 down), they take the branch-free step and the complete-tree walk."""
    xgboost = pytest.importorskip("xgboost")
    onnxmltools = pytest.importorskip("onnxmltools")
    from onnxmltools.convert.common.data_types import FloatTensorType
    est = xgboost.XGBClassifier(n_estimators=8, max_depth=3).fit(_X, _Y3)
    model = onnxmltools.convert_xgboost(est, initial_types=[("X", FloatTensorType([None, 6]))],
                                        target_opset=15)
    tree = [n for n in model.graph.node if n.op_type == "TreeEnsembleClassifier"][0]
    modes = {m for a in tree.attribute if a.name == "nodes_modes" for m in a.strings}
    assert modes == {b"BRANCH_LT", b"LEAF"}
    assert _flat(model).leq == 1
    x = np.random.default_rng(6).standard_normal((50, 6)).astype(np.float32)
    x[::7, 1] = np.nan
    thr = [v for a in tree.attribute if a.name == "nodes_values" for v in a.floats]
    k = min(40, len(thr))
    x[:k, 0] = np.float32(thr[:k])  # ties with thresholds (of feature 0 among them)
    assert "trees.walk_complete" in _kernel_names(model, {"X": x})
    _check(model, {"X": x})
    _check(model, {"X": x[3:4]})
