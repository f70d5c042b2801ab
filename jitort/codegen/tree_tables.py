"""Tree ensembles of the ai.onnx.ml domain flattened into the node arrays the kernels walk
(``jitort.kernels.cpu.trees``): TreeEnsembleClassifier / Regressor (ai.onnx.ml 1-3, per-node
attribute lists, :func:`flatten_v3`) and TreeEnsemble (5, :func:`flatten_v5`). Plain Python and
numpy, run once per segment at compile time by the tree lowerings (jitort/codegen/lowerings/trees.py).
"""
from __future__ import annotations

from functools import cached_property

import numpy as np

from ..ir import Node
from .registry import Unlowerable

_MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4,
          "BRANCH_NEQ": 5, "LEAF": -1}


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _attr_values(at: dict, name: str):
    """An ai.onnx.ml float list attribute or its ``*_as_tensor`` form (v3)."""
    t = at.get(name + "_as_tensor")
    if t is not None:
        return np.asarray(t, np.float64).reshape(-1)
    return np.asarray(at.get(name, []), np.float64)


class Flat:
    """A flattened ensemble: node arrays (leaves loop on themselves), roots and depth per
    tree, leaf weights in CSR form (``lstart`` per node), MEMBER sets in CSR (``mstart``)."""

    def __init__(self, feat, thr, tch, fch, mode, miss, roots, lstart, ltarget, lweight,
                 mstart=None, members=None):
        nn = len(feat)
        self.feat = np.asarray(feat, np.int64).astype(np.int32)
        self.thr = np.asarray(thr, np.float64)
        self.tch, self.fch = np.asarray(tch, np.int32), np.asarray(fch, np.int32)
        self.mode = np.asarray(mode, np.int8)
        self.miss = np.asarray(miss, np.uint8)
        self.roots = np.asarray(roots, np.int32)
        self.lstart, self.ltarget = np.asarray(lstart, np.int32), np.asarray(ltarget, np.int32)
        self.lweight = np.asarray(lweight, np.float64)
        self.mstart = np.zeros(nn + 1, np.int32) if mstart is None else np.asarray(mstart, np.int32)
        self.members = np.zeros(1, np.float64) if members is None else np.asarray(members, np.float64)
        self.depth = self._depths()
        #: tree numbers by decreasing depth (the trees-major walk's order)
        self.order = np.argsort(-self.depth, kind="stable").astype(np.int32)
        #: the kernels' step (``leq``): 0 general, 1 every node BRANCH_LEQ without missing
        #: tracking, 2 every node BRANCH_LEQ with some tracking and no NaN threshold (a NaN
        #: feature compares as ``nanv``: -inf where tracked, so it goes true, else NaN)
        self.nanv = np.where(self.miss != 0, -np.inf, np.nan)
        if np.any(self.mode != 0) or (self.miss.any() and np.isnan(self.thr).any()):
            self.leq = 0
        else:
            self.leq = 2 if self.miss.any() else 1

    @cached_property
    def leaves(self) -> np.ndarray:
        """The number of leaves of each tree (counted once: the bitvector rules read it)."""
        leaf = self.tch == np.arange(len(self.tch))
        counts = np.zeros(len(self.roots), np.int64)
        cur = self.roots.astype(np.int64)
        tree = np.arange(len(cur))
        while len(cur):            # level by level, a leaf counted where it is reached
            at = leaf[cur]
            np.add.at(counts, tree[at], 1)
            cur, tree = cur[~at], tree[~at]
            cur, tree = np.concatenate([self.tch[cur], self.fch[cur]]), np.concatenate([tree, tree])
        return counts

    def _depths(self) -> np.ndarray:
        depth = np.zeros(len(self.roots), np.int32)
        for t, root in enumerate(self.roots):
            level, d, seen = [int(root)], 0, 0
            while level:
                nxt = [c for i in level for c in (self.tch[i], self.fch[i]) if c != i]
                seen += len(level)
                if nxt:
                    d += 1
                if seen > len(self.feat) * 2:
                    raise ValueError("tree ensemble: a tree has a cycle")
                level = nxt
            depth[t] = d
        return depth


