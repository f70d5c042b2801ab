"""CPU lowerings: the ai.onnx.ml tree ensembles (TreeEnsembleClassifier / Regressor,
TreeEnsemble v5).

An ensemble's attributes are flattened once at compile time (``jitort/codegen/tree_tables.py``;
derived constants of the segment) into the tables of one of the walks, chosen by calibration
(``jitort/tuning_ml.py``): the bitvector walk (``jitort.kernels.cpu.tree_bits``), the
complete-tree walk or the node arrays (``jitort.kernels.cpu.trees``); then finalized with
onnxruntime's aggregation, base values, binary-class rules and post transforms.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ... import tuning
from ...ir import Node
from ..calls import KernelModule
from ..registry import Unlowerable, lowering
from ..tree_tables import (Bitvectors, Complete, Flat, _attr_values, _s, fits_bitvectors,
                           flatten_v3, flatten_v5, one_target_trees, one_weight_leaves,
                           packed_nodes)
from .common import _F
from .ml import _ML, _POST

if TYPE_CHECKING:
    from ..emitter import Emitter

_trees = KernelModule("trees")
_bits = KernelModule("tree_bits")

_AGG = {"SUM": 0, "AVERAGE": 1, "MIN": 2, "MAX": 3}
_AGG_V5 = {0: 1, 1: 0, 2: 2, 3: 3}  # v5's codes (AVERAGE 0, SUM 1, MIN 2, MAX 3) -> ours
#: below this many rows the trees walk in lockstep per row (trees-major; the complete-tree
#: walk: row by row, tree by tree), from it rows-major
TREES_MAJOR_BELOW = 8
#: the default rule of calibration's ``trees.layout`` (jitort/tuning_choices.py): the
#: complete-tree walk (``walk_complete``) for ensembles no deeper than this ...
COMPLETE_MAX_DEPTH = 8
#: ... whose padded walk (every tree ``depth`` steps) takes at most this many times the steps
#: of each tree walked to its own depth
COMPLETE_MAX_STEPS = 1.5
#: the complete layout's tables hold ``2**depth`` positions per tree: never deeper than this
COMPLETE_LIMIT = 10
#: the default rule of calibration's ``trees.bitvector``: the bitvector walk where the trees
#: are at least this deep and their interior nodes over their depth (means over the trees)
#: at most the ratio (for trees up to 8 levels deep, deeper): deep, lean trees --
#: LightGBM's, HistGradientBoosting's, XGBoost's -- whose walks pay for levels the
#: bitvectors skip
BITVECTOR_MIN_DEPTH, BITVECTOR_MAX_RATIO = 4.0, (2.25, 3.5)

def _floats(n: Node) -> bool:
    x = n.inputs[0]
    return x.dtype is not None and np.dtype(x.dtype) in _F and all(
        o is not None and o.dtype is not None for o in n.outputs)


def _flat(em, n: Node, make) -> Flat:
    """The node's flattened ensemble, made once per segment (the memo outlives re-lowerings)."""
    key = ("ml.flat", id(n))
    if key not in em.memo:
        em.memo[key] = make()
    return em.memo[key]


def _takes_complete(flat: Flat, agg: int) -> bool:
    """Whether the ensemble walks in the complete-tree layout. It can where every node is
    BRANCH_LEQ (``leq`` 1 or 2), leaves of one weight each add up (SUM / AVERAGE), a tree's
    leaves are on one target (gradient boosting's) and no tree is deeper than the layout's
    limit; it does where calibration's ``trees.layout`` picks it for the deepest tree and the
    padding (default rule: ``COMPLETE_MAX_DEPTH``, ``COMPLETE_MAX_STEPS``)."""
    if flat.leq == 0 or agg > 1 or not len(flat.roots) or not one_target_trees(flat):
        return False
    d = int(flat.depth.max())
    if d > COMPLETE_LIMIT:
        return False
    steps = len(flat.roots) * d / max(int(flat.depth.sum()), 1)
    return tuning.choose("trees.layout", depth=d, steps=steps, complete=True) == "complete"


