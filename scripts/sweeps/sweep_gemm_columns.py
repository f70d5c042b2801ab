#!/usr/bin/env python
"""OpenBLAS sgemm GFLOP/s by column count, as the kernels call it (``gemm.xgemm``, one
thread): C (M, N) = A (M, K) @ B (K, N) and the transposed formulation C^T = B^T @ A^T, for
the deep CNN layers' shapes (M output channels, K = C * taps, N = output pixels: 49 for a 7x7
plane). The numbers behind ``kernels/cpu/conv_cvec.py``'s note that N = 49 runs well below
N = 48 or 64.

    python scripts/sweeps/sweep_gemm_columns.py [--reps 20]
"""
import argparse
import time

import numpy as np
from numba import njit

from jitort.kernels.cpu.gemm import xgemm


@njit(cache=False)
def _run(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, reps):
    for _ in range(reps):
        xgemm(ta, tb, m, n, k, 1.0, a, 0, lda, b, 0, ldb, 0.0, c, 0, ldc)


def bench(m, n, k, trans, reps):
    rng = np.random.default_rng(0)
    a = rng.random((m, k), np.float32)
    b = rng.random((k, n), np.float32)
    if trans:
        bt, ct = np.ascontiguousarray(b.T), np.zeros((n, m), np.float32)

        def f(r):
            _run(0, 1, n, m, k, bt, k, a, k, ct, m, r)
    else:
        c = np.zeros((m, n), np.float32)

        def f(r):
            _run(0, 0, m, n, k, a, k, b, n, c, n, r)
    f(2)
    best = min(_timed(f, reps) for _ in range(5))
    return best * 1e6, 2 * m * n * k / best / 1e9


def _timed(f, reps):
    t = time.perf_counter()
    f(reps)
    return (time.perf_counter() - t) / reps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    from jitort.kernels.cpu import blas
    print(f"BLAS {blas.BLAS} ({blas.CORE}), 1 thread; best of 5 x {a.reps} calls")
    for m, k in ((512, 4608), (2048, 512), (512, 2048), (256, 2304)):
        for n in (48, 49, 56, 64, 169, 196):
            for tr in (False, True):
                us, gf = bench(m, n, k, tr, a.reps)
                print(f"M={m:5d} K={k:5d} N={n:4d} {'C^T' if tr else 'C  '} {us:9.1f} us "
                      f"{gf:6.1f} GFLOP/s", flush=True)


if __name__ == "__main__":
    main()
