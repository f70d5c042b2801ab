"""Which step the tree-ensemble kernels take (``Flat.leq``, jitort.kernels.cpu.trees): the
branch-free BRANCH_LEQ step with missing-value tracking (a NaN feature compares as -inf on a
tracked node, NaN elsewhere) against onnxruntime, on both walks (rows- and trees-major), and
the trees-major walk's deepest-first order (``Flat.order``)."""
import numpy as np
import pytest

from jitort.codegen.tree_tables import flatten_v3
from jitort.importer import import_model
from jitort.kernels.cpu.trees import _one_weight_sum
from tests.test_ml_ops import _MODELS, _check, _tree_model, _two_trees

pytest.importorskip("sklearn")


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


def test_trees_major_walk_stops_each_tree_at_its_depth():
    # histgb trees differ in depth: a row walks each tree only to its own depth (stopping a
    # step early somewhere changes labels and scores against onnxruntime)
    model = _MODELS["histgb_classifier3"]()
    flat = _flat(model)
    assert flat.depth.min() < flat.depth.max()
    x = np.random.default_rng(4).standard_normal((7, 6)).astype(np.float32)
    x[::3, 2] = np.nan
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
])
def test_leq_step_with_missing_values_matches_onnxruntime(values, miss, modes, leq):
    model = _regressor(values, miss, modes)
    assert _flat(model).leq == leq
    x = np.random.default_rng(3).standard_normal((40, 3)).astype(np.float32)
    # ties with both thresholds, NaN on both split features, -inf and +inf
    x[:5, 0], x[5:10, 2], x[10:13, 0], x[13:16, 2] = 0.1, -0.2, np.nan, np.nan
    x[16, 0], x[17, 2], x[18, 0] = -np.inf, np.inf, np.inf
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