class Complete:
    """A :class:`Flat` ensemble whose leaves hold one weight each, all of a tree's on one target
    (:func:`one_target_trees`), laid out as complete binary trees of ``dmax`` levels (the
    kernels' ``walk_complete``): per tree, interior position ``i`` (``0 <= i < 2**dmax - 1``)
    has a feature, threshold and NaN substitute, its children are ``2i + 1`` (true) and
    ``2i + 2`` (false), leaf position ``k`` (``0 <= k < 2**dmax``) a weight, and the tree a
    target. A leaf above the last level fills every position of its subtree,
    so the positions under it may compare anything (feature 0, threshold 0)."""

    def __init__(self, flat: Flat):
        nt, d = len(flat.roots), int(flat.depth.max()) if len(flat.roots) else 0
        ni = (1 << d) - 1
        self.dmax = d
        self.feat = np.zeros((nt, ni), np.int32)
        self.thr = np.zeros((nt, ni), np.float64)
        self.nanv = np.full((nt, ni), np.nan)
        cur = flat.roots.astype(np.int64)[:, None]  # (trees, 2**level) original node ids
        for level in range(d):
            leaf = flat.tch[cur] == cur
            lo = (1 << level) - 1
            sl = slice(lo, lo + (1 << level))
            self.feat[:, sl] = np.where(leaf, 0, flat.feat[cur])
            self.thr[:, sl] = np.where(leaf, 0.0, flat.thr[cur])
            self.nanv[:, sl] = np.where(leaf, np.nan, flat.nanv[cur])
            nxt = np.empty((nt, 2 << level), np.int64)
            nxt[:, 0::2] = np.where(leaf, cur, flat.tch[cur])
            nxt[:, 1::2] = np.where(leaf, cur, flat.fch[cur])
            cur = nxt
        first = flat.lstart[cur]
        self.leaf = flat.lweight[first]
        self.target = flat.ltarget[first[:, 0]].astype(np.int32)


def packed_nodes(flat: Flat, dtype) -> np.ndarray:
    """The node table of the kernels' ``walk_trees_packed``: four integers per node (flat, node
    ``i`` at ``4i``) as wide as ``dtype`` (float32 or float64), per interior node its feature
    (bit 31 set where missing values are tracked), its threshold's bits and its true and false
    children; per leaf (one weight each) its weight's target, the weight's bits and itself
    twice."""
    dt = np.dtype(dtype)
    it = np.int32 if dt.itemsize == 4 else np.int64
    nn = len(flat.feat)
    leaf = flat.tch == np.arange(nn)
    first = np.minimum(flat.lstart[:-1], max(len(flat.ltarget) - 1, 0))
    tg = flat.ltarget[first] if len(flat.ltarget) else np.zeros(nn, np.int32)
    w = flat.lweight[first] if len(flat.lweight) else np.zeros(nn)
    col0 = np.where(leaf, tg.astype(np.int64),
                    flat.feat.astype(np.int64) | (flat.miss != 0).astype(np.int64) << 31)
    p = np.empty((nn, 4), it)
    p[:, 0] = col0.astype(np.uint32).view(np.int32) if it is np.int32 else col0
    p[:, 1] = np.where(leaf, w, flat.thr).astype(dt).view(it)
    p[:, 2], p[:, 3] = flat.tch, flat.fch
    return p.reshape(-1)


#: the bitvector walk's leaf sets are one uint64 per tree
BITVECTOR_LEAVES = 64


def fits_bitvectors(flat: Flat) -> bool:
    """Whether the bitvector walk (:class:`Bitvectors`) can evaluate the ensemble: every node
    BRANCH_LEQ (``leq`` 1 or 2), leaves of one weight, at most BITVECTOR_LEAVES leaves a
    tree."""
    if flat.leq == 0 or not len(flat.roots) or not one_weight_leaves(flat):
        return False
    return int(flat.leaves.max()) <= BITVECTOR_LEAVES


