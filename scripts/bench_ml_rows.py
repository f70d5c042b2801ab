#!/usr/bin/env python
"""One-row latency of benchmarks/test_bench_ml.py's models over many different rows, jitort
against onnxruntime (1 thread, default session options otherwise) in the same process.

The benchmark feeds one row again and again, which trains a branchy tree walk's branch
predictor; serving sees a new row each call. This cycles ``--rows`` different rows and prints
the best of seven passes per call, for each runtime, and their ratio, with the CPU::

    python scripts/bench_ml_rows.py [MODEL ...] [--rows 64]

MODEL: names of ``benchmarks/test_bench_ml.MODELS`` (default: the tree ensembles).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("JITORT_TIERED", "0")
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

TREES = ["random_forest", "gbm_classifier", "gbm_regressor", "histgb_classifier",
         "xgboost_classifier", "lightgbm_classifier"]


def _per_call(fn, feeds: list, passes: int = 7) -> float:
    best = float("inf")
    for _ in range(passes):
        t0 = time.perf_counter()
        for f in feeds:
            fn(f)
        best = min(best, (time.perf_counter() - t0) / len(feeds))
    return best


def main(argv=None) -> int:
    import cpuinfo
    import onnxruntime as ort
    from perf_tables import cpu_name  # the CPU named as the benchmark tables name it

    import jitort
    from benchmarks.test_bench_ml import MODELS, _data
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=TREES)
    ap.add_argument("--rows", type=int, default=64)
    args = ap.parse_args(argv)
    cpu = cpu_name({"cpu": cpuinfo.get_cpu_info(), "machine": platform.machine()})
    print(f"{cpu}, 1 thread, onnxruntime {ort.__version__}, {args.rows} different rows")
    for name in args.models:
        model = MODELS[name]()
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        cm = jitort.compile(model, threads=1, strict=True)
        feeds = [{model.graph.input[0].name: _data(1, k)} for k in range(args.rows)]
        for f in feeds[:3]:
            cm.run(None, f)
            sess.run(None, f)
        j = _per_call(lambda f: cm.run(None, f), feeds)
        o = _per_call(lambda f: sess.run(None, f), feeds)
        print(f"  {name:22s} jitort {j * 1e6:7.2f} us  onnxruntime {o * 1e6:7.2f} us  "
              f"ratio {j / o:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
