#!/usr/bin/env python
"""Cold vs warm start of a model: ``compile()`` + first call in a fresh process.

    python scripts/bench_warm_start.py [MODEL.onnx] [--warm-runs N] [--keep DIR]

Default model: bert from ../shared/models (B=1, S=128). Every run is a new Python process with
``JITORT_CACHE_DIR`` *and* ``NUMBA_CACHE_DIR`` pointed at directories of a fresh temporary
folder, so the cold run also compiles the kernel library (nothing cached anywhere); the warm
runs then reuse the same folders. Each child reports, from its own clock:

    import   ``import jitort`` (numpy, numba, onnx, scipy's BLAS)
    compile  ``jitort.compile(path)``
    first    the first call (plans the shapes, loads or compiles the generated code)

and the parent measures the whole process (interpreter start to exit). The ratio compares
compile + first call, cold / warm (the best warm run), and the script checks the issue's
bar: warm compile + first call <= 1.5 s and >= 10x faster than cold.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FEEDS = r"""
rng = np.random.default_rng(0)
feeds = {}
for info in cm.inputs:
    shape = [d if isinstance(d, int) else (1 if i == 0 else 128) for i, d in enumerate(info.shape)]
    dt = np.dtype(info.dtype)
    if dt.kind == "f":
        feeds[info.name] = rng.standard_normal(shape).astype(dt)
    else:
        feeds[info.name] = rng.integers(0, 2 if "mask" in info.name else 100, shape).astype(dt)
"""

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import jitort
t1 = time.perf_counter()
cm = jitort.compile(sys.argv[1], tiered=False)  # the compiled program, not the first tier
t2 = time.perf_counter()
""" + FEEDS + r"""out = cm.run(None, feeds)
t3 = time.perf_counter()
print("RESULT " + json.dumps({"import": t1 - t0, "compile": t2 - t1, "first": t3 - t2,
                              "compiles": jitort.compile_count(),
                              "checksum": float(np.float64(out[0].astype(np.float64).sum()))}))
"""


def run_child(model: str, env: dict) -> dict:
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", CHILD, model], env=env, capture_output=True,
                       text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"child failed with exit code {p.returncode}")
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    r = json.loads(line[len("RESULT "):])
    r["process"] = wall
    return r


def fmt(tag: str, r: dict) -> str:
    return (f"{tag:<7} import {r['import']:6.2f} s  compile {r['compile']:6.2f} s  "
            f"first call {r['first']:7.2f} s  compile+first {r['compile'] + r['first']:7.2f} s  "
            f"import+compile+first {r['import'] + r['compile'] + r['first']:7.2f} s  "
            f"process {r['process']:7.2f} s  numba compiles {r['compiles']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?",
                    default=str(Path(os.environ.get("JITORT_MODEL_DIR",
                                                    ROOT.parent / "shared" / "models"))
                                / "bert.onnx"))
    ap.add_argument("--warm-runs", type=int, default=3)
    ap.add_argument("--keep", default=None, help="use (and keep) this folder instead of a temp one")
    args = ap.parse_args(argv)
    if not Path(args.model).exists():
        raise SystemExit(f"model not found: {args.model}")

    with tempfile.TemporaryDirectory(prefix="jitort-warm-") as tmp:
        base = Path(args.keep) if args.keep else Path(tmp)
        env = dict(os.environ)
        env["JITORT_CACHE_DIR"] = str(base / "jitort")
        env["NUMBA_CACHE_DIR"] = str(base / "numba")
        for k in ("JITORT_CACHE_DIR", "NUMBA_CACHE_DIR"):
            if any(Path(env[k]).glob("*")):
                raise SystemExit(f"{env[k]} is not empty: the cold run needs empty caches")
        print(f"model {args.model}\ncaches {base}")
        cold = run_child(args.model, env)
        print(fmt("cold", cold), flush=True)
        warms = []
        for i in range(args.warm_runs):
            warms.append(run_child(args.model, env))
            print(fmt(f"warm{i + 1}", warms[-1]), flush=True)
    warm = min(warms, key=lambda r: r["compile"] + r["first"])
    cold_s, warm_s = cold["compile"] + cold["first"], warm["compile"] + warm["first"]
    ratio = cold_s / warm_s
    ok_same = all(abs(w["checksum"] - cold["checksum"]) <= 1e-6 * max(1.0, abs(cold["checksum"]))
                  for w in warms)
    print(f"compile+first call: cold {cold_s:.2f} s, warm {warm_s:.2f} s (best of {len(warms)}), "
          f"ratio {ratio:.1f}x")
    cold_i, warm_i = cold_s + cold["import"], warm_s + warm["import"]
    print(f"with import: cold {cold_i:.2f} s, warm {warm_i:.2f} s, ratio {cold_i / warm_i:.1f}x")
    print(f"warm runs compiled nothing: {all(w['compiles'] == 0 for w in warms)}; "
          f"same outputs: {ok_same}")
    ok = ratio >= 10 and warm_s <= 1.5 and ok_same
    print("PASS" if ok else "FAIL",
          "(bar: warm compile+first call <= 1.5 s and >= 10x faster than cold)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
