"""Tree-ensemble kernels (ai.onnx.ml TreeEnsembleClassifier / Regressor, TreeEnsemble v5).

An ensemble arrives flattened (``jitort.codegen.tree_tables.flatten_*``): one node array over
all trees, each node with a feature, a threshold, a true and a false child (global indices),
and a leaf's children point at itself, so a walk of ``depth[t]`` steps from ``roots[t]`` ends
on tree t's leaf whatever the path. The walk is branch-free and its steps are independent
across rows (or trees), so the inner loop keeps many loads in flight instead of chasing one
pointer at a time:

* rows-major (``walk_rows``): per block of rows, per tree, per depth step, over the block's
  rows -- the tree's nodes stay in cache across the block;
* trees-major (``walk_trees``): per row, per depth step, over all trees (lockstep up to the
  deepest tree) -- for a handful of rows, where a row block would be too short to overlap;
  ``walk_trees_packed`` the same over a packed node table (one cache line per step), eight
  trees at a time in registers, where every node is BRANCH_LEQ and leaves hold one weight;
* complete trees (``walk_complete``): shallow trees of one weight per leaf and one target per
  tree (gradient boosting's) padded to complete binary trees, children found by index
  arithmetic (``2i + 1``, ``2i + 2``) instead of loads.

The walks index with unsigned integers (node ids, row and feature numbers): Numba adds a
negative-index wraparound check to every signed index, and on these dependent loads those
checks cost more than the loads themselves.

Leaves add their weights into ``acc`` (rows, targets) of the threshold dtype, tree by tree in
order, as onnxruntime's single-threaded evaluation; ``has`` marks targets some leaf scored
(onnxruntime's ``has_score``, which the classifier's finalization reads).

Comparison modes (``mode``): 0 BRANCH_LEQ, 1 LT, 2 GTE, 3 GT, 4 EQ, 5 NEQ, 6 MEMBER (v5: the
value is in the node's set ``members[mstart[i]:mstart[i + 1]]``); ``miss[i]`` sends NaN to the
true child. ``leq`` picks the step: 0 the general comparison (``_go_true``); when every node is
BRANCH_LEQ, 1 the plain ``v <= t`` (no missing tracking) or 2 the same with a NaN ``v`` replaced
by ``nanv[i]`` (-inf where ``miss[i]``, so it goes true; NaN elsewhere, so it goes false; the
flattening keeps NaN thresholds off this step), as HistGradientBoosting's trees -- both a
select, no branch per node.
"""

import math

import numpy as np
from numba import njit, prange, types
from numba.extending import intrinsic

_ROW_BLOCK = 128
#: the packed table's feature column: this bit set where a NaN feature goes true
_MISS_BIT = np.uint32(0x80000000)
_FEAT_MASK = np.uint32(0x7FFFFFFF)


@intrinsic
def _float_bits(typingctx, v):
    """The float whose bits are ``v``'s: int32 -> float32, int64 -> float64."""
    ft = {types.int32: types.float32, types.int64: types.float64}.get(v)
    if ft is None:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], context.get_value_type(ft))
    return ft(v), codegen


@njit(cache=True, inline='always')
def _go_true(v, t, m, ms, i, mstart, members):
    if ms != 0 and v != v:
        return True
    if m == 0:
        return v <= t
    if m == 1:
        return v < t
    if m == 2:
        return v >= t
    if m == 3:
        return v > t
    if m == 4:
        return v == t
    if m == 5:
        return v != t
    for k in range(mstart[i], mstart[i + 1]):
        if members[k] == v:
            return True
    return False


@njit(cache=True, inline='always')
def _add_leaf(acc, has, r, leaf, lstart, ltarget, lweight, agg):
    for k in range(lstart[leaf], lstart[leaf + 1]):
        j = ltarget[k]
        w = lweight[k]
        if agg <= 1 or has[r, j] == 0:  # 0 SUM, 1 AVERAGE: add; 2 MIN, 3 MAX: first score
            acc[r, j] = acc[r, j] + w if agg <= 1 else w
        elif agg == 2:
            if w < acc[r, j]:
                acc[r, j] = w
        elif w > acc[r, j]:
            acc[r, j] = w
        has[r, j] = 1


