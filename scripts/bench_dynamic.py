"""Dynamic shapes and memory, issue 4: run the shape grid over the shared models and report.

    python scripts/bench_dynamic.py [--models bert gpt2 vit resnet18] [--calls 2000] [--no-peak]

For every model and shape of the grid (bert/gpt2: B in 1,2,4,8 x S in 8..256; vit/resnet18:
B in 1,2,4,8) it checks the output against onnxruntime and reports:

* Numba compilations after the first call (must be 0) and generated drivers;
* planning cost of a new shape: the CPU time (of the calling thread) and wall time of
  ``SegmentCompiler.plan`` on first sight of the shape (median / max over the grid), and
  first-call minus steady-state latency;
* workspace / liveness lower bound (max over the grid);
* RSS after ``--calls`` calls cycling through the grid vs after the first pass (must be within 5 %);
* peak activation memory, jitort vs onnxruntime (1 thread each, default session options and
  also with onnxruntime's CPU arena off): in a fresh process per engine, warmed by one call at
  the grid's smallest shape (at that shape itself: jitort warmed then ``release()``d, onnxruntime
  not warmed), the heap high-water mark during one call at the shape minus the
  bytes live before it, counted by a malloc interposer (scripts/malloc_peak.c, built with gcc,
  loaded through LD_PRELOAD). jitort's planned bytes (workspace + host values + outputs) are
  printed beside its measured peak as a cross-check.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GRID = {"bert": [(b, s) for b in (1, 2, 4, 8) for s in (8, 16, 32, 64, 128, 256)],
        "gpt2": [(b, s) for b in (1, 2, 4, 8) for s in (8, 16, 32, 64, 128, 256)],
        "vit": [(b, None) for b in (1, 2, 4, 8)],
        "resnet18": [(b, None) for b in (1, 2, 4, 8)]}


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def feeds_for(name, b, s):
    from tests.models import shared_feeds
    return shared_feeds(name, b, s) if s else shared_feeds(name, b)


def grid_report(name: str, calls: int) -> dict:
    import numpy as np
    import onnxruntime as ort

    import jitort
    from jitort.codegen import cpu
    from tests.models import shared_path

    path = shared_path(name)
    so = ort.SessionOptions()
    # the reference runs between jitort's calls: its idle pool must not spin against them
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    cm = jitort.compile(path, tiered=False)
    plan_ms: list[float] = []
    plan_wall: list[float] = []
    orig = cpu.SegmentCompiler.plan

    def timed(self, env):
        # CPU time of the planning thread (process time would also count Numba's worker
        # threads spinning after the previous kernel), and wall time
        t, w = time.thread_time(), time.perf_counter()
        try:
            return orig(self, env)
        finally:
            plan_ms.append((time.thread_time() - t) * 1e3)
            plan_wall.append((time.perf_counter() - w) * 1e3)

    cpu.SegmentCompiler.plan = timed
    try:
        grid = GRID[name]
        cm.run(None, feeds_for(name, *grid[0]))  # compiles (or loads from the cache)
        compiles0 = jitort.compile_count()
        plan_ms.clear()
        plan_wall.clear()
        overhead, worst_err, worst_ratio = [], 0.0, 0.0
        by_shape: dict[str, float] = {}
        for b, s in grid[1:]:  # every one a new shape
            f = feeds_for(name, b, s)
            n_before = len(plan_ms)
            t0 = time.perf_counter()
            got = cm.run(None, f)[0]
            first = time.perf_counter() - t0
            by_shape[f"{b}x{s}" if s else f"B{b}"] = round(sum(plan_ms[n_before:]), 2)
            steady = min(_timeit(lambda: cm.run(None, f)) for _ in range(3))
            overhead.append((first - steady) * 1e3)
            want = sess.run(None, f)[0]
            worst_err = max(worst_err, float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) + 1e-12)))
            worst_ratio = max(worst_ratio, max(p.memory.ratio for p in cm.plans()))
        new_compiles = jitort.compile_count() - compiles0
        first_pass_rss = rss_bytes()
        n = 0
        while n < calls:
            for b, s in grid:
                cm.run(None, feeds_for(name, b, s))
                n += 1
        final_rss = rss_bytes()
    finally:
        cpu.SegmentCompiler.plan = orig
    replays = sum(c.replays for c in cm._compilers.values())
    return {"model": name, "shapes": len(grid), "compiles_after_first": new_compiles,
            "drivers": len(cm.generated_sources()), "replayed_plans": replays,
            "plan_ms_median": statistics.median(plan_ms), "plan_ms_max": max(plan_ms),
            "plan_ms_worst_shapes": dict(sorted(by_shape.items(), key=lambda kv: -kv[1])[:4]),
            "plan_wall_ms_median": statistics.median(plan_wall),
            "first_call_overhead_ms_median": statistics.median(overhead),
            "max_rel_err_vs_ort": worst_err, "max_ws_over_bound": worst_ratio,
            "calls": n, "rss_first_pass_mb": first_pass_rss / 2**20,
            "rss_after_calls_mb": final_rss / 2**20,
            "rss_growth_pct": 100 * (final_rss - first_pass_rss) / first_pass_rss}


def _timeit(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


# --- peak activation memory: one fresh process per (engine, model, shape) --------------------
#
# Every child runs under LD_PRELOAD of scripts/malloc_peak.c (built here with gcc), which counts
# the bytes live on the heap: the peak during the measured call minus the bytes live before it
# is what the call needed beyond what the engine held already. Each engine is warmed by one call
# at the smallest shape of the grid (code loaded; jitort's Numba kernels come from the cache),
# so the measured call at a new, larger shape allocates its activations afresh.

_CHILD = r"""
import ctypes, json, os, sys
sys.path.insert(0, {root!r})
from scripts.bench_dynamic import feeds_for
name, engine = {name!r}, {engine!r}
small, shape = {small!r}, {shape!r}
mp = ctypes.CDLL(None)
mp.mp_peak.restype = mp.mp_current.restype = ctypes.c_long
from tests.models import shared_path
if engine.startswith("ort"):
    import onnxruntime as ort
    so = ort.SessionOptions(); so.intra_op_num_threads = 1
    if engine == "ort_noarena":
        so.enable_cpu_mem_arena = False
    s = ort.InferenceSession(str(shared_path(name)), so, providers=["CPUExecutionProvider"])
    run = lambda f: s.run(None, f)
