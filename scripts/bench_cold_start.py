#!/usr/bin/env python
"""Cold start with tiered execution, next to onnxruntime's session creation (issue 22).

    python scripts/bench_cold_start.py [MODEL.onnx ...] [--skip-cold] [--jobs N]
    python scripts/bench_cold_start.py --library [--only KERNEL] [MODEL.onnx ...]

Default models: bert, resnet18, decoder (../shared/models) and the onnx light densenet121.
Every measurement is a fresh Python process; it reports, from its own start (before
``import numpy``):

    first     import jitort + ``jitort.compile(path)`` + the first result (the interpreter tier)
    compiled  when calls run on the compiled program (``model.wait_compiled()`` returned)

in three cache states:

    cold      empty ``JITORT_CACHE_DIR`` and ``NUMBA_CACHE_DIR`` (nothing compiled anywhere)
    library   the kernel library cached (by the cold run), this model's generated code not
              (a new ``JITORT_CACHE_DIR``)
    warm      both cached

and onnxruntime's ``import onnxruntime`` + ``InferenceSession`` + first run, also in a fresh
process. Each child checks its first and its compiled-tier result against onnxruntime (rtol
1e-4) and prints max |diff|. ``--jobs`` sets ``JITORT_COMPILE_JOBS`` (compile processes).

``--library``: the kernel library compiled from nothing (``jitort warmup --library``, empty
temporary caches) with ``--jobs 1`` and ``--jobs 2``, then, with the library that run cached,
each model's time until the compiled tier (default models bert and resnet18; its generated
code not cached). Prints the host load (1-minute average) before and after each run: on a
shared 2-core machine the times mean little without it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_warm_start import FEEDS  # noqa: E402  (the same inputs as the warm-start script)

CHILD = r"""
import time
t0 = time.perf_counter()
import json, sys
import numpy as np
import jitort
cm = jitort.compile(sys.argv[1])
""" + FEEDS + r"""
first = cm.run(None, feeds)
t1 = time.perf_counter()
tier_first = cm.tier
ok = cm.wait_compiled(timeout=900)
t2 = time.perf_counter()
after = cm.run(None, feeds)
import onnxruntime as ort
want = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"]).run(None, feeds)
def diff(outs):
    return max(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(outs, want))
for o, w in zip(first + after, want + want):
    np.testing.assert_allclose(o, w, rtol=1e-4, atol=1e-4)
print("RESULT " + json.dumps({"first": t1 - t0, "compiled": t2 - t0, "ok": ok,
                              "tier_first": tier_first, "diff_first": diff(first),
                              "diff_compiled": diff(after),
                              "in_child": cm._tiering.compiled_in_child if cm._tiering else None,
                              "parent_compiles": jitort.compile_count()}))
"""

ORT_CHILD = r"""
import time
t0 = time.perf_counter()
import json, sys
import numpy as np
import onnxruntime as ort
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
rng = np.random.default_rng(0)
feeds = {}
for i in s.get_inputs():
    shape = [d if isinstance(d, int) else (1 if k == 0 else 128) for k, d in enumerate(i.shape)]
    if "float" in i.type:
        feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    else:
        feeds[i.name] = rng.integers(0, 2, shape).astype(np.int64)
