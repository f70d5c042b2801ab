#!/usr/bin/env python
"""The shape sweep behind jitort's own float32 gemm (``kernels/cpu/sgemm.py``): at one thread,
over rows x K x columns, the vendor BLAS (``gemm.xgemm``), jitort's gemm packing B per call
(``gemm.ogemm``: what attention's per-head products and the ``use_own`` rule run) and with B
prepacked (``gemm.matmul_packed``: what constant weights run), alternating in one process.

    python scripts/sweeps/sweep_sgemm.py [--reps 3] [--tb]

Prints microseconds and own / BLAS ratios per shape, then the geomean of each ratio by row
count. ``--tb``: B stored transposed (N, K), as Gemm transB=1 and attention's K^T.
"""
import argparse
import itertools
import math

import numba
import numpy as np
from numba import njit

from jitort.kernels.cpu import gemm as G
from jitort.kernels.cpu import sgemm as S

# (scripts/ is the script's directory on sys.path: the timing loop of the conv sweep)
from compare_conv_implicit import _time

ROWS = [2, 8, 32, 128, 512]
KS = [64, 256, 768, 2304]
NS = [64, 196, 768, 3072]


@njit
def _blas(tb, m, n, k, a, b, c):
    G.xgemm(0, tb, m, n, k, 1.0, a, 0, k, b, 0, k if tb else n, 0.0, c, 0, n)


@njit
def _own(tb, m, n, k, a, b, c):
    G.ogemm(0, tb, m, n, k, 1.0, a, 0, k, b, 0, k if tb else n, 0.0, c, 0, n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tb", action="store_true")
    args = ap.parse_args()
    numba.set_num_threads(1)
    tb = 1 if args.tb else 0
    rng = np.random.default_rng(0)
    print(f"tb={tb}, 1 thread, AVX-512={S.VW == 16}")
    print(f"{'m':>4s} {'k':>5s} {'n':>5s} {'blas us':>9s} {'own us':>9s} {'packed us':>9s} "
          f"{'own/blas':>8s} {'pk/blas':>8s}")
    by_rows = {}
    for m, k, n in itertools.product(ROWS, KS, NS):
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
        bp = S.pack_b(b.T if tb else b)
        c = np.empty((m, n), np.float32)
        a3, c3, z = a[None], c[None], np.zeros(0, np.float32)
        t = _time({"blas": lambda: _blas(tb, m, n, k, a, b, c),
                   "own": lambda: _own(tb, m, n, k, a, b, c),
                   "packed": lambda: G.matmul_packed(a3, bp, z, c3, 0, 0.0, 0.0)}, args.reps)
        r1, r2 = t["own"] / t["blas"], t["packed"] / t["blas"]
        by_rows.setdefault(m, []).append((r1, r2))
        print(f"{m:4d} {k:5d} {n:5d} {t['blas']:9.1f} {t['own']:9.1f} {t['packed']:9.1f} "
              f"{r1:8.2f} {r2:8.2f}", flush=True)
    print("geomean by rows (own/blas, packed/blas):")
    for m, rs in by_rows.items():
        g = [math.exp(sum(math.log(r[i]) for r in rs) / len(rs)) for i in (0, 1)]
        print(f"  m={m:4d}: {g[0]:.2f} {g[1]:.2f}  worst own {max(r[0] for r in rs):.2f}")


if __name__ == "__main__":
    main()