else:
    import jitort
    m = jitort.compile(shared_path(name), threads=1, tiered=False)
    run = lambda f: m.run(None, f)
if tuple(small) != tuple(shape):
    run(feeds_for(name, *small))
elif engine == "jitort":  # measured shape == warm-up shape: warm, then drop plans and workspace
    run(feeds_for(name, *small))
    m.release()
# (onnxruntime at the warm-up shape itself: a fresh session, not warmed -- its arena would
# otherwise already hold that shape's blocks)
f = feeds_for(name, *shape)
mp.mp_reset()
before = mp.mp_current()
out = run(f)
peak = mp.mp_peak() - before
extra = {{}}
if engine == "jitort":
    plan = max(m.plans(), key=lambda p: p.ws_bytes)
    outs = sum(int(a.nbytes) for a in out)
    extra = {{"workspace": m.workspace_bytes, "lower_bound": m.workspace_lower_bound,
              "planned": plan.ws_bytes + sum(int(h.nbytes) for h in plan.pb) + outs}}
print(json.dumps({{"peak": peak, **extra}}))
"""


def _malloc_peak_lib() -> str:
    """Build scripts/malloc_peak.c into a temp folder once; return the .so path."""
    import tempfile
    out = Path(tempfile.gettempdir()) / f"jitort-malloc-peak-{os.getuid()}.so"
    src = ROOT / "scripts" / "malloc_peak.c"
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(out), str(src), "-ldl"],
                       check=True)
    return str(out)


ENGINES = ("jitort", "ort", "ort_noarena")


def peak_memory(name: str, shape) -> dict:
    env = dict(os.environ, LD_PRELOAD=_malloc_peak_lib())
    res = {}
    for engine in ENGINES:
        code = _CHILD.format(root=str(ROOT), name=name, engine=engine, small=GRID[name][0],
                             shape=shape)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env=env)
        res[engine] = json.loads(out.stdout.strip().splitlines()[-1])
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", default=list(GRID))
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--no-peak", action="store_true")
    args = ap.parse_args(argv)
    from tests.models import shared_path
    rows = []
    for name in args.models:
        if not shared_path(name).exists():
            print(f"{name}: {shared_path(name)} not present, skipped")
            continue
        r = grid_report(name, args.calls)
        rows.append(r)
        print(json.dumps(r), flush=True)
    print()
    print("| model | shapes | compiles after 1st | drivers | plan CPU ms (median/max) | plan wall ms (median) "
          "| 1st-call overhead ms (median) "
          "| ws / bound (max) | max rel err vs ORT | RSS growth over calls |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['shapes']} | {r['compiles_after_first']} | {r['drivers']} | "
              f"{r['plan_ms_median']:.2f} / {r['plan_ms_max']:.2f} | {r['plan_wall_ms_median']:.2f} | "
              f"{r['first_call_overhead_ms_median']:.1f} | "
              f"{r['max_ws_over_bound']:.3f} | {r['max_rel_err_vs_ort']:.1e} | "
              f"{r['rss_growth_pct']:+.2f} % ({r['calls']} calls) |")
    if args.no_peak:
        return 0
    print()
    print("| model | shape | jitort heap peak MB (planned) | ORT heap peak MB | jitort/ORT "
          "| ORT without arena MB | jitort/ORT no arena |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        name = r["model"]
        for shape in ([(1, 128), GRID[name][-1]] if GRID[name][0][1] else [(1, None), GRID[name][-1]]):
            p = peak_memory(name, shape)
            j, o, n = p["jitort"]["peak"], p["ort"]["peak"], p["ort_noarena"]["peak"]
            mb = 2 ** 20
            print(f"| {name} | {shape} | {j / mb:.2f} ({p['jitort']['planned'] / mb:.2f}) | "
                  f"{o / mb:.2f} | {j / max(o, 1):.2f} | {n / mb:.2f} | {j / max(n, 1):.2f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