def _takes_bitvectors(flat: Flat, agg: int) -> bool:
    """Whether the ensemble takes the bitvector walk (``tree_bits.walk_bits``): it can where
    leaves add up (SUM / AVERAGE) and :func:`fits_bitvectors`; it does where calibration's
    ``trees.bitvector`` picks it for the trees' interior nodes over their depth and their
    depth (default rule: ``BITVECTOR_MIN_DEPTH``, ``BITVECTOR_MAX_RATIO``)."""
    if agg > 1 or not fits_bitvectors(flat):
        return False
    nodes = float(np.mean(flat.leaves)) - 1.0
    return tuning.choose("trees.bitvector", nodes=nodes,
                         depth=float(flat.depth.mean())) == "bitvector"


def _walk_bits(em, n: Node, flat: Flat, x, rows, feats, acc, has, par) -> None:
    key = ("ml.bits", id(n))
    if key not in em.memo:
        em.memo[key] = Bitvectors(flat, x.dtype, int(feats))
    bv = em.memo[key]
    em.call(_bits.walk_bits, em.shaped(x, (rows, feats)),
            *(em.constant(key + (a,), lambda a=a: getattr(bv, a)) for a in (
                "fstart", "nthr", "ntree", "nmask", "nanstart", "nantree", "nanmask", "lv0",
                "leafw", "leaft")), acc, has, em.size(int(par)))


def _takes_packed(flat: Flat, agg: int) -> bool:
    """Whether the trees-major walk (below ``TREES_MAJOR_BELOW`` rows) takes the packed node
    table (``walk_trees_packed``): every node BRANCH_LEQ, leaves of one weight adding up."""
    return flat.leq != 0 and agg <= 1 and one_weight_leaves(flat)


def _walk(em: Emitter, n: Node, flat: Flat, agg: int, ntargets: int):
    """Emit the walk; returns the (rows, targets) accumulator and has-score views."""
    x = n.inputs[0]
    xs = em.shape(x)
    rows = 1 if len(xs) == 1 else xs[0]
    feats = xs[-1]
    if len(flat.feat) and int(flat.feat.max()) >= feats:
        raise Unlowerable(n, f"a node reads feature {int(flat.feat.max())} of {feats}")
    if len(flat.ltarget) and (flat.ltarget.min() < 0 or flat.ltarget.max() >= ntargets):
        raise Unlowerable(n, "a leaf weight names a target out of range")
    dt = np.dtype(x.dtype)
    c = em.constant
    k = ("ml.trees", id(n))
    # scores add up in the threshold dtype, tree by tree, as onnxruntime's (a float64 sum
    # moves a vote-count tie such as 5 of 10 trees off 0.5 and flips the binary label)
    acc = em.temp(rows * ntargets, dt).reshape(em.sizes((rows, ntargets)))
    has = em.temp(rows * ntargets, np.uint8).reshape(em.sizes((rows, ntargets)))
    par = em.split("trees", n, rows * len(flat.roots), 1 << 14, rows)
    if _takes_bitvectors(flat, agg):
        _walk_bits(em, n, flat, x, rows, feats, acc, has, par)
        return acc, has, rows
    if _takes_complete(flat, agg):
        key = ("ml.complete", id(n))
        if key not in em.memo:
            em.memo[key] = Complete(flat)
        cp = em.memo[key]
        em.call(_trees.walk_complete, em.shaped(x, (rows, feats)),
                c(k + ("cfeat",), lambda: cp.feat), c(k + ("cthr",), lambda: cp.thr.astype(dt)),
                c(k + ("cnanv",), lambda: cp.nanv.astype(dt)),
                c(k + ("cleaf",), lambda: cp.leaf.astype(dt)),
                c(k + ("ctarget",), lambda: cp.target),
                em.size(cp.dmax), em.size(flat.leq), acc, has, em.size(TREES_MAJOR_BELOW),
                em.size(int(par)))
        return acc, has, rows
    arrs = [c(k + ("feat",), lambda: flat.feat), c(k + ("thr",), lambda: flat.thr.astype(dt)),
            c(k + ("tch",), lambda: flat.tch), c(k + ("fch",), lambda: flat.fch),
            c(k + ("mode",), lambda: flat.mode), c(k + ("miss",), lambda: flat.miss),
            c(k + ("nanv",), lambda: flat.nanv.astype(dt)),
            c(k + ("mstart",), lambda: flat.mstart),
            c(k + ("members",), lambda: flat.members.astype(dt)),
            c(k + ("roots",), lambda: flat.roots), c(k + ("depth",), lambda: flat.depth),
            c(k + ("order",), lambda: flat.order),
            c(k + ("lstart",), lambda: flat.lstart), c(k + ("ltarget",), lambda: flat.ltarget),
            c(k + ("lweight",), lambda: flat.lweight.astype(dt))]
    packed = _takes_packed(flat, agg)
    it = np.int32 if dt.itemsize == 4 else np.int64
    pk = (c(k + ("packed",), lambda: packed_nodes(flat, dt)) if packed
          else c(("ml.trees.nopack", it.__name__), lambda: np.zeros(4, it)))
    em.call(_trees.walk, em.shaped(x, (rows, feats)), *arrs, em.size(agg),
            em.size(flat.leq), acc, has, em.size(TREES_MAJOR_BELOW), em.size(int(par)), pk,
            em.size(int(packed)))
    return acc, has, rows