s.run(None, feeds)
print("RESULT " + json.dumps({"first": time.perf_counter() - t0}))
"""


def child(code: str, model: str, env: dict) -> dict:
    p = subprocess.run([sys.executable, "-c", code, model], env=env, capture_output=True,
                       text=True, cwd=tempfile.gettempdir())
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise SystemExit(f"child failed ({model}):\n{p.stderr[-3000:]}")


def default_models() -> list[str]:
    import onnx
    shared = Path(os.environ.get("JITORT_MODEL_DIR", ROOT.parent / "shared" / "models"))
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return [str(shared / f"{m}.onnx") for m in ("bert", "resnet18", "decoder")] + \
        [str(light / "light_densenet121.onnx")]


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def library_bench(models: list[str], only: list[str], base: dict) -> None:
    """Library compile from nothing with 1 and 2 processes; compiled tier with it cached."""
    import time
    with tempfile.TemporaryDirectory() as tmp:
        for jobs in (1, 2):
            env = dict(base, JITORT_CACHE_DIR=f"{tmp}/j{jobs}", NUMBA_CACHE_DIR=f"{tmp}/n{jobs}")
            cmd = [sys.executable, "-m", "jitort", "warmup", "--library", "--jobs", str(jobs),
                   "-q", *[f"--only={o}" for o in only]]
            load0 = _load()
            t = time.perf_counter()
            p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                               cwd=tempfile.gettempdir())
            secs = time.perf_counter() - t
            if p.returncode != 0:
                raise SystemExit(f"warmup --library failed:\n{p.stdout}{p.stderr[-3000:]}")
            print(f"library from nothing, --jobs {jobs}: {secs:.1f} s (load {load0} -> "
                  f"{_load()})", flush=True)
            print("  " + "\n  ".join(p.stdout.strip().splitlines()), flush=True)
        for model in models:
            name = Path(model).stem
            env = dict(base, JITORT_CACHE_DIR=f"{tmp}/m-{name}", NUMBA_CACHE_DIR=f"{tmp}/n2")
            load0 = _load()
            r = child(CHILD, model, env)
            print(f"{name}: compiled tier {r['compiled']:.2f} s with the library cached, first "
                  f"result {r['first']:.2f} s (load {load0} -> {_load()}), diff "
                  f"{r['diff_compiled']:.1e}" + ("" if r["ok"] else "  COMPILED TIER NOT REACHED"),
                  flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("models", nargs="*")
    ap.add_argument("--skip-cold", action="store_true",
                    help="no run with an empty Numba cache (the library state uses this "
                         "process's NUMBA_CACHE_DIR as it is)")
    ap.add_argument("--jobs", type=int, default=None, help="compile processes")
    ap.add_argument("--library", action="store_true",
                    help="kernel library from nothing (1 and 2 processes), then models' "
                         "compiled tier with it cached")
    ap.add_argument("--only", action="append", default=[],
                    help="with --library: only these kernels (jitort warmup --only)")
    a = ap.parse_args(argv)
    base = dict(os.environ)
    base.pop("JITORT_TIERED", None)
    if a.jobs:
        base["JITORT_COMPILE_JOBS"] = str(a.jobs)
    if a.library:
        shared = Path(os.environ.get("JITORT_MODEL_DIR", ROOT.parent / "shared" / "models"))
        library_bench(a.models or [str(shared / f"{m}.onnx") for m in ("bert", "resnet18")],
                      a.only, base)
        return 0
    print(f"{'model':<14}{'state':<9}{'first s':>9}{'compiled s':>12}{'ort s':>8}"
          f"{'first/ort':>10}  process  diff(first, compiled)")
    for model in a.models or default_models():
        name = Path(model).stem.replace("light_", "")
        ort_s = child(ORT_CHILD, model, base)["first"]
        with tempfile.TemporaryDirectory() as tmp:
            numba_dir = base.get("NUMBA_CACHE_DIR") if a.skip_cold else f"{tmp}/numba"
            states = [] if a.skip_cold else [("cold", f"{tmp}/j1")]
            states += [("library", f"{tmp}/j2"), ("warm", f"{tmp}/j2")]
            for state, jdir in states:
                env = dict(base, JITORT_CACHE_DIR=jdir)
                if numba_dir:
                    env["NUMBA_CACHE_DIR"] = numba_dir
                r = child(CHILD, model, env)
                print(f"{name:<14}{state:<9}{r['first']:>9.2f}{r['compiled']:>12.2f}"
                      f"{ort_s:>8.2f}{r['first'] / ort_s:>10.1f}  "
                      f"{'yes' if r['in_child'] else 'no ':<7}  "
                      f"{r['diff_first']:.1e}, {r['diff_compiled']:.1e}"
                      + ("" if r["ok"] else "  COMPILED TIER NOT REACHED"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