class Bitvectors:
    """The tables of the bitvector walk (``kernels.cpu.tree_bits``, after Lucchese et al.'s
    QuickScorer) of a :class:`Flat` ensemble that :func:`fits_bitvectors`. A tree's leaves are
    numbered left (true) to right; a row's exit leaf is the first leaf of its tree's set once
    every node whose test is false for the row has removed the leaves of its true subtree
    (``mask``: all bits but those). A BRANCH_LEQ test is false where the threshold < the
    value, so with each feature's nodes sorted by threshold a row visits a prefix of them;
    a NaN value (false for BRANCH_LEQ unless missing values are tracked, then true) visits
    the feature's list of nodes a NaN sends false (``nan*``); a NaN threshold (always false)
    is folded into the tree's starting set ``lv0``. Leaf ``k`` of tree ``t`` scores target
    ``leaft[t, k]`` with weight ``leafw[t, k]``. Thresholds sorted as ``dtype`` values, the
    kernels' comparison type."""

    def __init__(self, flat: Flat, dtype, features: int):
        dt = np.dtype(dtype)
        nt = len(flat.roots)
        full = np.uint64(0xFFFFFFFFFFFFFFFF)
        self.lv0 = np.full(nt, full, np.uint64)
        self.leafw = np.zeros((nt, BITVECTOR_LEAVES), dt)
        self.leaft = np.zeros((nt, BITVECTOR_LEAVES), np.int32)
        rows = []                  # (feature, threshold, tree, mask, a NaN goes false)
        thr = flat.thr.astype(dt)
        for t, root in enumerate(flat.roots):
            for nd, lo, mid in self._inner(flat, t, int(root)):
                m = full ^ np.uint64(((1 << (mid - lo)) - 1) << lo)
                if np.isnan(thr[nd]):
                    self.lv0[t] &= m
                else:
                    rows.append((int(flat.feat[nd]), thr[nd], t, m, flat.miss[nd] == 0))
        rows.sort(key=lambda e: (e[0], e[1]))
        self.nthr = np.array([e[1] for e in rows], dt)
        self.ntree = np.array([e[2] for e in rows], np.int32)
        self.nmask = np.array([e[3] for e in rows], np.uint64)
        self.fstart = np.searchsorted(np.array([e[0] for e in rows], np.int64),
                                      np.arange(features + 1)).astype(np.int32)
        nan = [e for e in rows if e[4]]
        self.nantree = np.array([e[2] for e in nan], np.int32)
        self.nanmask = np.array([e[3] for e in nan], np.uint64)
        self.nanstart = np.searchsorted(np.array([e[0] for e in nan], np.int64),
                                        np.arange(features + 1)).astype(np.int32)

    def _inner(self, flat: Flat, t: int, root: int) -> list:
        """Tree t's interior nodes with the range [lo, mid) of their true subtree's leaves
        (numbered in order); its leaves' weights and targets go into the leaf tables."""
        out, nleaf = [], 0
        stack = [(root, False)]        # (node, its true subtree's leaves are numbered)
        starts = {}
        while stack:
            i, done = stack.pop()
            if flat.tch[i] == i:
                k = flat.lstart[i]
                self.leafw[t, nleaf], self.leaft[t, nleaf] = flat.lweight[k], flat.ltarget[k]
                nleaf += 1
            elif not done:
                starts[i] = nleaf
                stack += [(i, True), (int(flat.tch[i]), False)]
            else:
                out.append((i, starts[i], nleaf))
                stack.append((int(flat.fch[i]), False))
        return out


def one_weight_leaves(flat: Flat) -> bool:
    """Whether every leaf (a node that is its own true child) holds exactly one weight."""
    leaves = flat.tch == np.arange(len(flat.tch))
    return bool(np.all(np.diff(flat.lstart)[leaves] == 1))


def one_target_trees(flat: Flat) -> bool:
    """Whether every leaf holds exactly one weight and all the leaves of a tree score the same
    target (gradient boosting's trees)."""
    nn = len(flat.tch)
    leaves = flat.tch == np.arange(nn)
    if not one_weight_leaves(flat):
        return False
    # each node's tree: a walk down from the roots, level by level
    tree = np.full(nn, -1, np.int64)
    cur = flat.roots.astype(np.int64)
    tree[cur] = np.arange(len(cur))
    while len(cur):
        inner = cur[flat.tch[cur] != cur]
        tree[flat.tch[inner]] = tree[inner]
        tree[flat.fch[inner]] = tree[inner]
        cur = np.concatenate([flat.tch[inner], flat.fch[inner]]).astype(np.int64)
    lv = np.flatnonzero(leaves & (tree >= 0))
    tg = flat.ltarget[flat.lstart[lv]]
    first = np.full(len(flat.roots), -1, np.int64)
    first[tree[lv]] = tg
    return bool(np.all(first[tree[lv]] == tg))


def _csr(per_node: list, nn: int):
    lstart = np.zeros(nn + 1, np.int64)
    for i in range(nn):
        lstart[i + 1] = lstart[i] + len(per_node[i])
    tg = [t for lst in per_node for t, _ in lst]
    w = [x for lst in per_node for _, x in lst]
    return lstart, tg, w


def _lt_as_leq(n: Node, mode, thr):
    """``(mode, thr)`` with BRANCH_LT (1) nodes as BRANCH_LEQ (0) against the next float32
    below their threshold, for a float32 input: ``x < t`` and ``x <= nextafter(t, -inf)``
    agree on every float32 ``x``, NaN included (a threshold of -inf, or one float32 cannot
    hold, stays BRANCH_LT). XGBoost's trees are all BRANCH_LT; in BRANCH_LEQ form they take
    the kernels' branch-free steps and the complete-tree layout."""
    x = n.inputs[0]
    mode, thr = np.array(mode, np.int64), np.array(thr, np.float64)
    if x is None or x.dtype is None or np.dtype(x.dtype) != np.float32 or len(thr) != len(mode):
        return mode, thr
    t32 = thr.astype(np.float32)
    sel = (mode == 1) & (t32 != -np.inf) & (t32.astype(np.float64) == thr)
    thr[sel] = np.nextafter(t32[sel], np.float32(-np.inf)).astype(np.float64)
    mode[sel] = 0
    return mode, thr