def _base(em, n: Node) -> object:
    b = _attr_values(n.attrs, "base_values")
    return em.constant(("ml.base", id(n)), lambda: b if len(b) else np.zeros(0))


@lowering("TreeEnsembleRegressor", domain=_ML, supports=_floats)
def lower_tree_regressor(em: Emitter, n: Node) -> None:
    at = n.attrs
    nt = int(at.get("n_targets", 1))
    agg = _AGG.get(_s(at.get("aggregate_function", "SUM")))
    post = _POST.get(_s(at.get("post_transform", "NONE")))
    if agg is None or post is None:
        raise Unlowerable(n, "unknown aggregate_function or post_transform")
    flat = _flat(em, n, lambda: flatten_v3(n, "target"))
    acc, has, rows = _walk(em, n, flat, agg, nt)
    y = em.write(n.outputs[0]).reshape(em.sizes((rows, nt)))
    em.call(_trees.finish_regressor, acc, has, _base(em, n), em.size(agg), em.size(post),
            em.size(len(flat.roots)), y)


@lowering("TreeEnsemble", domain=_ML, supports=_floats)
def lower_tree_ensemble(em: Emitter, n: Node) -> None:
    at = n.attrs
    nt = int(at.get("n_targets", 1))
    agg = _AGG_V5.get(int(at.get("aggregate_function", 1)))
    post = int(at.get("post_transform", 0))
    if agg is None or not 0 <= post <= 4:
        raise Unlowerable(n, "unknown aggregate_function or post_transform")
    flat = _flat(em, n, lambda: flatten_v5(n))
    acc, has, rows = _walk(em, n, flat, agg, nt)
    y = em.write(n.outputs[0]).reshape(em.sizes((rows, nt)))
    em.call(_trees.finish_regressor, acc, has, em.constant(("ml.base0",), lambda: np.zeros(0)),
            em.size(agg), em.size(post), em.size(len(flat.roots)), y)


def _int_labels(n: Node) -> bool:
    return _floats(n) and bool(n.attrs.get("classlabels_int64s")) and len(
        n.attrs["classlabels_int64s"]) >= 2


@lowering("TreeEnsembleClassifier", domain=_ML, supports=_int_labels)
def lower_tree_classifier(em: Emitter, n: Node) -> None:
    at = n.attrs
    labels = np.asarray(at["classlabels_int64s"], np.int64)
    nc = len(labels)
    post = _POST.get(_s(at.get("post_transform", "NONE")))
    if post is None:
        raise Unlowerable(n, "unknown post_transform")
    flat = _flat(em, n, lambda: flatten_v3(n, "class"))
    acc, has, rows = _walk(em, n, flat, 0, nc)
    binary = nc == 2 and len(set(flat.ltarget.tolist())) == 1
    allpos = bool(np.all(flat.lweight >= 0))
    y = em.write(n.outputs[0]).reshape(em.sizes((rows,)))
    z = em.write(n.outputs[1]).reshape(em.sizes((rows, nc)))
    em.call(_trees.finish_classifier, acc, has, _base(em, n), em.size(post),
            em.constant(("ml.labels", id(n)), lambda: labels), em.size(int(binary)),
            em.size(int(allpos)), z, y)
