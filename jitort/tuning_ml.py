"""The classical-ML (ai.onnx.ml) choices calibration measures (``jitort.tuning``; the deep
learning ones are in ``jitort.tuning_choices``): candidates, buckets, default rules. Each is a choice a
lowering makes, timed end to end: a synthetic one-node model compiled with the choice forced
(``tuning.force``), its calls timed.

``trees.layout``: a tree ensemble (ai.onnx.ml) that the complete-tree layout can hold (every
split BRANCH_LEQ after flattening, leaves of one weight adding up, a tree's leaves on one
target: gradient boosting's, XGBoost's) walks either the complete layout (``complete``:
``trees.walk_complete``, children by index arithmetic, every tree padded to the deepest) or the
node arrays (``nodes``: ``trees.walk``, each tree to its own depth). Timed as ``conv.winograd``
is: a 100-tree regressor over 20 features compiled with the choice forced, 1,000 rows.
Buckets: the deepest tree (up to 4, 6, 8, 10 levels; deeper ones are never complete) x the
padding (the complete walk's steps over the node walk's, in percent: up to 125, 200, more). Default rule
(Zen 4, gradient boosting's shallow trees): complete up to ``COMPLETE_MAX_DEPTH`` levels and
``COMPLETE_MAX_STEPS`` padding (jitort/codegen/lowerings/trees.py).

``trees.bitvector``: an ensemble whose splits are all BRANCH_LEQ, leaves of one weight adding
up and at most 64 leaves a tree walks either the bitvector walk (``bitvector``:
``tree_bits.walk_bits``, after QuickScorer) or the walk ``trees.layout`` picks (``walk``).
Timed as ``trees.layout`` is, on random trees of a given shape (BITS_TREES of them, missing
values tracked, few important features). Buckets: the trees' interior nodes over their depth
(means over the trees; the bitvector walk's work per row and tree over the walk's), percent
classes, x depth (up to 4, 8, more). Default rule (Zen 4): ``BITVECTOR_MIN_DEPTH`` /
``BITVECTOR_MAX_RATIO`` (jitort/codegen/lowerings/trees.py).

``linear.scores``: a float32 LinearClassifier / LinearRegressor (a Scaler before it and a
Normalizer after folded in) computes its scores a row at a time (``rows``:
``ml.linear_rows_f32``, each row's dot product with four classes' weights at a time, then
horizontal sums) or a tile of rows at a time (``tiles``: ``ml.linear_tiles_f32``, one vector
of rows transposed in registers, ``kernels.cpu.linear_tile``). Timed as ``conv.winograd`` is:
a LinearClassifier compiled with the choice forced, 4,096 rows. Buckets: features (up to 4, 8,
16, 24, 32, 48, 64, more) x score columns (1, 2-4, more). Default rule (Zen 4, AVX-512):
``TILES_MAX_FEATURES`` (jitort/codegen/lowerings/ml.py).
"""
from __future__ import annotations


import numpy as np

from . import devices
from .tuning import Candidate, Choice, force, register


# trees.layout: the complete-tree layout or the node arrays for a tree ensemble
TREE_DEPTHS = (4, 6, 8, 10)
#: padding classes in percent (bucket keys are ints): up to 125, 200, more
TREE_STEPS = (100, 150, 250)
TREE_COUNT, TREE_FEATURES, TREE_ROWS = 100, 20, 1000


def _tree_bucket(p: dict) -> tuple:
    d, steps = int(p["depth"]), float(p["steps"])
    return (TREE_DEPTHS[sum(d > x for x in TREE_DEPTHS[:-1])],
            TREE_STEPS[(steps > 1.25) + (steps > 2.0)])


def _tree_grid() -> list:
    return [(d, s) for d in TREE_DEPTHS for s in TREE_STEPS]


def _tree_problem(key: tuple) -> dict:
    d, pct = key
    return {"depth": d, "steps": pct / 100, "complete": True}


def _tree_default(p: dict) -> str:
    from .codegen.lowerings.trees import COMPLETE_MAX_DEPTH, COMPLETE_MAX_STEPS
    return ("complete" if p.get("complete") and int(p["depth"]) <= COMPLETE_MAX_DEPTH
            and float(p["steps"]) <= COMPLETE_MAX_STEPS else "nodes")


