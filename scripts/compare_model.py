#!/usr/bin/env python
"""Latency of one model, jitort against onnxruntime, measured interleaved in one process.

    python scripts/compare_model.py MODEL [--threads 1] [--batch 1] [--runs 200]

Both engines run on the same random feed (float inputs standard normal; integer inputs ids in
[0, 100); dynamic dims: --batch for the first, --seq for the others), at the same thread count
(jitort ``compile(threads=N)``, onnxruntime ``intra_op_num_threads=N``). Two measurements:

* onnxruntime at its default session options (only the thread count set; its pool spins
  between calls): the engines alternate in blocks of 3 calls after 100 ms idle, the last call
  of each block timed (as benchmarks/test_bench_models.py), ``--runs / 10`` blocks each;
* onnxruntime with its pool not spinning (``session.intra_op.allow_spinning=0``) and one
  inter-op thread: calls alternate one by one ``--runs`` times (a spinning pool would take
  the core jitort's next call needs). Shown beside the first, never instead of it.

Medians and ratios are printed, with the largest output difference.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _feeds(sess, batch, seq):
    rng = np.random.default_rng(0)
    feeds = {}
    for i in sess.get_inputs():
        dims = [d if isinstance(d, int) else (batch if k == 0 else seq)
                for k, d in enumerate(i.shape)]
        if "int" in i.type:
            feeds[i.name] = rng.integers(0, 100, dims).astype(np.int64)
        else:
            feeds[i.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def alternate(fa, fb, runs, warmup):
    """Medians (seconds) of ``runs`` calls of ``fa`` and ``fb`` alternating, after ``warmup``
    calls of each."""
    for _ in range(warmup):
        fa()
        fb()
    ta, tb = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        fa()
        t1 = time.perf_counter()
        fb()
        t2 = time.perf_counter()
        ta.append(t1 - t0)
        tb.append(t2 - t1)
    return statistics.median(ta), statistics.median(tb)


def ort_session(model, threads: int, spinning: bool = False):
    """onnxruntime session of ``model`` (path or serialized bytes) at ``threads`` intra-op
    threads: with ``spinning`` its default options otherwise; without, one inter-op thread
    and a pool that does not spin between calls (for calls alternating one by one)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    if not spinning:
        so.inter_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def blocks(fa, fb, rounds, block=3, idle=0.1):
    """Median seconds of the last call of each engine's block of ``block`` calls, the
    engines' blocks alternating after ``idle`` seconds without calls."""
    ta, tb = [], []
    for _ in range(rounds):
        for f, ts in ((fb, tb), (fa, ta)):
            time.sleep(idle)
            for _ in range(block - 1):
                f()
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
    return statistics.median(ta), statistics.median(tb)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--runs", type=int, default=200)
    a = ap.parse_args(argv)
    import jitort
    sess = ort_session(a.model, a.threads)
    feeds = _feeds(sess, a.batch, a.seq)
    cm = jitort.compile(a.model, threads=a.threads, tiered=False)
    got = cm.run(None, feeds)
    want = sess.run(None, feeds)
    diff = max(float(np.max(np.abs(np.asarray(g, np.float64) - w))) if np.size(w) else 0.0
               for g, w in zip(got, want))
    spin = ort_session(a.model, a.threads, spinning=True)
    spin.run(None, feeds)
    bj, bo = blocks(lambda: cm.run(None, feeds), lambda: spin.run(None, feeds),
                    max(5, a.runs // 10))
    mj, mo = alternate(lambda: cm.run(None, feeds), lambda: sess.run(None, feeds), a.runs, 10)
    print(f"{Path(a.model).name}: threads {a.threads}, batch {a.batch}; "
          f"interpreted nodes: {cm.fallback_nodes()}; max |diff| {diff:.2e}")
    print(f"onnxruntime defaults, blocks:      jitort {bj * 1e3:.3f} ms  onnxruntime "
          f"{bo * 1e3:.3f} ms  ratio {bj / bo:.3f}")
    print(f"onnxruntime not spinning, 1 by 1:  jitort {mj * 1e3:.3f} ms  onnxruntime "
          f"{mo * 1e3:.3f} ms  ratio {mj / mo:.3f}")


if __name__ == "__main__":
    main()
