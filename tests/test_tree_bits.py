"""The bitvector walk of tree ensembles (jitort.kernels.cpu.tree_bits, tables
jitort.codegen.tree_tables.Bitvectors): its tables on a hand-made tree, the kernel against the
node walk (trees.walk_rows) on random ensembles with every kind of value, threshold and
missing-value tracking, and models through the lowering against onnxruntime."""
import numpy as np
import pytest

from jitort import tuning
from jitort.codegen.tree_tables import BITVECTOR_LEAVES, Bitvectors, Flat, fits_bitvectors
from jitort.kernels.cpu.tree_bits import walk_bits
from jitort.kernels.cpu.trees import walk_rows
from tests.test_ml_ops import _MODELS, _check, _kernel_names
from tests.test_tree_walk import _flat, _regressor

pytest.importorskip("sklearn")


def _tables(bv):
    return (bv.fstart, bv.nthr, bv.ntree, bv.nmask, bv.nanstart, bv.nantree, bv.nanmask,
            bv.lv0, bv.leafw, bv.leaft)


def test_tables_of_a_small_tree():
    """Root (feature 0 <= 0.5): true -> node 1 (feature 1 <= -1: leaves A, B), false -> leaf
    C; leaves numbered A 0, B 1, C 2. A false root removes A and B, a false node 1 removes
    A; per feature the nodes in threshold order; a NaN goes false on the untracked root."""
    flat = Flat(feat=[0, 1, 0, 0, 0], thr=[0.5, -1.0, 0, 0, 0], tch=[1, 3, 2, 3, 4],
                fch=[2, 4, 2, 3, 4], mode=[0] * 5, miss=[0, 1, 0, 0, 0], roots=[0],
                lstart=[0, 0, 0, 1, 2, 3], ltarget=[0, 0, 0], lweight=[3.0, 1.0, 2.0])
    assert flat.leq == 2 and fits_bitvectors(flat) and list(flat.leaves) == [3]
    bv = Bitvectors(flat, np.float32, 2)
    full = 0xFFFFFFFFFFFFFFFF
    assert list(bv.fstart) == [0, 1, 2] and list(bv.nthr) == [0.5, -1.0]
    assert [int(m) for m in bv.nmask] == [full ^ 0b011, full ^ 0b001]
    assert list(bv.nanstart) == [0, 1, 1] and [int(m) for m in bv.nanmask] == [full ^ 0b011]
    assert list(bv.leafw[0, :3]) == [1.0, 2.0, 3.0] and int(bv.lv0[0]) == full
    x = np.array([[0.0, -2.0], [0.0, 0.0], [1.0, -2.0], [np.nan, -2.0], [0.0, np.nan]],
                 np.float32)
    acc, has = np.zeros((5, 1), np.float32), np.zeros((5, 1), np.uint8)
    walk_bits(x, *_tables(bv), acc, has, 0)
    assert list(acc[:, 0]) == [1.0, 2.0, 3.0, 3.0, 1.0] and has.all()


def _random_ensemble(rng, trees, features, missing, nan_thresholds):
    """A Flat of ``trees`` random trees (up to 40 leaves each) whose thresholds repeat
    (0.25 steps), some NaN where ``nan_thresholds`` (the plain step's NaN threshold: always
    false), missing values tracked on some nodes where ``missing``; one weight per leaf on
    a random one of 3 targets."""
    feat, thr, tch, fch, miss, roots, lstart, ltarget, lweight = ([] for _ in range(9))
    for _ in range(trees):
        base = len(feat)
        roots.append(base)
        kids, leaves = {}, [base]
        feat.append(0)
        for _ in range(int(rng.integers(0, 40))):
            i = leaves.pop(int(rng.integers(len(leaves))))
            kids[i] = (len(feat), len(feat) + 1)
            feat.extend([0, 0])
            leaves += [len(feat) - 2, len(feat) - 1]
        for i in range(base, len(feat)):
            if i in kids:
                feat[i] = int(rng.integers(features))
                t = float(rng.integers(-8, 8)) / 4
                thr.append(np.nan if nan_thresholds and rng.random() < 0.1 else t)
                tch.append(kids[i][0])
                fch.append(kids[i][1])
                miss.append(int(missing and rng.random() < 0.5))
            else:
                thr.append(0.0)
                tch.append(i)
                fch.append(i)
                miss.append(0)
    for i in range(len(feat)):
        lstart.append(len(ltarget))
        if tch[i] == i:
            ltarget.append(int(rng.integers(3)))
            lweight.append(float(rng.standard_normal()))
    lstart.append(len(ltarget))
    return Flat(feat, thr, tch, fch, [0] * len(feat), miss, roots, lstart, ltarget, lweight)


def _values(rng, rows, features):
    """Values on and between the thresholds' 0.25 grid, NaN, -inf and +inf."""
    x = (rng.integers(-10, 10, (rows, features)) / 4).astype(np.float32)
    x[rng.random((rows, features)) < 0.3] += np.float32(0.1)
    x[rng.random((rows, features)) < 0.05] = np.nan
    x[rng.random((rows, features)) < 0.02] = -np.inf
    x[rng.random((rows, features)) < 0.02] = np.inf
    return x


