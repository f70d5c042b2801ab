#!/usr/bin/env python
"""float32 gemm GFLOP/s on this host by shape: jitort's own gemm, the kernels' BLAS, numpy.

    python scripts/gemm_gflops.py [--weights] [--reps 3]

Over the buckets of the calibration grid (``jitort.tuning_choices``: rows x K x N at each
bucket's representative shape), one thread, the candidates of ``gemm.activations`` -- jitort's
gemm packing B per call (``gemm.ogemm``) and the BLAS (``gemm.xgemm``) -- and numpy's
``matmul`` (its own BLAS, pinned to one thread), then own / BLAS and what this machine's
calibration picked for the bucket (``jitort tune``; "-" before it ran). ``--weights``: the
``gemm.weights`` candidates instead (B prepacked at compile time vs the per-call path), with
B stored transposed too. The last lines: how many buckets have the own gemm below 0.9x the
BLAS's GFLOP/s, and whether calibration chose the BLAS in each of them.
"""
import argparse
import math
import os
import platform
import time

os.environ.setdefault("JITORT_TUNE_BACKGROUND", "0")

import numba  # noqa: E402
import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from jitort import tuning  # noqa: E402


def _time(fn, reps):
    fn()
    t0 = time.perf_counter()
    fn()
    n = max(1, int(0.02 / max(time.perf_counter() - t0, 1e-7)))
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", action="store_true", help="the gemm.weights candidates")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    name = "gemm.weights" if args.weights else "gemm.activations"
    choice = tuning.CHOICES[name]
    own, ref = [c.name for c in choice.candidates]
    decided = tuning.load().get(name, {}).get("buckets", {})
    ident = tuning.machine()
    print(f"{platform.processor() or ''} {ident['model']} ({ident['vendor']}, LLVM "
          f"{ident['llvm_cpu']}, {'AVX-512' if ident['avx512'] else 'AVX2'}), BLAS "
          f"{ident['blas']}, 1 thread; {name}")
    print(f"{'bucket':<16}{own + ' GF/s':>14}{ref + ' GF/s':>15}{'numpy GF/s':>12}"
          f"{own + '/' + ref:>16}{'calibrated':>12}")
    numba.set_num_threads(1)
    below, below_ok, ratios = 0, 0, []
    from jitort.kernels.cpu import blas
    with threadpool_limits(1), blas.single_threaded():
        for key in choice.grid():
            p = choice.problem(key)
            flops = choice.work(p)
            g = {c.name: flops / _time(c.prepare(p), args.reps) / 1e9
                 for c in choice.candidates if c.applies(p)}
            a = np.ones((p["rows"], p["k"]), np.float32)
            b = np.ones((p["k"], p["n"]), np.float32)
            if p.get("trans"):
                bt = np.ones((p["n"], p["k"]), np.float32)
                g_np = flops / _time(lambda: a @ bt.T, args.reps) / 1e9
            else:
                g_np = flops / _time(lambda: a @ b, args.reps) / 1e9
            text = tuning._bucket_text(key)
            pick = decided.get(text, {}).get("pick", "-")
            r = g[own] / g[ref]
            ratios.append(r)
            if r < 0.9:
                below += 1
                below_ok += pick == ref
            print(f"{text:<16}{g[own]:14.1f}{g[ref]:15.1f}{g_np:12.1f}{r:16.2f}{pick:>12}")
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"\n{len(ratios)} buckets, geomean {own}/{ref} GFLOP/s {geo:.2f}; {below} below 0.9x, "
          f"calibration chose {ref} in {below_ok} of them")


if __name__ == "__main__":
    main()
