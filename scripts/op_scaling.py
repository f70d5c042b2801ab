#!/usr/bin/env python
"""What the second thread buys each op-suite case: jitort at 1 and 2 threads and onnxruntime
at 2, timed in alternating blocks in one process.

    python scripts/op_scaling.py [-k SUBSTRING ...] [--rounds 5] [--block-s 0.02]

For every case of ``benchmarks/test_bench_ops.py`` whose name contains one of the substrings
(all cases without ``-k``): median us of jitort at 1 thread, at 2, the speedup, onnxruntime's
median at 2 and the 2-thread ratio. The op suite's own 2-thread ratios come from runs minutes
apart on a VM whose second core swings; a case that gains nothing from its second thread
here (speedup ~1.0 where onnxruntime's is ~1.8) is a parallel threshold or a serial kernel,
not noise. Cases that call a kernel directly take their thread count from
``numba.set_num_threads``, set around each block.
"""
import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("JITORT_BENCH_THREADS", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numba  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks import test_bench_ops as ops  # noqa: E402
from jitort.kernels.cpu.blas import single_threaded  # noqa: E402


def _block(fn, n, threads, warm_s=0.03):
    numba.set_num_threads(threads)
    t_end = time.perf_counter() + warm_s
    while time.perf_counter() < t_end:  # untimed: a worker asleep for a while can take
        fn()                            # milliseconds to get its virtual CPU back on this VM
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return ts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-k", action="append", default=[], help="name substring (repeatable)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--block-s", type=float, default=0.02)
    a = ap.parse_args(argv)
    names = [n for n in ops.CASES if not a.k or any(s in n for s in a.k)]
    print(f"{'case':52s} {'jit 1T':>8s} {'jit 2T':>8s} {'gain':>5s} {'ort 2T':>8s} {'ratio':>6s}")
    for name in names:
        built = {}
        for t in (1, 2):
            ops.THREADS = t
            numba.set_num_threads(t)
            jit_fn, ort_fn, _ = ops.CASES[name][0]()
            with single_threaded():
                jit_fn()
            built[t] = (jit_fn, ort_fn)
        ort_fn = built[2][1]
        t0 = time.perf_counter()
        with single_threaded():
            built[2][0]()
        n = max(1, min(2000, int(a.block_s / max(time.perf_counter() - t0, 1e-7))))
        times = {1: [], 2: [], "ort": []}
        for _ in range(a.rounds):
            with single_threaded():
                times[1] += _block(built[1][0], n, 1)
                times[2] += _block(built[2][0], n, 2)
            time.sleep(0.08)  # onnxruntime's workers spin ~60 ms after a call: not into ours
            times["ort"] += _block(ort_fn, n, 2)
            time.sleep(0.08)
        m1, m2, mo = (float(np.median(times[k])) * 1e6 for k in (1, 2, "ort"))
        print(f"{name[:52]:52s} {m1:8.1f} {m2:8.1f} {m1 / m2:5.2f} {mo:8.1f} {m2 / mo:6.2f}",
              flush=True)


if __name__ == "__main__":
    main()
