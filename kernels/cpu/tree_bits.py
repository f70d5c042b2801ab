"""The bitvector walk of a tree ensemble (after Lucchese et al.'s QuickScorer): no tree is
walked node by node. Every tree keeps the set of its leaves a row can still reach (one
uint64, leaves numbered left to right); for each feature the row's value visits that
feature's nodes in threshold order while the threshold is below the value -- exactly the
nodes whose BRANCH_LEQ test is false -- and each removes the leaves of its true subtree. The
first leaf left in a tree's set is the row's exit leaf. The work per row is one AND per false
node, in a sequential scan with no data-dependent loads between steps, where a walk pays a
chain of dependent loads per level (the tables: ``jitort.codegen.tree_tables.Bitvectors``).

Leaves add their weights into ``acc`` (rows, targets) tree by tree in order, as the walks of
``trees`` do (and onnxruntime's single-threaded evaluation); ``has`` marks targets scored.
"""
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

#: rows per block: a block's exit leaves are found, then added tree by tree across its rows;
#: the threads split the rows by blocks
_BLOCK = 64


@intrinsic
def _first_bit(typingctx, v):
    """The index of the lowest set bit of a uint64 (``llvm.cttz``; 64 for 0)."""
    if v != types.uint64:
        return None

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(i64, [i64, ir.IntType(1)]), "llvm.cttz.i64")
        return builder.call(fn, [args[0], ir.Constant(ir.IntType(1), 0)])
    return types.uint64(v), codegen


@njit(cache=True, error_model='numpy')
def _rows(x, r0, r1, tb, lv, ex, acc, has):
    """Rows r0 .. r1 (at most _BLOCK): each row's exit leaf of every tree into ``ex``
    (trees x _BLOCK), then the leaves' weights added tree by tree across the rows -- a row's
    trees one after another would chain every add through the same ``acc`` element."""
    fstart, nthr, ntree, nmask, nanstart, nantree, nanmask, lv0, leafw, leaft = tb
    nf = fstart.shape[0] - 1
    nt = lv0.shape[0]
    for r in range(r0, r1):
        for t in range(nt):
            lv[t] = lv0[t]
        for f in range(nf):
            v = x[r, f]
            if v != v:
                for k in range(nanstart[f], nanstart[f + 1]):
                    lv[np.uintp(nantree[k])] &= nanmask[k]
                continue
            k, e = np.uintp(fstart[f]), np.uintp(fstart[f + 1])
            while k < e and nthr[k] < v:
                lv[np.uintp(ntree[k])] &= nmask[k]
                k += np.uintp(1)
        for t in range(nt):
            ex[t, r - r0] = np.uint8(_first_bit(lv[t]))
    for t in range(nt):
        for r in range(r0, r1):
            leaf = np.uintp(ex[t, r - r0])
            j = np.uintp(leaft[t, leaf])
            acc[r, j] += leafw[t, leaf]
            has[r, j] = 1


@njit(cache=True, error_model='numpy')
def _scratch(nt):
    """A block's scratch for :func:`_rows`: the leaf sets of ``nt`` trees, their exit leaves."""
    return np.empty(nt, np.uint64), np.empty((nt, _BLOCK), np.uint8)


@njit(cache=True, parallel=True, error_model='numpy')
def _walk_par(x, tb, acc, has):
    n = x.shape[0]
    for b in prange((n + _BLOCK - 1) // _BLOCK):
        lv, ex = _scratch(tb[7].shape[0])
        _rows(x, b * _BLOCK, min(n, (b + 1) * _BLOCK), tb, lv, ex, acc, has)


@njit(cache=True, error_model='numpy')
def walk_bits(x, fstart, nthr, ntree, nmask, nanstart, nantree, nanmask, lv0, leafw, leaft,
              acc, has, par):
    """Zero ``acc`` / ``has`` and add every tree's exit leaf for every row of ``x`` (rows x
    features, the thresholds' dtype) from the bitvector tables (``Bitvectors``: per feature
    ``fstart`` ranges of nodes sorted by threshold ``nthr`` with their tree ``ntree`` and leaf
    mask ``nmask``; ``nanstart`` / ``nantree`` / ``nanmask`` those a NaN value sends false;
    each tree's starting leaf set ``lv0``; leaf weights ``leafw`` and targets ``leaft``,
    trees x 64). ``par``: row blocks over the threads."""
    acc[:] = 0
    has[:] = 0
    tb = (fstart, nthr, ntree, nmask, nanstart, nantree, nanmask, lv0, leafw, leaft)
    if par:
        _walk_par(x, tb, acc, has)
        return
    lv, ex = _scratch(lv0.shape[0])
    for r0 in range(0, x.shape[0], _BLOCK):
        _rows(x, r0, min(x.shape[0], r0 + _BLOCK), tb, lv, ex, acc, has)
