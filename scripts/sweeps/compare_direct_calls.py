#!/usr/bin/env python
"""Drivers that call kernels through the address table vs kernels linked into the driver
(``JITORT_DIRECT_CALLS``, jitort/codegen/native.py), with onnxruntime, in one process.

    python scripts/sweeps/compare_direct_calls.py MODEL.onnx [--threads 1] [--rounds 40]

Both programs are compiled in this process (the compile time of each is printed: run with a
fresh ``JITORT_CACHE_DIR`` to time a cold compile of the generated code); calls then alternate
direct / table / onnxruntime, and the medians and the ratios come from the same rounds.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=40)
    a = ap.parse_args()
    import onnxruntime as ort

    import jitort
    from jitort.codegen import native
    models, compile_s = {}, {}
    feeds = None
    for name, direct in (("direct", True), ("table", False)):
        native.DIRECT_CALLS = direct
        cm = jitort.compile(a.model, threads=a.threads, tiered=False)
        if feeds is None:
            rng = np.random.default_rng(0)
            feeds = {}
            for info in cm.inputs:
                shape = [d if isinstance(d, int) else (1 if i == 0 else 128)
                         for i, d in enumerate(info.shape)]
                dt = np.dtype(info.dtype)
                feeds[info.name] = (rng.standard_normal(shape).astype(dt) if dt.kind == "f"
                                    else rng.integers(0, 2, shape).astype(dt))
        t = time.perf_counter()
        cm.run(None, feeds)  # plans and compiles (or loads) the generated code
        compile_s[name] = time.perf_counter() - t
        models[name] = cm
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = a.threads, 1
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    ref = sess.run(None, feeds)
    for name, cm in models.items():
        for o, r in zip(cm.run(None, feeds), ref):
            np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4)
    runs = {"direct": lambda: models["direct"].run(None, feeds),
            "table": lambda: models["table"].run(None, feeds), "ort": lambda: sess.run(None, feeds)}
    times = {k: [] for k in runs}
    for _ in range(a.rounds):
        for k, fn in runs.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    med = {k: 1e3 * float(np.median(v)) for k, v in times.items()}
    print(f"{os.path.basename(a.model)} threads={a.threads}: first call (compile or load) "
          f"direct {compile_s['direct']:.2f} s, table {compile_s['table']:.2f} s; median "
          f"direct {med['direct']:.2f} ms, table {med['table']:.2f} ms, onnxruntime "
          f"{med['ort']:.2f} ms; table/direct {med['table'] / med['direct']:.3f}, "
          f"table/onnxruntime {med['table'] / med['ort']:.3f}")


if __name__ == "__main__":
    main()