def _tree_applies(which: str):
    def applies(p: dict) -> bool:
        from .codegen.lowerings.trees import COMPLETE_LIMIT
        return which == "nodes" or (bool(p.get("complete"))
                                    and int(p["depth"]) <= COMPLETE_LIMIT)
    return applies


def _synthetic_trees(depth: int, steps: float):
    """A TreeEnsembleRegressor of TREE_COUNT complete binary trees over TREE_FEATURES
    features: a share ``depth`` levels deep, the others stumps, so that the padded walk takes
    about ``steps`` times the steps of each tree walked to its own depth."""
    rng = np.random.default_rng(0)
    share = 1.0 if depth <= 1 else (depth / steps - 1) / (depth - 1)
    deep = min(TREE_COUNT, max(1, round(share * TREE_COUNT)))

    def complete(d):
        inner = 2 ** d - 1
        return ([2 * i + 1 if i < inner else -1 for i in range(2 * inner + 1)],
                [2 * i + 2 if i < inner else -1 for i in range(2 * inner + 1)])
    trees = (complete(depth if t < deep else 1) for t in range(TREE_COUNT))
    return _regressor(trees, TREE_FEATURES, lambda: int(rng.integers(TREE_FEATURES)), False,
                      rng)


def _regressor(trees, features: int, pick, missing: bool, rng):
    """A TreeEnsembleRegressor model of ``trees`` ((true children, false children) per tree,
    -1 for a leaf's), one weight per leaf, over ``features`` float32 features: a split on
    feature ``pick()`` against a normal threshold (with ``missing``, a NaN sent to a random
    side), a normal leaf weight."""
    from onnx import TensorProto, helper
    at: dict = {k: [] for k in (
        "nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values", "nodes_modes",
        "nodes_truenodeids", "nodes_falsenodeids", "target_treeids", "target_nodeids",
        "target_ids", "target_weights", "nodes_missing_value_tracks_true")}
    for t, (tch, fch) in enumerate(trees):
        for i, (a, b) in enumerate(zip(tch, fch)):
            leaf = a < 0
            for k, v in (("nodes_treeids", t), ("nodes_nodeids", i),
                         ("nodes_featureids", 0 if leaf else pick()),
                         ("nodes_values", 0.0 if leaf else float(rng.standard_normal())),
                         ("nodes_modes", "LEAF" if leaf else "BRANCH_LEQ"),
                         ("nodes_truenodeids", 0 if leaf else a),
                         ("nodes_falsenodeids", 0 if leaf else b),
                         ("nodes_missing_value_tracks_true",
                          int(missing and not leaf and rng.random() < 0.5))):
                at[k].append(v)
            if leaf:
                for k, v in (("target_treeids", t), ("target_nodeids", i), ("target_ids", 0),
                             ("target_weights", float(rng.standard_normal()))):
                    at[k].append(v)
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml",
                            n_targets=1, **at)
    return _ml_model(node, features, 3, (TensorProto.FLOAT,))


