"""The linear scores' tile kernel (jitort.kernels.cpu.linear_tile): rows transposed in
registers a tile at a time, against numpy's float64 scores, for this host's tile width and
for the narrower ones a host without AVX-512 builds (8 lanes) or that only tests reach (4)."""
import numpy as np
import pytest
from numba import njit

from jitort.kernels.cpu.linear_tile import TW, make_block, scores_tiles

_BLOCKS = {}


def _runner(tw):
    """An njit caller of the tile-width ``tw`` intrinsics: all m rows of x into st."""
    if tw not in _BLOCKS:
        plain, scaled = make_block(False, tw), make_block(True, tw)

        @njit
        def run(x, m, off, scale, wp, b, st):
            ldx = x.shape[1]
            if off.shape[0]:
                scaled(x, 0, ldx, m, ldx, off, scale, wp, wp.shape[1], b, st)
            else:
                plain(x, 0, ldx, m, ldx, off, scale, wp, wp.shape[1], b, st)
        _BLOCKS[tw] = run
    return _BLOCKS[tw]


def _padded(a, f, cols):
    out = np.zeros(a.shape[:-1] + (cols,), np.float32)
    out[..., :f] = a
    return out


def _problem(rows, f, nt, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, f)).astype(np.float32)
    w = rng.standard_normal((nt, f)).astype(np.float32)
    b = rng.standard_normal(nt).astype(np.float32)
    off = rng.standard_normal(f).astype(np.float32)
    scale = rng.uniform(0.5, 2.0, f).astype(np.float32)
    return x, w, b, off, scale


def _want(x, w, b, off=None, scale=None):
    x = x.astype(np.float64)
    if off is not None:
        x = (x - off) * scale
    return (x @ w.T.astype(np.float64) + b).T


@pytest.mark.parametrize("tw", sorted({4, 8, TW}))
@pytest.mark.parametrize("scaled", [False, True])
def test_tiles_match_numpy_over_feature_and_row_counts(tw, scaled):
    """Every split of the features (whole chunks, a wide or narrow last chunk of each width)
    and of the rows (whole tiles, a partial one, fewer rows than a tile)."""
    run = _runner(tw)
    empty = np.zeros(0, np.float32)
    for f in (1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 20, 31, 33, 40):
        cols = -(-f // 16) * 16
        for rows in (1, 3, tw - 1, tw, tw + 1, 3 * tw + 5):
            for nt in (1, 3, 6):
                x, w, b, off, scale = _problem(rows, f, nt, seed=f * 100 + rows + nt)
                st = np.full((nt, -(-rows // tw) * tw), np.nan, np.float32)
                if scaled:
                    run(x, rows, _padded(off, f, cols), _padded(scale, f, cols),
                        _padded(w, f, cols), b, st)
                    want = _want(x, w, b, off, scale)
                else:
                    run(x, rows, empty, empty, _padded(w, f, cols), b, st)
                    want = _want(x, w, b)
                np.testing.assert_allclose(st[:, :rows], want, rtol=1e-4, atol=1e-4,
                                           err_msg=f"f={f} rows={rows} classes={nt}")


@pytest.mark.parametrize("tw", sorted({8, TW}))
def test_rows_do_not_read_their_neighbours(tw):
    """A row's lanes past its last feature are masked, not multiplied by zero weights: an
    infinite or NaN neighbour (the next row's first features, the tile past m) leaves the
    other rows' scores finite."""
    run = _runner(tw)
    f, nt, rows = 20, 3, 2 * tw
    x, w, b, _, _ = _problem(rows + 1, f, nt, seed=7)
    x[1::2] = np.inf
    x[rows] = np.nan                     # past m: never read
    st = np.zeros((nt, rows), np.float32)
    empty = np.zeros(0, np.float32)
    run(x, rows, empty, empty, _padded(w, f, 32), b, st)
    np.testing.assert_allclose(st[:, 0::2], _want(x[0:rows:2], w, b), rtol=1e-4, atol=1e-4)


def test_scores_tiles_reads_rows_from_an_offset():
    """``scores_tiles`` (the kernel ``ml.linear_tiles_f32`` calls per block of rows): rows r0
    .. r0 + m of x, written from st's first column."""
    f, nt = 20, 3
    x, w, b, _, _ = _problem(100, f, nt, seed=11)
    st = np.zeros((nt, 48), np.float32)
    empty = np.zeros(0, np.float32)
    scores_tiles(x, 37, 41, empty, empty, _padded(w, f, 32), b, st)
    np.testing.assert_allclose(st[:, :41], _want(x[37:78], w, b), rtol=1e-4, atol=1e-4)


def test_the_tile_kernel_copies_a_strided_input():
    """``ml.linear_tiles_f32`` on a column-strided view: the scores of its values."""
    from jitort.kernels.cpu.ml import linear_tiles_f32
    f, nt, rows = 20, 3, 37
    big, w, b, _, _ = _problem(rows, 2 * f, nt, seed=13)
    x = big[:, ::2]
    w = w[:, :f]
    empty = np.zeros(0, np.float32)
    z, y = np.zeros((rows, nt), np.float32), np.zeros(1, np.int64)
    linear_tiles_f32(x, empty, empty, _padded(w, f, 32), b, 0, np.zeros(2, np.int64), 0, -1,
                     False, z, y)
    np.testing.assert_allclose(z, _want(x, w, b).T, rtol=1e-4, atol=1e-4)
