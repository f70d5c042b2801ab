#!/usr/bin/env python
"""sgemm GFLOP/s of each BLAS the kernels can call, at one thread, on the model corpus's shapes.

    python scripts/compare_blas.py [--reps 2]

Each library runs in its own process (``JITORT_BLAS=mkl|openblas|numba``; the choice is made
when ``jitort.kernels.cpu.blas`` is imported), through the kernels' own ``gemm.xgemm``; the
processes alternate ``--reps`` times and the best time per shape is kept. Libraries that are
not installed are left out. The last column is MKL's time over numpy's OpenBLAS's.
"""
import argparse
import json
import os
import subprocess
import sys

# (M, K, N, where it comes from)
SHAPES = [
    (64, 147, 784, "7x7/2 stem, one row block"),
    (64, 27, 555, "3x3/2 first layer (squeezenet), small block"),
    (1000, 512, 169, "squeezenet 1x1 512->1000 13x13"),
    (1024, 256, 196, "resnet50 1x1 256->1024 14x14"),
    (2048, 512, 49, "resnet50 1x1 512->2048 7x7"),
    (64, 64, 3136, "1x1 64->64 56x56"),
    (256, 64, 3136, "1x1 64->256 56x56"),
    (64, 64, 784, "winograd F(4x4) 64->64 56x56, one of 36"),
    (128, 768, 768, "bert/gpt2 projection, S=128"),
    (128, 768, 3072, "bert/gpt2 MLP up"),
    (128, 3072, 768, "bert/gpt2 MLP down"),
    (65, 192, 768, "vit MLP up"),
    (65, 768, 192, "vit MLP down"),
]

_CHILD = r"""
import json, sys, time
import numpy as np
from numba import njit
from jitort.kernels.cpu import blas, gemm as G


@njit
def mm(a, b, c, m, n, k):
    return G.xgemm(0, 0, m, n, k, 1.0, a, 0, k, b, 0, n, 0.0, c, 0, n)


out = {}
for m, k, n in json.loads(sys.argv[1]):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.empty((m, n), np.float32)
    mm(a, b, c, m, n, k)
    best = 1e9
    for _ in range(30):
        t = time.perf_counter()
        mm(a, b, c, m, n, k)
        best = min(best, time.perf_counter() - t)
    out[f"{m}x{k}x{n}"] = best
print(json.dumps({"blas": blas.BLAS, "times": out}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    shapes = json.dumps([s[:3] for s in SHAPES])
    best = {}
    for _ in range(args.reps):
        for lib in ("mkl", "openblas", "openblas-shared", "numba"):
            env = dict(os.environ, JITORT_BLAS=lib, NUMBA_NUM_THREADS="1",
                       OPENBLAS_NUM_THREADS="1")  # numpy's and scipy's alike
            r = subprocess.run([sys.executable, "-c", _CHILD, shapes], env=env,
                               capture_output=True, text=True)
            if r.returncode != 0:
                continue  # not installed here
            got = json.loads(r.stdout.strip().splitlines()[-1])
            for key, t in got["times"].items():
                cur = best.setdefault(lib, {})
                cur[key] = min(cur.get(key, 1e9), t)
    libs = [lib for lib in ("mkl", "openblas", "openblas-shared", "numba") if lib in best]
    print("| M x K x N | " + " | ".join(f"{lib} GF/s" for lib in libs)
          + " | mkl/openblas time | shape |")
    print("|---" * (len(libs) + 3) + "|")
    for m, k, n, what in SHAPES:
        key = f"{m}x{k}x{n}"
        gf = [2 * m * k * n / best[lib][key] / 1e9 for lib in libs]
        ratio = (f"{best['mkl'][key] / best['openblas'][key]:.2f}"
                 if "mkl" in best and "openblas" in best else "-")
        print(f"| {key} | " + " | ".join(f"{g:.0f}" for g in gf) + f" | {ratio} | {what} |")


if __name__ == "__main__":
    main()
