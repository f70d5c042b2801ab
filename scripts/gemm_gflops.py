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

os.environ.setdefault("JITORT_TUNE_BACKGROUND", "0")

import numba  # noqa: E402
import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from jitort import tuning  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", action="store_true", help="the gemm.weights candidates")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    name = "gemm.weights" if args.weights else "gemm.activations"
    choice = tuning.choices()[name]
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
            fns = {c.name: c.prepare(p) for c in choice.candidates if c.applies(p)}
            a = np.ones((p["rows"], p["k"]), np.float32)
            b = np.ones((p["n"], p["k"]) if p.get("trans") else (p["k"], p["n"]), np.float32)
            fns["numpy"] = (lambda: a @ b.T) if p.get("trans") else (lambda: a @ b)
            g = {name: flops / t / 1e9
                 for name, t in tuning.time_calls(fns, 0.02, args.reps).items()}
            g_np = g.pop("numpy")
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