@njit(cache=True)
def _one_weight_sum(tch, lstart, agg):
    """Whether leaves add plainly (SUM or AVERAGE) and each leaf (a node that is its own true
    child) holds exactly one weight, as gradient boosting's: the rows-major walk then adds
    ``lweight[lstart[leaf]]`` without ``_add_leaf``'s loop and aggregate tests."""
    if agg > 1:
        return False
    for i in range(tch.shape[0]):
        if tch[i] == i and lstart[i + 1] - lstart[i] != 1:
            return False
    return True


@njit(cache=True, error_model='numpy')
def _rows_block(x, r0, r1, feat, thr, tch, fch, mode, miss, nanv, mstart, members, roots, depth,
                lstart, ltarget, lweight, agg, leq, one, acc, has, idx):
    nb = r1 - r0
    for t in range(roots.shape[0]):
        root = np.uint32(roots[t])
        for r in range(nb):
            idx[r] = root
        if leq == 1:
            for _ in range(depth[t]):
                for r in range(nb):
                    nd = idx[r]
                    v = x[np.uintp(r0 + r), np.uintp(feat[nd])]
                    idx[r] = np.uint32(tch[nd]) if v <= thr[nd] else np.uint32(fch[nd])
        elif leq == 2:
            for _ in range(depth[t]):
                for r in range(nb):
                    nd = idx[r]
                    v = x[np.uintp(r0 + r), np.uintp(feat[nd])]
                    w = v if v == v else nanv[nd]
                    idx[r] = np.uint32(tch[nd]) if w <= thr[nd] else np.uint32(fch[nd])
        else:
            for _ in range(depth[t]):
                for r in range(nb):
                    nd = idx[r]
                    ok = _go_true(x[np.uintp(r0 + r), np.uintp(feat[nd])], thr[nd], mode[nd],
                                  miss[nd], nd, mstart, members)
                    idx[r] = np.uint32(tch[nd]) if ok else np.uint32(fch[nd])
        if one:
            for r in range(nb):
                k = lstart[idx[r]]
                acc[r0 + r, ltarget[k]] += lweight[k]
                has[r0 + r, ltarget[k]] = 1
        else:
            for r in range(nb):
                _add_leaf(acc, has, r0 + r, idx[r], lstart, ltarget, lweight, agg)


@njit(cache=True, error_model='numpy')
def walk_rows(x, feat, thr, tch, fch, mode, miss, nanv, mstart, members, roots, depth, lstart,
              ltarget, lweight, agg, leq, acc, has):
    """Rows-major walk, one thread (see the module docstring)."""
    n = x.shape[0]
    one = _one_weight_sum(tch, lstart, agg)
    idx = np.empty(_ROW_BLOCK, np.uint32)
    for r0 in range(0, n, _ROW_BLOCK):
        _rows_block(x, r0, min(n, r0 + _ROW_BLOCK), feat, thr, tch, fch, mode, miss, nanv, mstart,
                    members, roots, depth, lstart, ltarget, lweight, agg, leq, one, acc, has,
                    idx)


@njit(cache=True, parallel=True, error_model='numpy')
def walk_rows_par(x, feat, thr, tch, fch, mode, miss, nanv, mstart, members, roots, depth, lstart,
                  ltarget, lweight, agg, leq, acc, has):
    """Rows-major walk, row blocks split over the threads."""
    n = x.shape[0]
    one = _one_weight_sum(tch, lstart, agg)
    nblk = (n + _ROW_BLOCK - 1) // _ROW_BLOCK
    for b in prange(nblk):
        idx = np.empty(_ROW_BLOCK, np.uint32)
        r0 = b * _ROW_BLOCK
        _rows_block(x, r0, min(n, r0 + _ROW_BLOCK), feat, thr, tch, fch, mode, miss, nanv, mstart,
                    members, roots, depth, lstart, ltarget, lweight, agg, leq, one, acc, has,
                    idx)


