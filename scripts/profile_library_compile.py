#!/usr/bin/env python
"""Where the kernel library's compile time goes: every Numba compilation, per function.

    python scripts/profile_library_compile.py [--only KERNEL ...] [--passes N] [--json OUT]
    python scripts/profile_library_compile.py --model MODEL.onnx [--passes N]

Compiles the entries of ``jitort warmup --library`` (jitort/library_signatures.txt) one after
the other in this process, with empty temporary ``NUMBA_CACHE_DIR``/``JITORT_CACHE_DIR``
(unless set), and prints per entry its seconds, then per compiled function (module.name and
argument types) its inclusive and exclusive seconds (exclusive: without the callees compiled
during it). Numba links each callee's LLVM module into its caller and optimizes and emits it
again; since ``kernels/_link.py`` only callees under 400 LLVM instructions are (the rest are
called by name: ``JITORT_KERNEL_LINK=copy`` for the old way), so a function's exclusive time
includes re-emitting its small callees. With ``--passes N``
(sets ``NUMBA_LLVM_PASS_TIMINGS=1``) the N functions with the most exclusive time also get
their LLVM pass timings (``dispatcher.get_metadata(sig)['llvm_pass_timings']``). Print the
host load beside the numbers: on a shared machine they move with it.

``--model``: the same for one model's generated code instead (its drivers and fused
kernels), with the kernel library as cached (the usual cache; an empty temporary
``JITORT_CACHE_DIR``): ``jitort.compile(model, tiered=False)`` and a first call on the inputs
``scripts/bench_cold_start.py`` uses, then each compiled function and, per driver function,
Numba's own pass times (type inference, lowering).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--passes", type=int, default=0, help="LLVM pass timings of the N worst")
    ap.add_argument("--top", type=int, default=30, help="functions listed")
    ap.add_argument("--json", default=None, help="write every compilation here")
    ap.add_argument("--model", default=None, help="profile this model's generated code")
    a = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="jitort-prof-")
    if a.model is None:  # the library from nothing; with --model, the library as cached
        os.environ.setdefault("NUMBA_CACHE_DIR", f"{tmp}/numba")
    os.environ.setdefault("JITORT_CACHE_DIR", f"{tmp}/jitort")
    if a.passes:
        os.environ["NUMBA_LLVM_PASS_TIMINGS"] = "1"
    from numba.core import event

    from jitort import library
    stack, rows = [], []

    class Timer(event.Listener):
        def on_start(self, ev):
            stack.append([time.perf_counter(), 0.0])

        def on_end(self, ev):
            t0, inner = stack.pop()
            dt = time.perf_counter() - t0
            if stack:
                stack[-1][1] += dt
            d = ev.data["dispatcher"]
            rows.append({"fn": f"{d.py_func.__module__.rsplit('.', 1)[-1]}.{d.py_func.__name__}",
                         "sig": str(ev.data.get("args")), "incl": dt, "excl": dt - inner,
                         "parallel": bool(d.targetoptions.get("parallel")), "disp": d,
                         "args": ev.data.get("args")})
    event.register("numba:compile", Timer())
    t_all = time.perf_counter()
    if a.model:
        _compile_model(a.model)
    else:
        es = library.entries(only=[o for item in a.only for o in item.split(",") if o],
                             with_cache=False)
        print(f"load {os.getloadavg()[0]:.1f}; {len(es)} entries")
        for e in es:
            secs = library.compile_entry(e)
            print(f"{secs:8.1f} s  {e.text()[:110]}", flush=True)
    total = time.perf_counter() - t_all
    print(f"total {total:.1f} s (load {os.getloadavg()[0]:.1f})\n")
    rows.sort(key=lambda r: -r["excl"])
    print(f"{'excl s':>8}{'incl s':>8}  function (argument types)")
    for r in rows[:a.top]:
        par = " [parallel]" if r["parallel"] else ""
        print(f"{r['excl']:8.1f}{r['incl']:8.1f}  {r['fn']}{par} {r['sig'][:90]}")
    print(f"{len(rows)} compilations, {sum(r['excl'] for r in rows):.1f} s; parallel functions "
          f"{sum(r['excl'] for r in rows if r['parallel']):.1f} s")
    _twins(rows)
    for r in rows if a.model else ():
        if r["fn"].startswith("driver_"):
            cres = r["disp"].overloads.get(tuple(r["args"])) if r["args"] is not None else None
            times = cres.metadata.get("pipeline_times", {}).get("nopython", {}) if cres else {}
            top = sorted(((v.run, k.split("_", 1)[1]) for k, v in times.items()), reverse=True)
            print(f"  {r['fn']}: " + ", ".join(f"{n} {t:.2f} s" for t, n in top[:3]))
    for r in rows[:a.passes]:
        md = r["disp"].get_metadata(r["args"]) if r["args"] is not None else {}
        timings = md.get("llvm_pass_timings")
        print(f"\nLLVM pass timings of {r['fn']} ({r['excl']:.1f} s exclusive):")
        if timings is None:
            print("  (none recorded)")
            continue
        for rec in timings:
            print(f"  {rec.name}: {rec.timings.get_total_time():.2f} s")
            for p in rec.timings.list_top(5):
                print(f"      {p.wall_time:6.2f} s  {p.pass_name}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump([{k: v for k, v in r.items() if k not in ("disp", "args")} for r in rows],
                      f, indent=1)
    return 0


def _twins(rows) -> None:
    """Kernel-library functions compiled more than once, with the argument positions whose
    types differ: each extra compilation is time spent on the same code. Numba specializes
    a call on a literal argument (``f(x, 0)``: ``Literal[int](0)``), also on a loop variable
    whose first value is a literal (``m = 0`` then ``m = max(m, v)``: type inference may
    resolve the call once with the literal before it settles on int64), and a prange index
    is uint64 (``np.int64(0)``, ``np.int64(d)`` give one signature)."""
    by: dict = {}
    for r in rows:
        if r["args"] is not None and r["disp"].py_func.__module__.startswith("jitort.kernels"):
            by.setdefault(r["fn"], []).append(r)
    found = []
    for fn, rs in by.items():
        if len(rs) < 2:
            continue
        sigs = [tuple(map(str, r["args"])) for r in rs]
        n = min(map(len, sigs))
        diff = [i for i in range(n) if len({s[i] for s in sigs}) > 1]
        extra = sum(r["excl"] for r in rs) - max(r["excl"] for r in rs)
        found.append((extra, fn, len(rs), ", ".join(
            f"{i}: " + " / ".join(sorted({s[i] for s in sigs})) for i in diff[:3])))
    found.sort(reverse=True)
    lost = sum(f[0] for f in found)
    print(f"\n{len(found)} library functions compiled more than once ({lost:.1f} s exclusive "
          "beyond one compilation each); argument positions that differ:")
    for extra, fn, k, d in found:
        print(f"{extra:8.1f} {k}x {fn}  {d[:120]}")


def _compile_model(path: str) -> None:
    """``jitort.compile(path)`` and a first call (which compiles its generated code)."""
    import numpy as np

    import jitort
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_warm_start import FEEDS
    print(f"load {os.getloadavg()[0]:.1f}; {path}")
    cm = jitort.compile(path, tiered=False)
    env = {"cm": cm, "np": np}
    exec(FEEDS, env)
    t = time.perf_counter()
    cm.run(None, env["feeds"])
    print(f"first call (compiles the generated code): {time.perf_counter() - t:.1f} s, "
          f"{jitort.compile_count()} Numba compilations")


if __name__ == "__main__":
    sys.exit(main())
