#!/usr/bin/env python
"""Models on the CUDA backend against onnxruntime (CPU provider), one process per model.

    python scripts/gpu_check.py MODEL... [--runs 20] [--timeout 120] [--ort-threads N]
                                [--batch 1] [--seq 128] [--jsonl FILE]

For each model, in a fresh process (a kernel fault cannot poison the next model's context):
``jitort.compile(model, device="cuda")``, the placement (nodes on cuda / cpu / interpreter /
host), the time to the first result (compile + CUDA JIT + first call), outputs against
onnxruntime on the same random feed (float inputs standard normal; integer inputs ids in
[0, 100); dynamic dims ``--batch`` for the first, ``--seq`` for the others, as
``compare_model.py``), then ``--runs`` calls of each engine alternating, medians and their
ratio. onnxruntime uses ``--ort-threads`` (default: all the machine's cores); jitort's times
include the host -> device copies of the feeds and the device -> host copies of the results.
A model that fails or outruns ``--timeout`` is reported as such and the next one runs. On a
machine without a GPU, ``NUMBA_ENABLE_CUDASIM=1`` runs the same checks on numba's simulator
(slowly: only tiny models).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _one(path: str, runs: int, ort_threads: int, batch: int, seq: int) -> dict:
    sys.path.insert(0, str(ROOT / "scripts"))
    import numpy as np
    import onnxruntime as ort
    from compare_model import _feeds, alternate

    import jitort
    rec: dict = {"model": Path(path).name, "batch": batch, "seq": seq}
    so = ort.SessionOptions()
    so.intra_op_num_threads = ort_threads
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feeds = _feeds(sess, batch, seq)
    want = sess.run(None, feeds)
    t0 = time.perf_counter()
    cm = jitort.compile(path, device="cuda", tiered=False)
    rec["placement"] = dict(cm.placement_counts())
    got = cm.run(None, feeds)
    rec["first_s"] = round(time.perf_counter() - t0, 2)
    worst = 0.0
    ok = True
    for g, w in zip(got, want):
        g = np.asarray(g)
        if g.shape != w.shape:
            ok = False
            rec.setdefault("errors", []).append(f"shape {g.shape} != {w.shape}")
            continue
        if w.size == 0:
            continue
        d = float(np.max(np.abs(g.astype(np.float64) - w)))
        scale = float(np.max(np.abs(w))) or 1.0
        worst = max(worst, d / max(scale, 1.0))
        ok &= bool(np.allclose(g, w, rtol=1e-3, atol=1e-3 * max(scale, 1.0), equal_nan=True))
    rec["max_rel_diff"] = worst
    rec["ok"] = ok
    copies0 = dict(cm.copies)
    cm.run(None, feeds)
    rec["copies_per_call"] = {k: cm.copies[k] - copies0.get(k, 0) for k in cm.copies}
    mj, mo = alternate(lambda: cm.run(None, feeds), lambda: sess.run(None, feeds), runs, 3)
    rec["jitort_ms"] = round(mj * 1e3, 3)
    rec["ort_cpu_ms"] = round(mo * 1e3, 3)
    rec["ratio"] = round(rec["jitort_ms"] / rec["ort_cpu_ms"], 3)
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--ort-threads", type=int, default=0, help="0: onnxruntime's default")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--jsonl", default=None, help="append one JSON record per model here")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        try:
            rec = _one(a.models[0], a.runs, a.ort_threads, a.batch, a.seq)
        except BaseException as e:  # reported, not raised: the parent prints a table
            rec = {"model": Path(a.models[0]).name, "ok": False,
                   "error": f"{type(e).__name__}: {e}"[:2000],
                   "trace": traceback.format_exc()[-3000:]}
        print("RESULT " + json.dumps(rec), flush=True)
        return
    env = dict(os.environ, JITORT_TIERED="0", PYTHONUNBUFFERED="1")
    for m in a.models:
        t0 = time.perf_counter()
        try:
            p = subprocess.run([sys.executable, __file__, "--one", "--runs", str(a.runs),
                                "--ort-threads", str(a.ort_threads), "--batch", str(a.batch),
                                "--seq", str(a.seq), m],
                               capture_output=True, text=True, timeout=a.timeout, env=env)
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            rec = json.loads(lines[-1][7:]) if lines else {
                "model": Path(m).name, "ok": False,
                "error": f"exit {p.returncode}: {p.stderr[-2000:]}"}
        except subprocess.TimeoutExpired:
            rec = {"model": Path(m).name, "ok": False, "error": f"timeout after {a.timeout:.0f} s"}
        rec["wall_s"] = round(time.perf_counter() - t0, 1)
        if a.jsonl:
            with open(a.jsonl, "a") as f:
                f.write(json.dumps(rec) + "\n")
        if "error" in rec:
            print(f"{rec['model']:28s} FAILED ({rec['wall_s']} s): {rec['error'][:600]}",
                  flush=True)
            if "trace" in rec:
                print(rec["trace"], flush=True)
        else:
            print(f"{rec['model']:24s} b{rec['batch']:<3d}{'ok ' if rec['ok'] else 'BAD'} "
                  f"diff {rec['max_rel_diff']:.1e} "
                  f"first {rec['first_s']:6.1f} s  jitort {rec['jitort_ms']:8.3f} ms  "
                  f"ort-cpu {rec['ort_cpu_ms']:8.3f} ms  ratio {rec['ratio']:.2f}  "
                  f"{rec['placement']} copies/call {rec['copies_per_call']}", flush=True)


if __name__ == "__main__":
    main()