@njit(cache=True, error_model='numpy')
def walk_trees(x, feat, thr, tch, fch, mode, miss, nanv, mstart, members, roots, depth, order,
               lstart, ltarget, lweight, agg, leq, acc, has):
    """Trees-major walk: each row walks every tree in lockstep (see the module docstring), the
    trees taken deepest first (``order``: tree numbers by decreasing depth), so step ``s`` walks
    only the trees deeper than ``s``; leaves are still added in tree order."""
    nt = roots.shape[0]
    dmax = depth[order[0]] if nt else 0
    idx = np.empty(nt, np.uint32)
    leaf = np.empty(nt, np.uint32)
    for r in range(x.shape[0]):
        xr = x[r]
        for k in range(nt):
            idx[k] = np.uint32(roots[order[k]])
        act = nt
        for s in range(dmax):
            while depth[order[act - 1]] <= s:
                act -= 1
            if leq == 1:
                for k in range(act):
                    nd = idx[k]
                    v = xr[np.uintp(feat[nd])]
                    idx[k] = np.uint32(tch[nd]) if v <= thr[nd] else np.uint32(fch[nd])
            elif leq == 2:
                for k in range(act):
                    nd = idx[k]
                    v = xr[np.uintp(feat[nd])]
                    w = v if v == v else nanv[nd]
                    idx[k] = np.uint32(tch[nd]) if w <= thr[nd] else np.uint32(fch[nd])
            else:
                for k in range(act):
                    nd = idx[k]
                    ok = _go_true(xr[np.uintp(feat[nd])], thr[nd], mode[nd], miss[nd], nd,
                                  mstart, members)
                    idx[k] = np.uint32(tch[nd]) if ok else np.uint32(fch[nd])
        for k in range(nt):
            leaf[order[k]] = idx[k]
        for t in range(nt):
            _add_leaf(acc, has, r, leaf[t], lstart, ltarget, lweight, agg)


@njit(cache=True, inline='always')
def _packed_step(xr, pk, nd):
    """One step of the packed walk from the node at ``pk[nd:nd + 4]``: the next node's offset."""
    fm = np.uint32(pk[nd])
    v = xr[np.uintp(fm & _FEAT_MASK)]
    go = (v <= _float_bits(pk[nd + np.uintp(1)])) | ((v != v) & (fm >= _MISS_BIT))
    return np.uintp(4) * np.uintp(pk[nd + np.uintp(2)] if go else pk[nd + np.uintp(3)])


@njit(cache=True, error_model='numpy')
def walk_trees_packed(x, pk, roots, depth, order, acc, has):
    """Trees-major over the packed node table (``jitort.codegen.tree_tables.packed_nodes``,
    flat: node ``i`` at ``pk[4i:4i + 4]``): a node's feature (``_MISS_BIT`` set where a NaN
    feature goes true), threshold bits and two children together, so a step touches one cache
    line; a leaf holds its one weight's target and weight bits and loops on itself. Every node
    BRANCH_LEQ, leaves adding up. Eight trees at a time (deepest first, ``order``), each
    position in a register, walked to the group's deepest tree (a group of fewer trees repeats
    its last); leaves are added in tree order."""
    nt = roots.shape[0]
    leaf = np.empty(nt, np.uintp)
    q = np.uintp(4)
    last = nt - 1
    for r in range(x.shape[0]):
        xr = x[r]
        for g in range(0, nt, 8):
            t0, t1, t2, t3 = order[g], order[min(g + 1, last)], order[min(g + 2, last)], order[
                min(g + 3, last)]
            t4, t5, t6, t7 = order[min(g + 4, last)], order[min(g + 5, last)], order[
                min(g + 6, last)], order[min(g + 7, last)]
            n0, n1, n2, n3 = q * np.uintp(roots[t0]), q * np.uintp(roots[t1]), q * np.uintp(
                roots[t2]), q * np.uintp(roots[t3])
            n4, n5, n6, n7 = q * np.uintp(roots[t4]), q * np.uintp(roots[t5]), q * np.uintp(
                roots[t6]), q * np.uintp(roots[t7])
            for _ in range(depth[t0]):
                n0 = _packed_step(xr, pk, n0)
                n1 = _packed_step(xr, pk, n1)
                n2 = _packed_step(xr, pk, n2)
                n3 = _packed_step(xr, pk, n3)
                n4 = _packed_step(xr, pk, n4)
                n5 = _packed_step(xr, pk, n5)
                n6 = _packed_step(xr, pk, n6)
                n7 = _packed_step(xr, pk, n7)
            leaf[t0], leaf[t1], leaf[t2], leaf[t3] = n0, n1, n2, n3
            leaf[t4], leaf[t5], leaf[t6], leaf[t7] = n4, n5, n6, n7
        for t in range(nt):
            nd = leaf[t]
            j = np.uintp(pk[nd])
            acc[r, j] += _float_bits(pk[nd + np.uintp(1)])
            has[r, j] = 1


