"""jitort's own float32 gemm (kernels/cpu/sgemm.py) against float64 numpy: every tile shape
(rows 1..MR, vectors 1..NV), K-block and M-block edges, transposes, alpha / beta, and the
prepacked entries of gemm.py, serial and split over threads (the same bits either way)."""
import numba
import numpy as np
import pytest
from numba import njit

from jitort.kernels.cpu import gemm as G
from jitort.kernels.cpu import sgemm as S
from jitort.kernels.cpu.ptr import eptr


@njit(cache=True)
def _sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    S.sgemm_ptr(ta, tb, m, n, k, alpha, eptr(a, 0), lda, eptr(b, 0), ldb, beta, eptr(c, 0), ldc)


def _close(got, ref):
    np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-5 * max(1.0, np.abs(ref).max()))


# every (rows mod MR, columns mod NR) edge, one K-block and several, more rows than MC
SHAPES = [(1, 1, 1), (5, 7, 3), (S.MR, S.NR, 16), (S.MR + 1, S.NR + 1, S.KC + 1),
          (2 * S.MR - 1, S.NR - S.VW + 3, 2 * S.KC + 5), (S.MC + 3, 2 * S.NR + S.VW, 40)]


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("beta", [0.0, 1.0, -0.5])
def test_sgemm_ptr_matches_numpy(m, n, k, ta, tb, beta):
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    c = rng.standard_normal((m, n + 5)).astype(np.float32)  # leading dimension n + 5
    if beta == 0.0:
        c[:, :n] = np.nan  # beta == 0 must not read C
    ref = 1.5 * ((a.T if ta else a).astype(np.float64) @ (b.T if tb else b))
    if beta != 0.0:
        ref += beta * c[:, :n]
    pad = c[:, n:].copy()
    _sgemm(ta, tb, m, n, k, 1.5, a, a.shape[1], b, b.shape[1], beta, c, n + 5)
    _close(c[:, :n], ref)
    np.testing.assert_array_equal(c[:, n:], pad)  # nothing written past n


def test_pack_b_layout():
    b = np.arange(3 * (S.NR + 2), dtype=np.float32).reshape(3, S.NR + 2)
    p = S.pack_b(b).reshape(2, 3, S.NR)
    np.testing.assert_array_equal(p[0], b[:, :S.NR])
    np.testing.assert_array_equal(p[1, :, :2], b[:, S.NR:])
    assert not p[1, :, 2:].any()


ACTS = [(0, 0.0, 0.0), (1, 0.0, 0.0), (5, 0.1, 0.0), (6, -0.5, 0.5)]


def _act(v, act, al, be):
    return {0: v, 1: np.maximum(v, 0), 5: np.where(v < 0, al * v, v),
            6: np.clip(v, al, be)}[act]


@pytest.mark.parametrize("m,k,n", [(1, 5, 7), (1, 300, 3 * S.NR + 9), (3, 300, 70),
                                   (S.MR * 3 + 1, 64, 3 * S.NR + 1),
                                   (130, 256, 1024)])
@pytest.mark.parametrize("act,al,be", ACTS)
@pytest.mark.parametrize("threads", [1, 2])
def test_matmul_packed(m, k, n, act, al, be, threads):
    rng = np.random.default_rng(m + k + n)
    a = rng.standard_normal((1, m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    out = np.full((1, m, n), np.nan, np.float32)
    old = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        G.matmul_packed(a, S.pack_b(b), bias, out, act, al, be)
        _close(out[0], _act(a[0].astype(np.float64) @ b + bias, act, al, be))
        plain = np.full((1, m, n), np.nan, np.float32)
        G.matmul_packed(a, S.pack_b(b), np.zeros(0, np.float32), plain, 0, 0.0, 0.0)
        _close(plain[0], a[0].astype(np.float64) @ b)
    finally:
        numba.set_num_threads(old)


def test_packed_results_do_not_depend_on_the_thread_count():
    """Each output element sums its K products in one order whatever the split."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((1, 96, 700)).astype(np.float32)
    bp = S.pack_b(rng.standard_normal((700, 300)).astype(np.float32))
    outs = []
    old = numba.get_num_threads()
    try:
        for t in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(t)
            o = np.empty((1, 96, 300), np.float32)
            G.matmul_packed(a, bp, np.zeros(0, np.float32), o, 0, 0.0, 0.0)
            outs.append(o)
    finally:
        numba.set_num_threads(old)
    np.testing.assert_array_equal(outs[0], outs[-1])


@pytest.mark.parametrize("ta", [0, 1])
@pytest.mark.parametrize("cshape", [(1, 1), (1, 70), (9, 1), (9, 70)])
@pytest.mark.parametrize("has_c", [True, False])
def test_gemm_packed(ta, cshape, has_c):
    rng = np.random.default_rng(11)
    a = rng.standard_normal((33, 9) if ta else (9, 33)).astype(np.float32)
    b = rng.standard_normal((33, 70)).astype(np.float32)
    c = rng.standard_normal(cshape).astype(np.float32)
    out = np.full((9, 70), np.nan, np.float32)
    G.gemm_packed(a, S.pack_b(b), c, out, 0.5, 2.0, ta, has_c)
    ref = 0.5 * ((a.T if ta else a).astype(np.float64) @ b) + (2.0 * c if has_c else 0)
    _close(out, ref)