def _ml_model(node, features: int, ml_opset: int, types: tuple):
    """A model of the one ai.onnx.ml ``node`` reading float32 X (rows x ``features``); its
    outputs of the TensorProto element ``types``."""
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [node], "ml", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, features])],
        [helper.make_tensor_value_info(o, t, None) for o, t in zip(node.output, types)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", ml_opset)])
    model.ir_version = 8
    return model


def _forced_run(name: str, which: str, model, rows: int, features: int):
    """Calibration's timed call of ``model`` compiled (one thread) with choice ``name`` forced
    to ``which``, on ``rows`` random float32 rows of ``features``."""
    feeds = {"X": np.random.default_rng(1).standard_normal((rows, features)).astype(np.float32)}
    with force(name, which):
        cm = devices.factory("cpu")(model, threads=1, tiered=False)
        cm.run(None, feeds)       # lowers and compiles here, inside force
    return lambda: cm.run(None, feeds)


def _prepare_trees(which: str):
    def prepare(p: dict):
        model = _synthetic_trees(int(p["depth"]), float(p["steps"]))
        return _forced_run("trees.layout", which, model, TREE_ROWS, TREE_FEATURES)
    return prepare


TREES_LAYOUT = register(Choice(
    name="trees.layout",
    doc="tree ensembles the complete-tree layout can hold: that layout (every tree padded to "
        "the deepest, children by index) or the node arrays (each tree to its own depth)",
    candidates=tuple(Candidate(w, _tree_applies(w), _prepare_trees(w))
                     for w in ("complete", "nodes")),
    bucket=_tree_bucket, grid=_tree_grid, problem=_tree_problem, default=_tree_default,
    modules=("trees",),
    work=lambda p: float(TREE_ROWS * TREE_COUNT * int(p["depth"]))))


# linear.scores: a float32 linear model's scores a row at a time or a tile of rows at a time
#: feature classes (a bucket: the smallest class at least the features): the tile kernel's cost
#: steps with whole chunks of 16 features and the width of the last one
LINEAR_FEATURES = (4, 8, 16, 24, 32, 48, 64, 128)
LINEAR_CLASSES = (1, 3, 8)
LINEAR_ROWS = 4096


def _linear_bucket(p: dict) -> tuple:
    f, nt = int(p["features"]), int(p["classes"])
    return (LINEAR_FEATURES[min(sum(f > x for x in LINEAR_FEATURES), len(LINEAR_FEATURES) - 1)],
            LINEAR_CLASSES[(nt > 1) + (nt > 4)])


def _linear_grid() -> list:
    return [(f, nt) for f in LINEAR_FEATURES for nt in LINEAR_CLASSES]


def _linear_problem(key: tuple) -> dict:
    return {"features": key[0], "classes": key[1]}


def _linear_default(p: dict) -> str:
    from .codegen.lowerings.ml import TILES_MAX_FEATURES
    f, nt = int(p["features"]), int(p["classes"])
    return "tiles" if nt > 4 or f <= TILES_MAX_FEATURES[nt > 1] else "rows"


def _synthetic_linear(f: int, nt: int):
    """A LinearClassifier over ``f`` float32 features: ``nt`` classes (labels and scores),
    or one score column for two labels where ``nt`` is 1."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng(0)
    node = helper.make_node(
        "LinearClassifier", ["X"], ["label", "scores"], domain="ai.onnx.ml",
        coefficients=rng.standard_normal(nt * f).tolist(),
        intercepts=rng.standard_normal(nt).tolist(),
        classlabels_ints=list(range(max(nt, 2))))
    return _ml_model(node, f, 1, (TensorProto.INT64, TensorProto.FLOAT))


def _prepare_linear(which: str):
    def prepare(p: dict):
        f, nt = int(p["features"]), int(p["classes"])
        return _forced_run("linear.scores", which, _synthetic_linear(f, nt), LINEAR_ROWS, f)
    return prepare


LINEAR_SCORES = register(Choice(
    name="linear.scores",
    doc="a float32 LinearClassifier / LinearRegressor's scores: per row, a dot product with "
        "each class's weights (horizontal sums), or per tile of rows transposed in registers "
        "(one multiply-add per feature and class for the whole tile)",
    candidates=tuple(Candidate(w, lambda p: True, _prepare_linear(w)) for w in ("rows", "tiles")),
    bucket=_linear_bucket, grid=_linear_grid, problem=_linear_problem, default=_linear_default,
    modules=("ml", "linear_tile"),
    work=lambda p: 2.0 * LINEAR_ROWS * int(p["features"]) * int(p["classes"])))


# trees.bitvector: the bitvector walk or the walk trees.layout picks
#: classes of the trees' interior nodes over their depth (means over the trees), in percent
#: (bucket keys are ints): the bitvector walk's work per row and tree (about half the interior
#: nodes) over the walk's (its depth); a class spans half way to its neighbours
BITS_RATIOS = (100, 150, 200, 250, 300, 400, 600)
#: depth classes (up to 4, 8, more: shallow trees take the complete walk, few steps per row
#: against the bitvector walk's fixed work per row and tree)
BITS_DEPTHS = (3, 6, 11)
#: the synthetic ensembles: boosting's shape (100 rounds of 3 classes), missing values tracked
BITS_TREES, BITS_FEATURES, BITS_ROWS = 300, 20, 1000


_BITS_BOUNDS = [(a + b) / 2 for a, b in zip(BITS_RATIOS, BITS_RATIOS[1:])]


def _bits_bucket(p: dict) -> tuple:
    d = max(float(p["depth"]), 1.0)
    r = 100 * float(p["nodes"]) / d
    return (BITS_RATIOS[sum(r > x for x in _BITS_BOUNDS)], BITS_DEPTHS[(d > 4) + (d > 8)])


def _bits_nodes(pct: int, d: int) -> int:
    """The representative interior nodes of ratio class ``pct`` at depth d, within what a tree
    of d levels and at most BITVECTOR_LEAVES leaves holds."""
    from .codegen.tree_tables import BITVECTOR_LEAVES
    return min(round(pct * d / 100), 2 ** d - 1, BITVECTOR_LEAVES - 1)


def _bits_grid() -> list:
    return [(r, d) for d in BITS_DEPTHS for r in BITS_RATIOS
            if _bits_bucket({"nodes": _bits_nodes(r, d), "depth": d})[0] == r]


def _bits_problem(key: tuple) -> dict:
    r, d = key
    return {"nodes": _bits_nodes(r, d), "depth": d}


def _bits_default(p: dict) -> str:
    from .codegen.lowerings.trees import BITVECTOR_MAX_RATIO, BITVECTOR_MIN_DEPTH
    d = float(p["depth"])
    return ("bitvector" if d >= BITVECTOR_MIN_DEPTH and float(p["nodes"]) / d
            <= BITVECTOR_MAX_RATIO[d > 8] else "walk")


def _random_tree(rng, leaves: int, depth: int) -> tuple:
    """(true child, false child) lists of a binary tree of ``leaves`` leaves and exactly
    ``depth`` levels (leaves <= 2**depth, depth < leaves): a chain down to ``depth``, then
    leaves above it split at random (-1: a leaf's children)."""
    tch, fch, dep = [-1], [-1], [0]

    def split(i):
        tch[i], fch[i] = len(dep), len(dep) + 1
        tch.extend([-1, -1])
        fch.extend([-1, -1])
        dep.extend([dep[i] + 1] * 2)
    cur = 0
    for _ in range(depth):
        split(cur)
        cur = tch[cur] if rng.random() < 0.5 else fch[cur]
    while (len(dep) + 1) // 2 < leaves:
        split(int(rng.choice([i for i in range(len(dep)) if tch[i] < 0 and dep[i] < depth])))
    return tch, fch


def _synthetic_bits(leaves: int, depth: int):
    """A TreeEnsembleRegressor of BITS_TREES random trees of ``leaves`` leaves and ``depth``
    levels over BITS_FEATURES features (gradient boosting's shape: one weight per leaf),
    feature k split on with odds 1 / (k + 1) (a trained model's few important features), each
    split sending a NaN to a random side (tracked missing values, as HistGradientBoosting's
    and LightGBM's trees)."""
    rng = np.random.default_rng(0)
    odds = 1.0 / np.arange(1, BITS_FEATURES + 1)
    trees = (_random_tree(rng, leaves, depth) for _ in range(BITS_TREES))
    return _regressor(trees, BITS_FEATURES,
                      lambda: int(rng.choice(BITS_FEATURES, p=odds / odds.sum())), True, rng)


def _prepare_bits(which: str):
    def prepare(p: dict):
        nodes, depth = int(p["nodes"]), int(p["depth"])
        model = _synthetic_bits(nodes + 1, depth)
        return _forced_run("trees.bitvector", which, model, BITS_ROWS, BITS_FEATURES)
    return prepare


TREES_BITVECTOR = register(Choice(
    name="trees.bitvector",
    doc="tree ensembles of at most 64 leaves a tree, every split BRANCH_LEQ: the bitvector "
        "walk (per feature, the nodes a row's value sends false, in threshold order, clear "
        "leaves from their tree's set) or the tree walk trees.layout picks",
    candidates=tuple(Candidate(w, lambda p: True, _prepare_bits(w))
                     for w in ("bitvector", "walk")),
    bucket=_bits_bucket, grid=_bits_grid, problem=_bits_problem, default=_bits_default,
    modules=("tree_bits", "trees"),
    work=lambda p: float(BITS_ROWS * BITS_TREES * int(p["nodes"]))))