@pytest.mark.parametrize("missing,nan_thresholds", [(False, False), (True, False),
                                                    (False, True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bitvector_walk_equals_the_node_walk(missing, nan_thresholds, dtype):
    """Exactly the node walk's sums (tree by tree in order) and has-score marks, one thread
    and over the threads' row blocks, on a row count past a block."""
    rng = np.random.default_rng(7)
    flat = _random_ensemble(rng, 30, 5, missing, nan_thresholds)
    assert flat.leq == (2 if missing else 1) and fits_bitvectors(flat)
    x = _values(rng, 203, 5).astype(dtype)
    want_acc, want_has = np.zeros((203, 3), dtype), np.zeros((203, 3), np.uint8)
    walk_rows(x, flat.feat, flat.thr.astype(dtype), flat.tch, flat.fch, flat.mode, flat.miss,
              flat.nanv.astype(dtype), flat.mstart, flat.members.astype(dtype), flat.roots,
              flat.depth, flat.lstart, flat.ltarget, flat.lweight.astype(dtype), 0, flat.leq,
              want_acc, want_has)
    bv = Bitvectors(flat, dtype, 5)
    for par in (0, 1):
        acc, has = np.full((203, 3), 7, dtype), np.full((203, 3), 7, np.uint8)
        walk_bits(x, *_tables(bv), acc, has, par)
        np.testing.assert_array_equal(acc, want_acc)
        np.testing.assert_array_equal(has, want_has)


def test_what_fits_the_bitvectors():
    rng = np.random.default_rng(1)
    flat = _random_ensemble(rng, 5, 3, False, False)
    assert fits_bitvectors(flat)
    # a tree of 65 leaves: past one uint64
    chain = Flat(feat=[0] * 129, thr=[float(i) for i in range(129)],
                 tch=[2 * i + 1 if i < 64 else i for i in range(129)],
                 fch=[2 * i + 2 if i < 64 else i for i in range(129)], mode=[0] * 129,
                 miss=[0] * 129, roots=[0], lstart=[0] * 64 + list(range(66)),
                 ltarget=[0] * 65, lweight=[1.0] * 65)
    assert list(chain.leaves) == [BITVECTOR_LEAVES + 1] and not fits_bitvectors(chain)
    assert not fits_bitvectors(_flat(_MODELS["random_forest3"]()))  # leaves of 3 weights


def _with_nan(rows, features, seed=3):
    x = np.random.default_rng(seed).standard_normal((rows, features)).astype(np.float32)
    x[::3, 2] = np.nan
    x[1::7, 0] = np.inf
    return x


@pytest.mark.parametrize("name", ["histgb_classifier3", "histgb_classifier2",
                                  "histgb_regressor", "gbm_classifier3", "gbm_regressor"])
def test_forced_bitvectors_match_onnxruntime(name):
    """Through the lowering (calibration's trees.bitvector forced): one kernel call for the
    walk, onnxruntime's labels and scores at 1 and many rows, NaN and inf included."""
    model = _MODELS[name]()
    x = _with_nan(50, 6)
    with tuning.force("trees.bitvector", "bitvector"):
        assert "tree_bits.walk_bits" in _kernel_names(model, {"X": x})
        _check(model, {"X": x})
        _check(model, {"X": x[2:3]})


@pytest.mark.parametrize("values,miss,modes", [
    ([0.1, 0, 0, -0.2, 0, 0], (1, 0, 0, 0, 0, 0), ("BRANCH_LEQ", "BRANCH_LEQ")),
    ([0.1, 0, 0, -0.2, 0, 0], (0, 0, 0, 0, 0, 0), ("BRANCH_LT", "BRANCH_LT")),
    ([0.1, 0, 0, -0.2, 0, 0], (1, 0, 0, 0, 0, 0), ("BRANCH_LT", "BRANCH_LEQ")),
])
def test_forced_bitvectors_on_ties_and_missing_values(values, miss, modes):
    """Values equal to, and one float below, a threshold; XGBoost's BRANCH_LT as BRANCH_LEQ."""
    model = _regressor(values, miss, modes)
    x = np.random.default_rng(3).standard_normal((40, 3)).astype(np.float32)
    x[:5, 0], x[5:10, 2], x[10:13, 0], x[13:16, 2] = 0.1, -0.2, np.nan, np.nan
    x[16, 0], x[17, 2], x[18, 0] = -np.inf, np.inf, np.inf
    x[19, 0] = np.nextafter(np.float32(0.1), np.float32(-np.inf))
    with tuning.force("trees.bitvector", "bitvector"):
        assert "tree_bits.walk_bits" in _kernel_names(model, {"X": x})
        _check(model, {"X": x})


def test_ensembles_that_do_not_fit_keep_the_walk():
    model = _MODELS["random_forest3"]()
    x = _with_nan(20, 6)
    with tuning.force("trees.bitvector", "bitvector"):
        names = _kernel_names(model, {"X": x})
        _check(model, {"X": x})
    assert "tree_bits.walk_bits" not in names and "trees.walk" in names