@njit(cache=True, error_model='numpy')
def walk(x, feat, thr, tch, fch, mode, miss, nanv, mstart, members, roots, depth, order, lstart,
         ltarget, lweight, agg, leq, acc, has, trees_below, par, pk, packed):
    """Zero ``acc`` / ``has`` and add every tree's leaf: trees-major below ``trees_below`` rows
    (a tunable default, see jitort/tuning_choices.py; over the packed table ``pk`` where
    ``packed``), else rows-major (``par``: over the threads)."""
    acc[:] = 0
    has[:] = 0
    if x.shape[0] < trees_below and packed:
        walk_trees_packed(x, pk, roots, depth, order, acc, has)
    elif x.shape[0] < trees_below:
        walk_trees(x, feat, thr, tch, fch, mode, miss, nanv, mstart, members, roots, depth, order,
                   lstart, ltarget, lweight, agg, leq, acc, has)
    elif par:
        walk_rows_par(x, feat, thr, tch, fch, mode, miss, nanv, mstart, members, roots, depth,
                      lstart, ltarget, lweight, agg, leq, acc, has)
    else:
        walk_rows(x, feat, thr, tch, fch, mode, miss, nanv, mstart, members, roots, depth, lstart,
                  ltarget, lweight, agg, leq, acc, has)


@njit(cache=True, error_model='numpy')
def _complete_block(x, r0, r1, cfeat, cthr, cnanv, cleaf, ctarget, dmax, leq, acc, has, idx):
    nb = r1 - r0
    ni = np.uint32((1 << dmax) - 1)
    for t in range(cfeat.shape[0]):
        ut = np.uintp(t)
        for r in range(nb):
            idx[r] = 0
        if leq == 2:
            for _ in range(dmax):
                for r in range(nb):
                    i = idx[r]
                    v = x[np.uintp(r0 + r), np.uintp(cfeat[ut, np.uintp(i)])]
                    w = v if v == v else cnanv[ut, np.uintp(i)]
                    idx[r] = np.uint32(2) * i + np.uint32(1) + np.uint32(
                        not w <= cthr[ut, np.uintp(i)])
        else:
            for _ in range(dmax):
                for r in range(nb):
                    i = idx[r]
                    v = x[np.uintp(r0 + r), np.uintp(cfeat[ut, np.uintp(i)])]
                    idx[r] = np.uint32(2) * i + np.uint32(1) + np.uint32(
                        not v <= cthr[ut, np.uintp(i)])
        j = np.uintp(ctarget[ut])
        for r in range(nb):
            acc[np.uintp(r0 + r), j] += cleaf[ut, np.uintp(idx[r] - ni)]


@njit(cache=True, inline='always', error_model='numpy')
def _cstep(x, ur, cfeat, cthr, cnanv, u, i):
    """Tree ``u``'s next position after ``i`` for row ``ur`` in the complete layout; a NaN
    feature compares as the node's ``cnanv`` (NaN itself where no missing value is tracked,
    so one branch-free step serves ``leq`` 1 and 2)."""
    v = x[ur, np.uintp(cfeat[u, i])]
    w = v if v == v else cnanv[u, i]
    return np.uintp(2) * i + np.uintp(1) + np.uintp(not w <= cthr[u, i])


@njit(cache=True, error_model='numpy')
def _complete_rows(x, cfeat, cthr, cnanv, cleaf, ctarget, dmax, acc):
    """Row by row, the position in a register, four trees in lockstep (four independent
    chains of loads per step for the core to overlap), leaves added in tree order."""
    ni = np.uintp((1 << dmax) - 1)
    nt = cfeat.shape[0]
    head = nt - nt % 4
    for r in range(x.shape[0]):
        ur = np.uintp(r)
        for t0 in range(0, head, 4):
            u0, u1 = np.uintp(t0), np.uintp(t0 + 1)
            u2, u3 = np.uintp(t0 + 2), np.uintp(t0 + 3)
            i0 = i1 = i2 = i3 = np.uintp(0)
            for _ in range(dmax):
                i0 = _cstep(x, ur, cfeat, cthr, cnanv, u0, i0)
                i1 = _cstep(x, ur, cfeat, cthr, cnanv, u1, i1)
                i2 = _cstep(x, ur, cfeat, cthr, cnanv, u2, i2)
                i3 = _cstep(x, ur, cfeat, cthr, cnanv, u3, i3)
            acc[ur, np.uintp(ctarget[u0])] += cleaf[u0, i0 - ni]
            acc[ur, np.uintp(ctarget[u1])] += cleaf[u1, i1 - ni]
            acc[ur, np.uintp(ctarget[u2])] += cleaf[u2, i2 - ni]
            acc[ur, np.uintp(ctarget[u3])] += cleaf[u3, i3 - ni]
        for t in range(head, nt):
            ut = np.uintp(t)
            i = np.uintp(0)
            for _ in range(dmax):
                i = _cstep(x, ur, cfeat, cthr, cnanv, ut, i)
            acc[ur, np.uintp(ctarget[ut])] += cleaf[ut, i - ni]