def flatten_v3(n: Node, prefix: str) -> Flat:
    """TreeEnsembleClassifier / Regressor (ai.onnx.ml 1-3) attributes -> :class:`Flat`.
    ``prefix``: ``class`` or ``target`` (the leaf-weight attributes)."""
    at = n.attrs
    tids = list(at.get("nodes_treeids", []))
    nids = list(at.get("nodes_nodeids", []))
    nn = len(tids)
    key = {(t, i): k for k, (t, i) in enumerate(zip(tids, nids))}
    if len(key) != nn or nn == 0:
        raise Unlowerable(n, "tree node ids are empty or repeated")
    modes = [_MODES.get(_s(m)) for m in at.get("nodes_modes", [])]
    if len(modes) != nn or None in modes:
        raise Unlowerable(n, "unknown or missing nodes_modes")
    feats = list(at.get("nodes_featureids", [0] * nn))
    thr = _attr_values(at, "nodes_values")
    miss = list(at.get("nodes_missing_value_tracks_true", [])) or [0] * nn
    tch, fch = np.arange(nn), np.arange(nn)
    trues, falses = at.get("nodes_truenodeids", []), at.get("nodes_falsenodeids", [])
    for k in range(nn):
        if modes[k] >= 0:
            try:
                tch[k], fch[k] = key[(tids[k], trues[k])], key[(tids[k], falses[k])]
            except (KeyError, IndexError):
                raise Unlowerable(n, f"node {k} points at a missing child") from None
    leaves = [[] for _ in range(nn)]
    for t, i, c, w in zip(at.get(prefix + "_treeids", []), at.get(prefix + "_nodeids", []),
                          at.get(prefix + "_ids", []), _attr_values(at, prefix + "_weights")):
        if (t, i) not in key:
            raise Unlowerable(n, f"leaf weight for a missing node ({t}, {i})")
        leaves[key[(t, i)]].append((c, w))
    children = set(tch[np.array(modes) >= 0]) | set(fch[np.array(modes) >= 0])
    roots, seen = [], set()
    for k, t in enumerate(tids):
        if t not in seen and k not in children:
            seen.add(t)
            roots.append(k)
    lstart, tg, w = _csr(leaves, nn)
    thr = thr if len(thr) == nn else np.zeros(nn)
    mode, thr = _lt_as_leq(n, [max(m, 0) for m in modes], thr)
    feats = [f if m >= 0 else 0 for f, m in zip(feats, modes)]
    return Flat(feats, thr, tch, fch, mode, miss, roots, lstart, tg, w)


def flatten_v5(n: Node) -> Flat:
    """TreeEnsemble (ai.onnx.ml 5) attributes -> :class:`Flat` (leaves become nodes after the
    interior nodes)."""
    at = n.attrs
    feats = list(at["nodes_featureids"])
    ni = len(feats)
    thr = _attr_values(at, "nodes_splits")
    mode = np.asarray(at.get("nodes_modes", np.zeros(ni)), np.int64).reshape(-1)
    miss = list(at.get("nodes_missing_value_tracks_true", [])) or [0] * ni
    lt = list(at["leaf_targetids"])
    lw = _attr_values(at, "leaf_weights")
    nl = len(lt)
    if len(thr) != ni or len(mode) != ni or np.any((mode < 0) | (mode > 6)):
        raise Unlowerable(n, "nodes_splits / nodes_modes do not match the nodes")

    def child(ids, leafs):
        return [int(c) + (ni if lf else 0) for c, lf in zip(ids, leafs)]
    tch = child(at["nodes_truenodeids"], at["nodes_trueleafs"]) + list(range(ni, ni + nl))
    fch = child(at["nodes_falsenodeids"], at["nodes_falseleafs"]) + list(range(ni, ni + nl))
    mem = _attr_values(at, "membership_values")
    mstart = np.zeros(ni + nl + 1, np.int64)
    members: list = []
    sets = np.split(mem, np.flatnonzero(np.isnan(mem))) if len(mem) else []
    sets = [s[~np.isnan(s)] for s in sets]
    k = 0
    for i in range(ni):
        if mode[i] == 6:
            if k >= len(sets):
                raise Unlowerable(n, "fewer membership sets than MEMBER nodes")
            members.extend(sets[k])
            k += 1
        mstart[i + 1] = len(members)
    mstart[ni + 1:] = len(members)
    leaves = [[] for _ in range(ni)] + [[(t, w)] for t, w in zip(lt, lw)]
    lstart, tg, w = _csr(leaves, ni + nl)
    roots = [int(r) for r in at["tree_roots"]]
    mode, thr = _lt_as_leq(n, mode, thr)
    return Flat(feats + [0] * nl, np.concatenate([thr, np.zeros(nl)]), tch, fch,
                list(mode) + [0] * nl, miss + [0] * nl, roots, lstart, tg, w, mstart,
                members or [0.0])