@njit(cache=True, error_model='numpy')
def walk_complete(x, cfeat, cthr, cnanv, cleaf, ctarget, dmax, leq, acc, has, rows_below, par):
    """Zero ``acc`` / ``has`` and add every tree's leaf, the trees in the complete layout
    (``jitort.codegen.tree_tables.Complete``): node ``i``'s children are ``2i + 1`` (true) and
    ``2i + 2`` (false), every tree padded to ``dmax`` levels, so a walk is ``dmax`` steps of
    index arithmetic with no child loads; tree ``t``'s leaves all score target ``ctarget[t]``. Below ``rows_below`` rows row by row
    (``_complete_rows``), else rows-major by blocks of rows (``par``: the blocks over the
    threads). ``leq`` as the module docstring's (1 or 2)."""
    acc[:] = 0
    has[:] = 0
    for t in range(ctarget.shape[0]):  # every row reaches a leaf of every tree
        has[:, ctarget[t]] = 1
    n = x.shape[0]
    if n < rows_below:
        _complete_rows(x, cfeat, cthr, cnanv, cleaf, ctarget, dmax, acc)
    elif par:
        _complete_par(x, cfeat, cthr, cnanv, cleaf, ctarget, dmax, leq, acc, has)
    else:
        idx = np.empty(_ROW_BLOCK, np.uint32)
        for r0 in range(0, n, _ROW_BLOCK):
            _complete_block(x, r0, min(n, r0 + _ROW_BLOCK), cfeat, cthr, cnanv, cleaf, ctarget,
                            dmax, leq, acc, has, idx)


@njit(cache=True, parallel=True, error_model='numpy')
def _complete_par(x, cfeat, cthr, cnanv, cleaf, ctarget, dmax, leq, acc, has):
    n = x.shape[0]
    for b in prange((n + _ROW_BLOCK - 1) // _ROW_BLOCK):
        idx = np.empty(_ROW_BLOCK, np.uint32)
        r0 = b * _ROW_BLOCK
        _complete_block(x, r0, min(n, r0 + _ROW_BLOCK), cfeat, cthr, cnanv, cleaf, ctarget, dmax,
                        leq, acc, has, idx)


# --------------------------------------------------------------------------------------------
# post transforms (onnxruntime's ml_common.h formulas)
# --------------------------------------------------------------------------------------------
@njit(cache=True, inline='always')
def _logistic(v):
    e = 1.0 / (1.0 + math.exp(-abs(v)))
    return 1.0 - e if v < 0 else e


@njit(cache=True, inline='always')
def _probit(v):
    # onnxruntime's ErfInv: Winitzki's approximation (a = 0.147) in float32
    x = np.float32(2.0) * np.float32(v) - np.float32(1.0)
    sgn = np.float32(-1.0) if x < 0 else np.float32(1.0)
    x = (np.float32(1.0) - x) * (np.float32(1.0) + x)
    lg = np.float32(math.log(x))
    a = np.float32(2.0) / (np.float32(3.14159) * np.float32(0.147)) + np.float32(0.5) * lg
    b = np.float32(1.0) / np.float32(0.147) * lg
    c = -a + np.float32(math.sqrt(a * a - b))
    return np.float32(1.41421356) * sgn * np.float32(math.sqrt(c))


@njit(cache=True, error_model='numpy')
def transform_row(s, n, post):
    """Apply post_transform ``post`` (0 NONE, 1 SOFTMAX, 2 LOGISTIC, 3 SOFTMAX_ZERO, 4 PROBIT)
    in place to ``s[:n]`` (float64)."""
    if post == 2:
        for j in range(n):
            s[j] = _logistic(s[j])
    elif post == 4:
        for j in range(n):
            s[j] = _probit(s[j])
    elif post == 1 or post == 3:
        m = s[0]
        for j in range(1, n):
            m = max(m, s[j])
        tot = 0.0
        for j in range(n):
            if post == 1 or s[j] > 1e-7 or s[j] < -1e-7:
                s[j] = math.exp(s[j] - m)
            else:
                s[j] = s[j] * math.exp(-m)
            tot += s[j]
        for j in range(n):
            s[j] = s[j] / tot


@njit(cache=True, error_model='numpy')
def finish_regressor(acc, has, base, agg, post, ntrees, y):
    """Regressor outputs (onnxruntime's TreeAggregator* FinalizeScores): the aggregate (AVERAGE
    divides by the tree count), base_values when there is one per target (or the one of a
    single target), then the post transform -- only PROBIT for a single target."""
    n, nt = acc.shape
    usebase = base.shape[0] == nt
    s = np.empty(nt, np.float64)
    for r in range(n):
        for j in range(nt):
            v = acc[r, j] if has[r, j] != 0 or agg <= 1 else acc.dtype.type(0)
            if agg == 1:
                v = v / acc.dtype.type(ntrees)
            if usebase:
                v = v + acc.dtype.type(base[j])
            s[j] = v
        if nt >= 2:
            transform_row(s, nt, post)
        elif post == 4:
            s[0] = _probit(s[0])
        for j in range(nt):
            y[r, j] = s[j]


@njit(cache=True, error_model='numpy')
def finish_classifier(acc, has, base, post, labels, binary, allpos, z, y):
    """Classifier outputs, onnxruntime's TreeAggregatorClassifier::FinalizeScores: labels by the
    first strictly greatest scored class (more than two classes) or the binary rules, scores
    through the post transform (one-column binary scores widened by ``add_second_class``:
    ``[1 - s, s]`` for positive weights, ``[-s, s]`` for mixed ones, the logistic of both
    under LOGISTIC, as onnxruntime 1.32 writes them)."""
    n, nc = acc.shape
    nb = base.shape[0]
    s = np.empty(nc, np.float64)
    one = acc.dtype.type(1)
    for r in range(n):
        if nc > 2:
            best = -1
            bw = acc.dtype.type(0)
            for j in range(nc):
                v = acc[r, j]
                h = has[r, j]
                if j < nb:
                    v = v + acc.dtype.type(base[j])
                    h = 1
                if h != 0 and (best == -1 or v > bw):
                    best = j
                    bw = v
                s[j] = v
            y[r] = labels[max(best, 0)]
            transform_row(s, nc, post)
            for j in range(nc):
                z[r, j] = s[j]
            continue
        s0, s1 = acc[r, 0], acc[r, 1]
        h0, h1 = has[r, 0], has[r, 1]
        wadd = -1
        size = 2
        if nb == 2:
            if h1 != 0:
                s1 = acc.dtype.type(base[1]) + s0
                s0 = -s1
            else:
                s1 = s1 + acc.dtype.type(base[1])
                s0 = s0 + acc.dtype.type(base[0])
        elif nb == 1:
            s0 = s0 + acc.dtype.type(base[0])
            if h1 == 0:
                size = 1
        else:
            wadd = 3
            if h1 == 0:
                size = 1
        pos = s1 if (size == 2 and h1 != 0) else (s0 if h0 != 0 else acc.dtype.type(0))
        if binary:
            if allpos:
                if pos > 0.5:
                    wadd, y[r] = 0, labels[1]
                else:
                    wadd, y[r] = 1, labels[0]
            else:
                if pos > 0:
                    wadd, y[r] = 2, labels[1]
                else:
                    wadd, y[r] = 3, labels[0]
        else:
            y[r] = 1 if pos > 0 else 0
        # onnxruntime writes a class no leaf scored as 0 (its ScoreValue's float conversion),
        # whatever base value was added to it
        s0 = s0 if h0 != 0 else acc.dtype.type(0)
        if size == 2:
            s[0], s[1] = s0, (s1 if h1 != 0 else acc.dtype.type(0))
            transform_row(s, 2, post)
            z[r, 0], z[r, 1] = s[0], s[1]
        elif post == 4:
            z[r, 0] = _probit(s0)
            z[r, 1] = 0
        elif (wadd == 0 or wadd == 1) and post != 2:
            z[r, 0], z[r, 1] = one - s0, s0
        elif wadd >= 0:
            if post == 2:
                z[r, 0], z[r, 1] = _logistic(-s0), _logistic(s0)
            else:
                z[r, 0], z[r, 1] = -s0, s0
        else:
            z[r, 0], z[r, 1] = s0, 0
